import { spawn } from 'node:child_process';
import net from 'node:net';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { Level } from 'level';
import { json, makeAvatarBundle, post, startTestApp, tempDir } from './helpers/app.ts';
import { PREFLIGHT_REFUSED_DETAIL } from '../src/plugins/external/index.ts';

const ROOT = path.resolve(import.meta.dirname, '..');

async function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const server = net.createServer().listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

describe('CORS from SERVICE_CORS_ORIGINS', () => {
  it('allows listed origins only, on REST and on the SSE stream', async () => {
    const avatarsDir = await tempDir();
    await makeAvatarBundle(avatarsDir, 'card');
    const t = await startTestApp({ avatarsDir, env: { SERVICE_CORS_ORIGINS: 'https://app.example' } });
    try {
      const allowed = await fetch(`${t.baseUrl}/healthz`, { headers: { origin: 'https://app.example' } });
      expect(allowed.headers.get('access-control-allow-origin')).toBe('https://app.example');
      const denied = await fetch(`${t.baseUrl}/healthz`, { headers: { origin: 'https://evil.example' } });
      expect(denied.headers.get('access-control-allow-origin')).toBeNull();
      const preflight = await fetch(`${t.baseUrl}/sessions`, {
        method: 'OPTIONS',
        headers: {
          origin: 'https://app.example',
          'access-control-request-method': 'POST',
          'access-control-request-headers': 'content-type',
        },
      });
      expect(preflight.status).toBeLessThan(300);
      expect(preflight.headers.get('access-control-allow-origin')).toBe('https://app.example');
      const { session_id } = await json(await post(t.baseUrl, '/sessions', { avatar_id: 'card', model: 'mock' }));
      const controller = new AbortController();
      const sse = await fetch(`${t.baseUrl}/sessions/${session_id}/events`, {
        headers: { origin: 'https://app.example' },
        signal: controller.signal,
      });
      expect(sse.headers.get('access-control-allow-origin')).toBe('https://app.example');
      controller.abort();
    } finally {
      await t.close();
    }
  });

  it('lets the SSE stream answer CORS as the origin guard decides, in both directions', async () => {
    const avatarsDir = await tempDir();
    await makeAvatarBundle(avatarsDir, 'card');
    // The first entry is spelled with a trailing slash and upper case: it lists the canonical https://app.example, and
    // only that form is echoed. The guard lists only http(s) origins, so the second (a verbatim string a raw
    // comparison would have matched) is not one a page may read answers from.
    const env = { SERVICE_CORS_ORIGINS: 'HTTPS://App.Example/,chrome-extension://widget' };
    const t = await startTestApp({ avatarsDir, env });
    try {
      const { session_id } = await json(await post(t.baseUrl, '/sessions', { avatar_id: 'card', model: 'mock' }));
      const allowOriginOf = async (path: string, origin: string): Promise<string | null> => {
        const controller = new AbortController();
        const res = await fetch(`${t.baseUrl}${path}`, { headers: { origin }, signal: controller.signal });
        controller.abort();
        return res.headers.get('access-control-allow-origin');
      };
      expect(await allowOriginOf('/healthz', 'https://app.example')).toBe('https://app.example');
      expect(await allowOriginOf(`/sessions/${session_id}/events`, 'https://app.example')).toBe('https://app.example');
      for (const origin of ['https://app.example/', 'HTTPS://APP.EXAMPLE', 'https://app.example:443']) {
        expect(await allowOriginOf('/healthz', origin)).toBeNull();
        expect(await allowOriginOf(`/sessions/${session_id}/events`, origin)).toBeNull();
      }
      expect(await allowOriginOf('/healthz', 'chrome-extension://widget')).toBeNull();
      expect(await allowOriginOf(`/sessions/${session_id}/events`, 'chrome-extension://widget')).toBeNull();
    } finally {
      await t.close();
    }
  });

  it('answers a preflight from an unlisted origin 403 {detail} without CORS headers, and echoes only the canonical form of a listed origin', async () => {
    const t = await startTestApp({
      withRepoAvatars: false,
      env: { SERVICE_CORS_ORIGINS: 'https://app.example,http://localhost:8080' },
    });
    try {
      const preflight = (origin: string | undefined, url = '/sessions') =>
        t.app.inject({
          method: 'OPTIONS',
          url,
          headers: {
            ...(origin === undefined ? {} : { origin }),
            'access-control-request-method': 'POST',
            'access-control-request-headers': 'content-type',
          },
        });
      const corsHeaders = (headers: Record<string, unknown>) =>
        Object.keys(headers).filter((name) => name.startsWith('access-control-'));
      for (const listed of ['https://app.example', 'http://localhost:8080']) {
        const res = await preflight(listed);
        expect(res.statusCode).toBe(204);
        expect(res.headers['access-control-allow-origin']).toBe(listed);
        expect(String(res.headers['access-control-allow-methods'])).toContain('POST');
      }
      const unlisted = [
        'https://evil.example',
        // Non-canonical forms of the listed origins: no browser sends them, so they are not listed either.
        'https://app.example/',
        'HTTPS://APP.EXAMPLE',
        'https://App.Example',
        'https://app.example:443',
        'http://localhost:8080/',
        'http://LOCALHOST:8080',
        'null',
        'not an origin',
        undefined,
      ];
      for (const origin of unlisted) {
        for (const url of ['/sessions', '/no-such-route']) {
          const res = await preflight(origin, url);
          expect(res.statusCode, `${origin} ${url}`).toBe(403);
          expect(res.json()).toEqual({ detail: PREFLIGHT_REFUSED_DETAIL });
          expect(corsHeaders(res.headers), `${origin}`).toEqual([]);
        }
        if (origin === undefined) continue;
        const read = await t.app.inject({ method: 'GET', url: '/healthz', headers: { origin } });
        expect(read.statusCode).toBe(200);
        expect(corsHeaders(read.headers), `${origin}`).toEqual([]);
        // A state-changing request from a non-canonical form is refused as from any unlisted origin.
        const write = await t.app.inject({
          method: 'POST',
          url: '/sessions',
          headers: { origin, 'content-type': 'application/json' },
          payload: '{}',
        });
        expect(write.statusCode, `${origin}`).toBe(403);
        expect(corsHeaders(write.headers), `${origin}`).toEqual([]);
      }
      // An OPTIONS that is no preflight (no Access-Control-Request-Method) is left to the router as before.
      expect(
        (await t.app.inject({ method: 'OPTIONS', url: '/sessions', headers: { origin: 'https://evil.example' } }))
          .statusCode,
      ).toBe(404);
    } finally {
      await t.close();
    }
  });

  it('answers every preflight 403 without CORS headers when no origin is configured', async () => {
    const t = await startTestApp({ withRepoAvatars: false });
    try {
      const res = await t.app.inject({
        method: 'OPTIONS',
        url: '/sessions',
        headers: { origin: 'https://app.example', 'access-control-request-method': 'POST' },
      });
      expect(res.statusCode).toBe(403);
      expect(Object.keys(res.headers).filter((name) => name.startsWith('access-control-'))).toEqual([]);
    } finally {
      await t.close();
    }
  });

  it('sends no CORS headers when no origin is configured', async () => {
    const t = await startTestApp({ withRepoAvatars: false });
    try {
      const res = await fetch(`${t.baseUrl}/healthz`, { headers: { origin: 'https://app.example' } });
      expect(res.headers.get('access-control-allow-origin')).toBeNull();
    } finally {
      await t.close();
    }
  });
});

describe('graceful shutdown of the service process', () => {
  it('closes sessions and LevelDB on SIGTERM and exits 0; the data directory reopens cleanly', async () => {
    const dataDir = await tempDir('shutdown-');
    const avatarsDir = await tempDir('shutdown-avatars-');
    await makeAvatarBundle(avatarsDir, 'card');
    const port = await freePort();
    const child = spawn(process.execPath, ['--import', 'tsx', 'src/main.ts'], {
      cwd: ROOT,
      env: {
        ...process.env,
        SERVICE_PORT: String(port),
        SERVICE_DATA_DIR: dataDir,
        SERVICE_AVATARS_DIR: avatarsDir,
        SERVICE_LOG_LEVEL: 'info',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let logs = '';
    child.stdout.on('data', (chunk) => (logs += chunk));
    child.stderr.on('data', (chunk) => (logs += chunk));
    const base = `http://127.0.0.1:${port}`;
    // tsx compiles the service on start: seconds, over 30 s on a heavily loaded host (seen at load 25–31).
    const deadline = Date.now() + 90_000;
    while (!logs.includes('service listening')) {
      if (Date.now() > deadline) throw new Error(`service did not start: ${logs}`);
      await new Promise((r) => setTimeout(r, 100));
    }
    const { session_id } = await json(await post(base, '/sessions', { avatar_id: 'card', model: 'mock' }));
    await post(base, `/sessions/${session_id}/start`);
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    child.kill('SIGTERM');
    expect(await exited).toBe(0);
    expect(logs).toContain('shutdown complete');
    // No path or secret in the logs.
    expect(logs).not.toContain(dataDir);
    const db = new Level<string, any>(path.join(dataDir, 'db'), { valueEncoding: 'json' });
    await db.open();
    const stored = await db.sublevel<string, any>('sessions', { valueEncoding: 'json' }).get(session_id);
    expect(stored.state).toBe('terminated');
    expect(stored.terminated_reason).toBe('service shutting down');
    await db.close();
  }, 150_000);

  it('refuses to start with an invalid configuration, one line per problem', async () => {
    const child = spawn(process.execPath, ['--import', 'tsx', 'src/main.ts'], {
      cwd: ROOT,
      env: { ...process.env, SERVICE_PORT: 'x', SERVICE_LOG_LEVEL: 'loud' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let err = '';
    child.stderr.on('data', (chunk) => (err += chunk));
    const code = await new Promise<number | null>((resolve) => child.on('exit', resolve));
    expect(code).toBe(78);
    expect(err).toMatch(/SERVICE_PORT/);
    expect(err).toMatch(/SERVICE_LOG_LEVEL/);
  });
});
