import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rawRequest, startTestApp, type TestApp } from './helpers/app.ts';

/**
 * Requests refused before any route runs — by Fastify's router (bad percent-escape, over-long path
 * parameter) or by Node's HTTP parser (oversized headers) — still answer with the service's `{detail}`
 * body (spec 7), as the fuzz suite demands of every 4xx.
 */
describe('errors raised before routing answer with {detail}', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp({ withRepoAvatars: false });
  });
  afterAll(async () => {
    await t?.close();
  });

  const detailOf = (body: string): unknown => JSON.parse(body).detail;

  it('answers a malformed percent-escape in the path with 400 {detail}', async () => {
    const res = await rawRequest(t.baseUrl, 'GET', '/avatars/%zz');
    expect(res.status).toBe(400);
    expect(detailOf(res.body)).toMatch(/percent-encoded/);
  });

  it('answers a path parameter longer than the router allows with 414 {detail}', async () => {
    const res = await rawRequest(t.baseUrl, 'GET', `/sessions/${'a'.repeat(500)}`);
    expect(res.status).toBe(414);
    expect(detailOf(res.body)).toMatch(/too long/);
  });

  it('answers request headers over the HTTP parser limit with 431 {detail}', async () => {
    const res = await rawRequest(t.baseUrl, 'GET', `/healthz?${'x'.repeat(20_000)}`);
    expect(res.status).toBe(431);
    expect(detailOf(res.body)).toMatch(/too large/);
  });
});
