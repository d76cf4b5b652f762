import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from './helpers/app.ts';
import { ECHO_MAX_CHARS } from '../src/errors.ts';

/** A client value repeated in an error detail is cut short: a 100 KB provider name is not echoed back whole. */
describe('error details quote client values briefly', () => {
  let t: TestApp;
  const huge = 'p'.repeat(100_000);
  beforeAll(async () => {
    t = await startTestApp();
  });
  afterAll(async () => t?.close());

  it.each([
    [
      'POST /sessions tts_provider',
      { method: 'POST' as const, url: '/sessions', payload: { avatar_id: 'demo-rt', model: 'rt', tts_provider: huge } },
    ],
    [
      'POST /tts/preview tts_provider',
      { method: 'POST' as const, url: '/tts/preview', payload: { text: 'hi', tts_provider: huge } },
    ],
    ['GET /voices provider', { method: 'GET' as const, url: `/voices?provider=${huge.slice(0, 4000)}` }],
    ['GET /tts/voices provider', { method: 'GET' as const, url: `/tts/voices?provider=${huge.slice(0, 4000)}` }],
  ])('%s: 400 whose detail stays short', async (_name, request) => {
    const res = await t.app.inject(request);
    expect(res.statusCode).toBe(400);
    const detail = res.json().detail as string;
    expect(detail).toMatch(/provider/u);
    expect(detail.length).toBeLessThan(ECHO_MAX_CHARS + 400);
  });
});
