import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from './helpers/app.ts';
import { exchangeOnce } from './helpers/raw-http.ts';

/**
 * Issue 25 row 8: requests Node's HTTP layer refuses before Fastify sees them answer `{detail}` over a real
 * socket (inject cannot reproduce these): headers far over the parser's limit get their 431 rather than a TCP
 * reset while the client is still sending, and an unknown `Expect` gets a JSON 417 instead of an empty chunked body.
 */
describe('edge refusals answer with {detail}', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp({ withRepoAvatars: false });
  });
  afterAll(async () => {
    await t?.close();
  });

  const HUGE = 100 * 1024;

  it('a 100 KB Cookie header answers 431 {detail}, not a connection reset', async () => {
    const res = await exchangeOnce(t.baseUrl, {
      method: 'GET',
      path: '/healthz',
      headers: { cookie: `c=${'x'.repeat(HUGE)}` },
    });
    expect(res.status).toBe(431);
    expect(res.headers['content-type']).toMatch(/application\/json/u);
    expect(JSON.parse(res.body).detail).toMatch(/too large/u);
  });

  it('a 100 KB query string answers 431 {detail}, not a connection reset', async () => {
    const res = await exchangeOnce(t.baseUrl, { method: 'GET', path: `/healthz?q=${'y'.repeat(HUGE)}` });
    expect(res.status).toBe(431);
    expect(JSON.parse(res.body).detail).toMatch(/too large/u);
  });

  it('an unknown Expect answers 417 {detail}', async () => {
    const res = await exchangeOnce(t.baseUrl, { method: 'GET', path: '/healthz', headers: { expect: '999-weird' } });
    expect(res.status).toBe(417);
    expect(res.headers['content-type']).toMatch(/application\/json/u);
    expect(JSON.parse(res.body).detail).toMatch(/expect/iu);
  });

  it('the service still answers after each refusal', async () => {
    const res = await exchangeOnce(t.baseUrl, { method: 'GET', path: '/healthz' });
    expect(res.status).toBe(200);
  });
});
