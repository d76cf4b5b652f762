import { createRequire } from 'node:module';

/**
 * Response serializers compiled on first use instead of while the app is built.
 *
 * Fastify compiles a fast-json-stringify function for every status code of every route's response schema
 * before it is ready: ~150 serializers, about a fifth of the service's start-up CPU (and of every test that
 * builds the app), though a process answers only a few of those statuses before long. Here each route's
 * serializer is compiled the first time a reply with that status is sent (a few milliseconds, once per
 * process), by Fastify's own default compiler with the same options and shared schemas, so the bytes sent
 * are the same. `BuiltApp.compileAllSerializers()` compiles every response schema the routes declare
 * (test/http.lazy-serializer.test.ts), so a schema that cannot compile still fails the suite, not a first reply.
 */

/** What Fastify hands a serializer compiler for one response schema. */
export interface ResponseSchemaDefinition {
  schema?: unknown;
  method?: string;
  url?: string;
  httpStatus?: string;
  contentType?: string;
}
type Serialize = (data: unknown) => string;
type CompileSerializer = (definition: ResponseSchemaDefinition) => Serialize;
/** Fastify's `schemaController.compilersFactory.buildSerializer` signature. */
export type SerializerFactory = (externalSchemas: unknown, serializerOptions: unknown) => CompileSerializer;

// Fastify's default serializer factory, taken from Fastify's own dependency so the version always matches it.
const requireFromFastify = createRequire(createRequire(import.meta.url).resolve('fastify'));
export const defaultSerializerFactory: SerializerFactory = (requireFromFastify('@fastify/fast-json-stringify-compiler') as { SerializerSelector(): SerializerFactory }).SerializerSelector();

/**
 * The `buildSerializer` for `Fastify({ schemaController: { compilersFactory } })`: Fastify's default, each
 * serializer compiled when first used. It remembers the serializers it handed out so `compileAll()` can compile
 * every one (the self-check of every declared response schema).
 */
export class LazySerializers {
  private readonly deferred: Array<() => Serialize> = [];

  constructor(private readonly base: SerializerFactory = defaultSerializerFactory) {}

  readonly factory: SerializerFactory = (externalSchemas, serializerOptions) => {
    const compile = this.base(externalSchemas, serializerOptions);
    return (definition) => {
      let serialize: Serialize | undefined;
      const compiled = () => (serialize ??= compile(definition));
      this.deferred.push(compiled);
      return (data) => compiled()(data);
    };
  };

  /** Compiles every serializer not compiled yet (a schema that cannot compile throws here); returns how many exist. */
  compileAll(): number {
    for (const compiled of this.deferred) compiled();
    return this.deferred.length;
  }
}
