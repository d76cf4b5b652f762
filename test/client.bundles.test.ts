import zlib from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from './helpers/app.ts';
import { WIDGET_GZIP_BUDGET_BYTES } from '../src/ui/client-bundles.ts';

describe('the client bundles the service serves (/widget.js, /client.js)', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp({ withRepoAvatars: false });
  });
  afterAll(async () => {
    await t?.close();
  });

  it('serves /widget.js to a page of any origin, within its gzipped size budget, with no external URL to load', async () => {
    const res = await t.app.inject({ method: 'GET', url: '/widget.js', headers: { origin: 'https://shop.example' } });
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toBe('application/javascript; charset=utf-8');
    expect(res.headers['access-control-allow-origin']).toBe('*');
    expect(res.body).toContain('avatar-chat');
    expect(zlib.gzipSync(res.body).length).toBeLessThanOrEqual(WIDGET_GZIP_BUDGET_BYTES);
    // A classic script (the two-line snippet needs no type="module") that fetches nothing from a CDN.
    expect(res.body).not.toMatch(/^\s*(import|export)\b/m);
    expect(res.body).not.toMatch(/https?:\/\/(?!www\.w3\.org)[a-z]/i);
  });

  it('serves the AvatarClient ES module at /client.js, built once for concurrent first requests', async () => {
    const answers = await Promise.all([1, 2, 3].map(() => t.app.inject({ method: 'GET', url: '/client.js' })));
    expect(answers.map((r) => r.statusCode)).toEqual([200, 200, 200]);
    expect(new Set(answers.map((r) => r.body)).size).toBe(1);
    expect(answers[0]!.body).toMatch(/export\s*\{[^}]*AvatarClient/);
  });
});
