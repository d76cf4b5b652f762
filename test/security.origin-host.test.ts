import fs from 'node:fs/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { closeFaceDetector } from '../actors/faces/detector.ts';
import { loadConfig } from '../src/config.ts';
import { RequestOriginGuard } from '../src/security/request-origin.ts';
import { PORTRAIT_FIXTURE } from './helpers/fixtures.ts';
import { json, post, rawRequest, startTestApp, type TestApp } from './helpers/app.ts';
import { upgrade } from './helpers/ws-upgrade.ts';

const FOREIGN = 'https://evil.example';
const LISTED = 'https://app.example';
/** A real custom avatar build (face detection, frame synthesis) on a loaded, half-speed machine: minutes, not the suite's 60 s. */
const AVATAR_BUILD_TIMEOUT_MS = 180_000;

/** A browser's multipart form POST: no preflight, so only the service itself can refuse it. */
function uploadAvatar(baseUrl: string, image: Buffer, headers: Record<string, string>): Promise<Response> {
  const body = new FormData();
  body.append('name', 'Cross Site');
  body.append('base_avatar_id', 'astronaut');
  body.append('image', new Blob([new Uint8Array(image)], { type: 'image/png' }), 'portrait.png');
  return fetch(`${baseUrl}/avatars/custom`, { method: 'POST', body, headers });
}

async function customAvatarIds(t: TestApp): Promise<string[]> {
  const avatars = (await json(await fetch(`${t.baseUrl}/avatars`))) as Array<{ id: string; is_custom?: boolean }>;
  return avatars.filter((a) => a.id.startsWith('custom-')).map((a) => a.id);
}

async function startedSession(t: TestApp): Promise<string> {
  const { session_id } = await json(await post(t.baseUrl, '/sessions', { avatar_id: 'demo-rt', model: 'rt' }));
  expect((await post(t.baseUrl, `/sessions/${session_id}/start`)).status).toBe(200);
  return session_id as string;
}

describe('a web page of another origin cannot drive the service', () => {
  let t: TestApp;
  let portrait: Buffer;
  beforeAll(async () => {
    t = await startTestApp({ env: { SERVICE_CORS_ORIGINS: LISTED } });
    portrait = await fs.readFile(PORTRAIT_FIXTURE);
  });
  afterAll(async () => {
    await t?.close();
    await closeFaceDetector();
  });

  it('refuses a cross-site multipart POST /avatars/custom with 403 {detail} and creates nothing', async () => {
    const res = await uploadAvatar(t.baseUrl, portrait, { origin: FOREIGN });
    expect(res.status).toBe(403);
    expect((await json(res)).detail).toMatch(/Origin/u);
    expect(await customAvatarIds(t)).toEqual([]);
    expect((await fs.readdir(t.avatarsDir)).filter((name) => name.startsWith('custom-'))).toEqual([]);
  });

  it('refuses an origin-less POST the browser marks Sec-Fetch-Site: cross-site', async () => {
    const res = await fetch(`${t.baseUrl}/sessions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'sec-fetch-site': 'cross-site' },
      body: JSON.stringify({ avatar_id: 'demo-rt', model: 'rt' }),
    });
    expect(res.status).toBe(403);
    expect(await json(res)).toHaveProperty('detail');
    expect((await json(await fetch(`${t.baseUrl}/queue/status`))).created).toBe(0);
  });

  it(
    'lets a page of an origin SERVICE_CORS_ORIGINS lists create an avatar, and CORS lets it read the answer',
    async () => {
      const res = await uploadAvatar(t.baseUrl, portrait, { origin: LISTED });
      expect(res.status).toBe(200);
      expect(res.headers.get('access-control-allow-origin')).toBe(LISTED);
      const { id } = await json(res);
      expect(await customAvatarIds(t)).toEqual([id]);
      const deleted = await fetch(`${t.baseUrl}/avatars/${id}`, { method: 'DELETE', headers: { origin: LISTED } });
      expect(deleted.status).toBe(200);
    },
    AVATAR_BUILD_TIMEOUT_MS,
  );

  it("lets the service's own page (same origin) and clients without Origin create and end sessions", async () => {
    const ownOrigin = new URL(t.baseUrl).origin;
    const created = await fetch(`${t.baseUrl}/sessions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', origin: ownOrigin, 'sec-fetch-site': 'same-origin' },
      body: JSON.stringify({ avatar_id: 'demo-rt', model: 'rt' }),
    });
    expect(created.status).toBe(200);
    const { session_id } = await json(created);
    const ended = await fetch(`${t.baseUrl}/sessions/${session_id}`, {
      method: 'DELETE',
      headers: { origin: ownOrigin },
    });
    expect(ended.status).toBe(200);
    // curl, server-to-server: no Origin at all.
    const sessionId = await startedSession(t);
    expect((await fetch(`${t.baseUrl}/sessions/${sessionId}`, { method: 'DELETE' })).status).toBe(200);
  });

  it('refuses a WebSocket upgrade from a foreign Origin with 403 {detail}; its own origin and none are served', async () => {
    const sessionId = await startedSession(t);
    const wsBase = t.baseUrl.replace(/^http/u, 'ws');
    for (const path of ['speak_audio_stream', 'listen']) {
      const refused = await upgrade(`${wsBase}/sessions/${sessionId}/${path}`, FOREIGN);
      expect(refused, path).toMatchObject({ opened: false, status: 403 });
      expect(JSON.parse((refused as { body: string }).body).detail, path).toMatch(/Origin/u);
    }
    expect(await upgrade(`${wsBase}/sessions/${sessionId}/speak_audio_stream`, new URL(t.baseUrl).origin)).toEqual({
      opened: true,
    });
    expect(await upgrade(`${wsBase}/sessions/${sessionId}/speak_audio_stream`)).toEqual({ opened: true });
    expect((await fetch(`${t.baseUrl}/sessions/${sessionId}`, { method: 'DELETE' })).status).toBe(200);
  });

  it('refuses a request whose Host names another site (DNS rebinding) with 403 {detail}, whatever the method', async () => {
    const rebound = await rawRequest(t.baseUrl, 'GET', '/healthz', { host: `evil.example:${new URL(t.baseUrl).port}` });
    expect(rebound.status).toBe(403);
    expect(JSON.parse(rebound.body).detail).toMatch(/Host/u);
    expect((await rawRequest(t.baseUrl, 'GET', '/avatars', { host: 'evil.example' })).status).toBe(403);
    // The names of this service pass: the bind address and localhost in any port form.
    expect(
      (await rawRequest(t.baseUrl, 'GET', '/healthz', { host: `localhost:${new URL(t.baseUrl).port}` })).status,
    ).toBe(200);
    expect((await rawRequest(t.baseUrl, 'GET', '/healthz', { host: 'localhost' })).status).toBe(200);
    expect((await rawRequest(t.baseUrl, 'GET', '/healthz', { host: new URL(t.baseUrl).host })).status).toBe(200);
  });

  it('documents the 403 on every route in OpenAPI', async () => {
    const doc = await json(await fetch(`${t.baseUrl}/openapi.json`));
    expect(doc.paths['/avatars/custom'].post.responses).toHaveProperty('403');
    expect(doc.paths['/sessions/{session_id}/speak_audio_stream'].get.responses).toHaveProperty('403');
  });
});

describe('SERVICE_ALLOWED_HOSTS', () => {
  it('adds Host names the service answers to; other names stay refused', async () => {
    const t = await startTestApp({
      withRepoAvatars: false,
      env: { SERVICE_ALLOWED_HOSTS: 'avatar.internal, .example.org' },
    });
    try {
      expect((await rawRequest(t.baseUrl, 'GET', '/healthz', { host: 'avatar.internal:8000' })).status).toBe(200);
      expect((await rawRequest(t.baseUrl, 'GET', '/healthz', { host: 'talk.example.org' })).status).toBe(200);
      expect((await rawRequest(t.baseUrl, 'GET', '/healthz', { host: 'example.org.evil.example' })).status).toBe(403);
      // The rebinding page's Origin is its own name: refused even though the Host is allowed.
      const res = await fetch(`${t.baseUrl}/sessions`, {
        method: 'POST',
        headers: { origin: 'http://avatar.internal.evil.example' },
      });
      expect(res.status).toBe(403);
    } finally {
      await t.close();
    }
  });

  it('is validated at start-up: no scheme, no port', () => {
    expect(loadConfig({ SERVICE_ALLOWED_HOSTS: 'a.example, .b.example, 10.0.0.5, [::1], *' }).allowedHosts).toEqual([
      'a.example',
      '.b.example',
      '10.0.0.5',
      '[::1]',
      '*',
    ]);
    expect(() => loadConfig({ SERVICE_ALLOWED_HOSTS: 'https://a.example' })).toThrow(/SERVICE_ALLOWED_HOSTS/u);
    expect(() => loadConfig({ SERVICE_ALLOWED_HOSTS: 'a.example:8000' })).toThrow(/SERVICE_ALLOWED_HOSTS/u);
  });
});

describe("the guard's decision for deployments the app tests above do not start", () => {
  const guardFor = (env: Record<string, string>) => new RequestOriginGuard(loadConfig(env));

  it('on a wildcard bind accepts any IP literal as Host but no unlisted name', () => {
    const guard = guardFor({ SERVICE_HOST: '0.0.0.0' });
    expect(guard.refusal('GET', { host: '192.168.1.20:8000' })).toBeNull();
    expect(guard.refusal('GET', { host: '[fd00::5]:8000' })).toBeNull();
    expect(guard.refusal('GET', { host: 'avatar-svc:8000' })).toMatch(/Host/u);
    expect(guardFor({ SERVICE_HOST: '127.0.0.1' }).refusal('GET', { host: '192.168.1.20:8000' })).toMatch(/Host/u);
  });

  it("behind a TLS proxy: the public origin is the service's own, whether the proxy passes Host or not", () => {
    const guard = guardFor({ SERVICE_HOST: '0.0.0.0', SERVICE_PUBLIC_BASE_URL: 'https://avatar.example.com' });
    const origin = 'https://avatar.example.com';
    expect(guard.refusal('POST', { host: 'avatar.example.com', origin })).toBeNull();
    expect(guard.refusal('POST', { host: '127.0.0.1:8000', origin })).toBeNull();
    expect(
      guard.refusal('POST', { host: 'avatar.example.com', origin: 'https://avatar.example.com.evil.example' }),
    ).toMatch(/Origin/u);
  });

  it("refuses the opaque origin `null` (sandboxed frames, file:// pages) and a port that is not the request's", () => {
    const guard = guardFor({});
    expect(guard.refusal('DELETE', { host: '127.0.0.1:8000', origin: 'null' })).toMatch(/Origin/u);
    expect(guard.refusal('POST', { host: '127.0.0.1:8000', origin: 'http://127.0.0.1:3000' })).toMatch(/Origin/u);
    expect(guard.refusal('POST', { host: '127.0.0.1:8000', origin: 'http://127.0.0.1:8000' })).toBeNull();
  });

  it('in cluster mode accepts the node URL as Host and leaves the Origin of a node-signed forward to the node the client reached', () => {
    const guard = guardFor({
      SERVICE_REDIS_URL: 'redis://127.0.0.1:6379',
      SERVICE_NODE_URL: 'http://node-b.internal:8000',
    });
    const forwarded = { host: 'node-b.internal:8000', origin: 'https://talk.example.com' };
    expect(guard.refusal('POST', forwarded, true)).toBeNull();
    expect(guard.refusal('POST', forwarded, false)).toMatch(/Origin/u);
  });

  it('with SERVICE_CORS_ORIGINS=* lets every origin in, but still checks Host', () => {
    const guard = guardFor({ SERVICE_CORS_ORIGINS: '*' });
    expect(guard.refusal('POST', { host: 'localhost:8000', origin: 'https://anything.example' })).toBeNull();
    expect(guard.refusal('POST', { host: 'evil.example', origin: 'https://anything.example' })).toMatch(/Host/u);
  });
});

describe('the inspector is opt-in and never lists sessions to another machine', () => {
  it('is off by default on a loopback bind: /inspect/sessions answers 404', async () => {
    expect(loadConfig({ SERVICE_HOST: '127.0.0.1' }).inspector).toBe(false);
    const t = await startTestApp({ withRepoAvatars: true });
    try {
      await startedSession(t);
      const res = await t.app.inject({ method: 'GET', url: '/inspect/sessions' });
      expect(res.statusCode).toBe(404);
      expect(res.body).not.toMatch(/session_id/u);
    } finally {
      await t.close();
    }
  });

  it('when on, lists sessions to a loopback peer only; a remote peer or a proxied request gets 403 {detail}', async () => {
    const t = await startTestApp({ env: { SERVICE_INSPECTOR: 'on' } });
    try {
      const sessionId = await startedSession(t);
      const local = await t.app.inject({ method: 'GET', url: '/inspect/sessions', remoteAddress: '127.0.0.1' });
      expect(local.json().sessions.map((s: { session_id: string }) => s.session_id)).toContain(sessionId);
      for (const request of [
        { remoteAddress: '203.0.113.7', headers: {} },
        { remoteAddress: '::ffff:192.168.1.20', headers: {} },
        { remoteAddress: '127.0.0.1', headers: { 'x-forwarded-for': '203.0.113.7' } },
      ]) {
        const res = await t.app.inject({ method: 'GET', url: '/inspect/sessions', ...request });
        expect(res.statusCode, request.remoteAddress).toBe(403);
        expect(res.body).not.toContain(sessionId);
        expect(res.json().detail).toMatch(/this machine/u);
        const events = await t.app.inject({ method: 'GET', url: '/inspect/events', ...request });
        expect(events.statusCode).toBe(403);
      }
    } finally {
      await t.close();
    }
  });
});
