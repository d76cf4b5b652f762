import Fastify from 'fastify';
import { afterAll, describe, expect, it } from 'vitest';
import {
  defaultSerializerFactory,
  defaultValidatorFactory,
  LazySchemaCompilers,
} from '../src/http/lazy-schema-compilers.ts';
import { startTestApp, type TestApp } from './helpers/app.ts';

describe('route schemas (request validators, response serializers) compiled on first use', () => {
  const apps: TestApp[] = [];
  afterAll(async () => {
    await Promise.all(apps.map((app) => app.close()));
  });

  it('compiles a route validator and serializer at its first request, once, and behaves as the default compilers do', async () => {
    const compiled: string[] = [];
    const compilers = new LazySchemaCompilers(
      (external, options) => {
        const compile = defaultValidatorFactory(external, options);
        return (definition) => {
          compiled.push(`${definition.method} ${definition.url} ${definition.httpPart}`);
          return compile(definition);
        };
      },
      (external, options) => {
        const compile = defaultSerializerFactory(external, options);
        return (definition) => {
          compiled.push(`${definition.method} ${definition.url} ${definition.httpStatus}`);
          return compile(definition);
        };
      },
    );
    // No automatic HEAD route: it would be a second route with its own compilers.
    const app = Fastify({ exposeHeadRoutes: false, schemaController: { compilersFactory: compilers.factory } });
    const response = { type: 'object', properties: { name: { type: 'string' }, count: { type: 'integer' } } };
    const querystring = { type: 'object', properties: { n: { type: 'integer' } }, required: ['n'] };
    app.get<{ Querystring: { n: number } }>(
      '/thing',
      { schema: { querystring, response: { 200: response, 404: response } } },
      async (request) => ({
        name: 'a',
        count: request.query.n,
        secret: 'dropped',
      }),
    );
    await app.ready();
    expect(compiled, 'nothing compiled before the first request').toEqual([]);

    for (let i = 0; i < 2; i++) {
      const reply = await app.inject({ method: 'GET', url: '/thing?n=2' });
      expect(reply.statusCode).toBe(200);
      // fast-json-stringify writes only the declared properties, as Fastify's eager default does.
      expect(reply.body).toBe('{"name":"a","count":2}');
    }
    expect(compiled).toEqual(['GET /thing querystring', 'GET /thing 200']);
    // A failed validation still reaches Fastify with ajv's errors: 400 naming the field.
    const refused = await app.inject({ method: 'GET', url: '/thing?n=x' });
    expect(refused.statusCode).toBe(400);
    expect(refused.json().message).toMatch(/querystring\/n/u);
    expect(compilers.compileAll()).toBe(3);
    expect(compiled).toEqual(['GET /thing querystring', 'GET /thing 200', 'GET /thing 404']);
    await app.close();
  });

  it('compileAll throws for a response schema that cannot compile, though the app became ready', async () => {
    const compilers = new LazySchemaCompilers();
    const app = Fastify({ schemaController: { compilersFactory: compilers.factory } });
    app.get('/broken', { schema: { response: { 200: { $ref: 'nowhere#' } } } }, async () => ({}));
    await app.ready();
    expect(() => compilers.compileAll()).toThrow();
    await app.close();
  });

  it('every request and response schema the service declares compiles', async () => {
    const app = await startTestApp();
    apps.push(app);
    // Every validated request part and every status code of every route with a response schema.
    expect(app.compileAllSchemas()).toBeGreaterThan(100);
  });
});
