/**
 * Fastify's schema compilers, made lazy: a route's request validator (ajv) and response serializer
 * (fast-json-stringify) are compiled the first time that route needs them, not all at start-up.
 *
 * Why: compiling every schema of every route was ~70 % of the service's start-up CPU (measured with a CPU profile
 * of `buildApp`: ajv code generation and fast-json-stringify builds), paid again on each restart, for routes a
 * given deployment may never be asked for. Lazily, a route pays its own compilation once, on its first request
 * (milliseconds), with the same compilers and options Fastify would use.
 *
 * Request header schemas are refused at start-up: Fastify lowercases them only for its own default compiler, and
 * the service validates no request headers through schemas.
 */
import type { FastifyServerOptions } from 'fastify';
import AjvCompiler from '@fastify/ajv-compiler';
import SerializerSelector from '@fastify/fast-json-stringify-compiler';

type CompilersFactory = NonNullable<NonNullable<FastifyServerOptions['schemaController']>['compilersFactory']>;
type ValidatorFactory = NonNullable<CompilersFactory['buildValidator']>;
type SerializerFactory = NonNullable<CompilersFactory['buildSerializer']>;
type Validate = ((data: unknown) => unknown) & { errors?: unknown };
type RouteDefinition = { httpPart?: string };
type EagerCompile = (route: RouteDefinition) => Validate;
type EagerBuild = (route: RouteDefinition) => (data: unknown) => string;

const eagerValidators = AjvCompiler();
const eagerSerializers = SerializerSelector();

// Typed loosely and cast once: Fastify's factory types are unions over ajv and JTD compilers that a wrapper cannot name.
const buildValidator = ((externalSchemas: Parameters<typeof eagerValidators>[0], ajvOptions: Parameters<typeof eagerValidators>[1]) => {
  const compile = eagerValidators(externalSchemas, ajvOptions) as unknown as EagerCompile;
  return (route: RouteDefinition) => {
    if (route.httpPart === 'headers') throw new Error('request header schemas are not supported by the lazy schema compiler');
    let compiled: Validate | undefined;
    // Fastify reads `errors` from the function it was given after a failed validation.
    const validate: Validate = (data) => {
      compiled ??= compile(route);
      const valid = compiled(data);
      validate.errors = compiled.errors;
      return valid;
    };
    return validate;
  };
}) as unknown as ValidatorFactory;

const buildSerializer = ((externalSchemas: Parameters<typeof eagerSerializers>[0], serializerOptions: Parameters<typeof eagerSerializers>[1]) => {
  const build = eagerSerializers(externalSchemas, serializerOptions) as unknown as EagerBuild;
  return (route: RouteDefinition) => {
    let compiled: ((data: unknown) => string) | undefined;
    return (data: unknown) => (compiled ??= build(route))(data);
  };
}) as unknown as SerializerFactory;

/** For `Fastify({ schemaController: { compilersFactory: LAZY_SCHEMA_COMPILERS } })`. */
export const LAZY_SCHEMA_COMPILERS: CompilersFactory = { buildValidator, buildSerializer };
