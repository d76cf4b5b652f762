import Fastify from 'fastify';
import { afterAll, describe, expect, it } from 'vitest';
import { defaultSerializerFactory, LazySerializers } from '../src/http/lazy-serializer.ts';
import { startTestApp, type TestApp } from './helpers/app.ts';

describe('response serializers compiled on first use', () => {
  const apps: TestApp[] = [];
  afterAll(async () => {
    await Promise.all(apps.map((app) => app.close()));
  });

  it('compiles a route serializer at its first reply, once, and sends what the default compiler sends', async () => {
    const compiled: string[] = [];
    const serializers = new LazySerializers((external, options) => {
      const compile = defaultSerializerFactory(external, options);
      return (definition) => {
        compiled.push(`${definition.method} ${definition.url} ${definition.httpStatus}`);
        return compile(definition);
      };
    });
    // No automatic HEAD route: it would be a second route with its own serializers.
    const app = Fastify({ exposeHeadRoutes: false, schemaController: { compilersFactory: { buildSerializer: serializers.factory } } });
    const response = { type: 'object', properties: { name: { type: 'string' }, count: { type: 'integer' } } };
    app.get('/thing', { schema: { response: { 200: response, 404: response } } }, async () => ({ name: 'a', count: 2, secret: 'dropped' }));
    await app.ready();
    expect(compiled, 'nothing compiled before the first reply').toEqual([]);

    for (let i = 0; i < 2; i++) {
      const reply = await app.inject({ method: 'GET', url: '/thing' });
      expect(reply.statusCode).toBe(200);
      // fast-json-stringify writes only the declared properties, as Fastify's eager default does.
      expect(reply.body).toBe('{"name":"a","count":2}');
    }
    expect(compiled).toEqual(['GET /thing 200']);
    expect(serializers.compileAll()).toBe(2);
    expect(compiled).toEqual(['GET /thing 200', 'GET /thing 404']);
    await app.close();
  });

  it('compileAll throws for a response schema that cannot compile, though the app became ready', async () => {
    const serializers = new LazySerializers();
    const app = Fastify({ schemaController: { compilersFactory: { buildSerializer: serializers.factory } } });
    app.get('/broken', { schema: { response: { 200: { $ref: 'nowhere#' } } } }, async () => ({}));
    await app.ready();
    expect(() => serializers.compileAll()).toThrow();
    await app.close();
  });

  it('every response schema the service declares compiles', async () => {
    const app = await startTestApp();
    apps.push(app);
    // ~150 serializers: every status code of every route with a response schema.
    expect(app.compileAllSerializers()).toBeGreaterThan(100);
  });
});
