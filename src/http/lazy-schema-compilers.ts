import { createRequire } from 'node:module';
import type { FastifyServerOptions } from 'fastify';

/**
 * Fastify's schema compilers, made lazy: a route's request validator (ajv) and each response serializer
 * (fast-json-stringify) are compiled the first time that route needs them, not all while the app is built.
 *
 * Why: compiling every schema of every route before the app was ready was ~70 % of the service's start-up CPU
 * (a CPU profile of `buildApp`: ajv code generation ≈ 1.5 s, ~150 fast-json-stringify builds ≈ 0.7 s on this
 * VM), paid again on every restart and by every test that builds the app, for routes a process may never be
 * asked for. Lazily, a route pays its own compilation once, on its first request (milliseconds), with Fastify's
 * own default compilers and the same options and shared schemas, so what is accepted and the bytes sent are the
 * same. `compileAll()` compiles everything the routes declared (`BuiltApp.compileAllSchemas()`,
 * test/http.lazy-schema-compilers.test.ts), so a schema that cannot compile still fails the suite, not a user's
 * first request.
 *
 * Request header schemas are refused at start-up: Fastify lowercases their property names only for its own
 * default compiler, and the service validates no request header through a schema.
 */

/** What Fastify hands a compiler for one schema of one route. */
export interface RouteSchemaDefinition {
  schema?: unknown;
  method?: string;
  url?: string;
  httpPart?: string;
  httpStatus?: string;
  contentType?: string;
}
type Validate = ((data: unknown) => unknown) & { errors?: unknown };
type Serialize = (data: unknown) => string;
/** Fastify's `compilersFactory.buildValidator` / `buildSerializer` signatures. */
export type ValidatorFactory = (
  externalSchemas: unknown,
  options: unknown,
) => (definition: RouteSchemaDefinition) => Validate;
export type SerializerFactory = (
  externalSchemas: unknown,
  options: unknown,
) => (definition: RouteSchemaDefinition) => Serialize;

// Fastify's default factories, taken from Fastify's own dependencies so their versions always match it.
const requireFromFastify = createRequire(createRequire(import.meta.url).resolve('fastify'));
export const defaultValidatorFactory: ValidatorFactory = (
  requireFromFastify('@fastify/ajv-compiler') as { AjvCompiler(): ValidatorFactory }
).AjvCompiler();
export const defaultSerializerFactory: SerializerFactory = (
  requireFromFastify('@fastify/fast-json-stringify-compiler') as { SerializerSelector(): SerializerFactory }
).SerializerSelector();

/** Fastify's option type: unions over ajv and JTD compilers that a wrapper cannot name, so the factory is cast once. */
type FastifyCompilersFactory = NonNullable<NonNullable<FastifyServerOptions['schemaController']>['compilersFactory']>;

/**
 * The `compilersFactory` for `Fastify({ schemaController: { compilersFactory: compilers.factory } })`. It
 * remembers what it deferred so `compileAll()` can compile every one (the self-check of every declared schema).
 */
export class LazySchemaCompilers {
  private readonly deferred: Array<() => unknown> = [];

  constructor(
    private readonly validators: ValidatorFactory = defaultValidatorFactory,
    private readonly serializers: SerializerFactory = defaultSerializerFactory,
  ) {}

  readonly factory: FastifyCompilersFactory = this.lazyFactories() as unknown as FastifyCompilersFactory;

  private lazyFactories(): { buildValidator: ValidatorFactory; buildSerializer: SerializerFactory } {
    return {
      buildValidator: (externalSchemas, options) => {
        const compile = this.validators(externalSchemas, options);
        return (definition) => {
          if (definition.httpPart === 'headers')
            throw new Error('request header schemas are not supported by the lazy schema compiler');
          let compiledValidate: Validate | undefined;
          const compiled = () => (compiledValidate ??= compile(definition));
          this.deferred.push(compiled);
          // Fastify reads `errors` from the function it was given, after a failed validation.
          const validate: Validate = (data) => {
            const inner = compiled();
            const valid = inner(data);
            validate.errors = inner.errors;
            return valid;
          };
          return validate;
        };
      },
      buildSerializer: (externalSchemas, options) => {
        const compile = this.serializers(externalSchemas, options);
        return (definition) => {
          let serialize: Serialize | undefined;
          const compiled = () => (serialize ??= compile(definition));
          this.deferred.push(compiled);
          return (data) => compiled()(data);
        };
      },
    };
  }

  /** Compiles every validator and serializer not compiled yet (a schema that cannot compile throws here); returns how many exist. */
  compileAll(): number {
    for (const compiled of this.deferred) compiled();
    return this.deferred.length;
  }
}
