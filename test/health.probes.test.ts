import http from 'node:http';
import net from 'node:net';
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { json, startTestApp, type TestApp } from './helpers/app.ts';
import { startOpenAiUpstream, type OpenAiUpstream } from './fakes/openai-upstream.ts';
import { startXttsFake, type FakeUpstream } from './fakes/tts-upstreams.ts';
import { PROBE_CACHE_MS, PROBE_TIMEOUT_MS, ProbeCache } from '../src/health/probe-cache.ts';
import { probeReachable } from '../src/health/probes.ts';

/** Start-up of the built-in engine (WASM compile in its child process) on 2 busy cores. */
const ENGINE_READY_MS = 30_000;
/** Scheduling slack on top of the probe bound, on 2 shared cores. */
const BOUND_SLACK_MS = 1_500;
const API_KEY = 'sk-health-probe-secret-0123456789';

interface Component {
  status: string;
  checked_at: string;
  reason?: string;
  detail?: string;
  latency_ms?: number;
}
interface HealthBody {
  status: string;
  uptime_ms: number;
  sessions: { live: number; active: number; capacity: number };
  components: Record<string, Component>;
}

async function health(t: TestApp): Promise<{ body: HealthBody; text: string; ms: number }> {
  const startedAt = performance.now();
  const res = await fetch(`${t.baseUrl}/health`);
  expect(res.status).toBe(200);
  const text = await res.text();
  return { body: JSON.parse(text) as HealthBody, text, ms: performance.now() - startedAt };
}

/** A loopback port nothing listens on: bound, noted, closed. */
async function closedPort(): Promise<number> {
  const server = net.createServer();
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

/** Accepts connections and reads requests but never answers: the upstream that hangs. */
async function silentServer(): Promise<{ url: string; requests: () => number; close(): Promise<void> }> {
  let requests = 0;
  const server = http.createServer(() => {
    requests++;
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/v1`,
    requests: () => requests,
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

async function waitForComponent(t: TestApp, name: string, status: string): Promise<HealthBody> {
  const deadline = Date.now() + ENGINE_READY_MS;
  for (;;) {
    const { body } = await health(t);
    if (body.components[name]?.status === status || Date.now() > deadline) return body;
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

const modelProbes = (upstream: OpenAiUpstream) =>
  upstream.requests.filter((r) => r.method === 'GET' && r.path === '/v1/models');

describe('GET /health with nothing but the embedded defaults', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp();
  });
  afterAll(async () => t?.close());

  it('reports llm and asr as not_configured with the variable to set, every TTS provider and renderer, and overall ok', async () => {
    const body = await waitForComponent(t, 'tts.builtin', 'ok');
    expect(body.components.llm).toMatchObject({
      status: 'not_configured',
      reason: expect.stringContaining('SERVICE_LLM_BASE_URL'),
    });
    expect(body.components.asr).toMatchObject({
      status: 'not_configured',
      reason: expect.stringContaining('SERVICE_ASR_BASE_URL'),
    });
    expect(body.components.storage.status).toBe('ok');
    expect(body.components.avatars).toMatchObject({ status: 'ok', detail: expect.stringMatching(/^\d+ avatars$/) });
    expect(body.components['tts.builtin']).toMatchObject({
      status: 'ok',
      detail: expect.stringMatching(/engine process(es)? ready/),
    });
    expect(body.components['tts.cloud_a']).toMatchObject({
      status: 'not_configured',
      reason: expect.stringContaining('SERVICE_TTS_CLOUD_A_API_KEY'),
    });
    expect(body.components['tts.compat_http']).toMatchObject({
      status: 'not_configured',
      reason: expect.stringContaining('SERVICE_TTS_COMPAT_HTTP_BASE_URL'),
    });
    expect(body.components['renderer.rt']).toMatchObject({
      status: 'ok',
      detail: expect.stringContaining('render worker thread'),
    });
    expect(body.components['renderer.lipsync_b'].status).toBe('not_configured');
    for (const component of Object.values(body.components)) expect(Date.parse(component.checked_at)).not.toBeNaN();
    // Nothing configured is failing, so not_configured parts do not make the service degraded.
    expect(body.status).toBe('ok');
  });

  it('keeps /healthz a cheap liveness answer', async () => {
    expect(await json(await fetch(`${t.baseUrl}/healthz`))).toEqual({ status: 'ok' });
  });
});

describe('GET /health with an LLM whose server is down and TTS servers up and down', () => {
  let t: TestApp;
  let llmPort: number;
  let ttsPort: number;
  let asr: OpenAiUpstream;
  let xtts: FakeUpstream;
  beforeAll(async () => {
    llmPort = await closedPort();
    ttsPort = await closedPort();
    asr = await startOpenAiUpstream({ requiredApiKey: API_KEY, models: { ids: ['whisper-1'] } });
    xtts = await startXttsFake();
    t = await startTestApp({
      env: {
        SERVICE_LLM_BASE_URL: `http://127.0.0.1:${llmPort}/v1`,
        SERVICE_LLM_API_KEY: API_KEY,
        SERVICE_ASR_BASE_URL: asr.baseUrl,
        SERVICE_ASR_API_KEY: API_KEY,
        SERVICE_TTS_COMPAT_HTTP_BASE_URL: `http://127.0.0.1:${ttsPort}/v1`,
        SERVICE_TTS_LOCAL_CLONE_A_BASE_URL: xtts.url,
      },
    });
  });
  afterAll(async () => {
    await t?.close();
    await asr?.close();
    await xtts?.close();
  });

  it('shows llm as error with a reason free of the URL and key, and the service as degraded', async () => {
    const { body, text } = await health(t);
    expect(body.components.llm.status).toBe('error');
    expect(body.components.llm.reason).toMatch(
      /cannot connect to the server \(ECONNREFUSED\); check SERVICE_LLM_BASE_URL/,
    );
    expect(body.status).toBe('degraded');
    expect(text).not.toContain(String(llmPort));
    expect(text).not.toContain(API_KEY);
  });

  it('probes the ASR server with its key as Bearer and reports it ok with the configured model listed', async () => {
    const { body } = await health(t);
    expect(body.components.asr).toMatchObject({ status: 'ok', detail: 'model "whisper-1" is listed' });
    expect(modelProbes(asr).at(-1)?.headers.authorization).toBe(`Bearer ${API_KEY}`);
  });

  it('checks TTS servers with a base URL for reachability: a closed port is error, a live server ok', async () => {
    const { body, text } = await health(t);
    expect(body.components['tts.compat_http']).toMatchObject({
      status: 'error',
      reason: expect.stringContaining('ECONNREFUSED'),
    });
    expect(body.components['tts.local_clone_a']).toMatchObject({ status: 'ok', detail: 'reachable' });
    expect(xtts.requests.some((r) => r.method === 'GET' && r.path === '/')).toBe(true);
    expect(xtts.requests.every((r) => r.headers.authorization === undefined)).toBe(true);
    expect(text).not.toContain(String(ttsPort));
  });
});

describe('GET /health with a working LLM server', () => {
  let t: TestApp;
  let upstream: OpenAiUpstream;
  beforeAll(async () => {
    upstream = await startOpenAiUpstream({ requiredApiKey: API_KEY, models: { ids: ['llama3.2', 'qwen2.5'] } });
    t = await startTestApp({
      env: { SERVICE_LLM_BASE_URL: upstream.baseUrl, SERVICE_LLM_API_KEY: API_KEY, SERVICE_LLM_MODEL: 'qwen2.5' },
    });
  });
  afterAll(async () => {
    await t?.close();
    await upstream?.close();
  });

  it('reports llm ok, sends the key as Bearer and never echoes it', async () => {
    const { body, text } = await health(t);
    expect(body.components.llm).toMatchObject({ status: 'ok', detail: 'model "qwen2.5" is listed' });
    expect(body.components.llm.latency_ms).toBeGreaterThanOrEqual(0);
    expect(modelProbes(upstream)[0].headers.authorization).toBe(`Bearer ${API_KEY}`);
    expect(text).not.toContain(API_KEY);
  });

  it('caches the probe: sequential and concurrent /health requests within the cache time reach the server once', async () => {
    const before = modelProbes(upstream).length;
    const first = await health(t);
    const later = [await health(t), ...(await Promise.all(Array.from({ length: 8 }, () => health(t))))];
    // At most the first of these probed (none if the previous test's probe is still fresh); the rest reused it.
    expect(modelProbes(upstream).length - before).toBeLessThanOrEqual(1);
    for (const { body } of later) expect(body.components.llm.checked_at).toBe(first.body.components.llm.checked_at);
  });
});

describe('GET /health with an LLM server that never answers', () => {
  let t: TestApp;
  let silent: Awaited<ReturnType<typeof silentServer>>;
  beforeAll(async () => {
    silent = await silentServer();
    t = await startTestApp({ env: { SERVICE_LLM_BASE_URL: silent.url } });
  });
  afterAll(async () => {
    await t?.close();
    await silent?.close();
  });

  it('answers within the probe bound with llm in error, and concurrent requests share the one probe', async () => {
    const answers = await Promise.all([health(t), health(t), health(t)]);
    for (const { body, ms } of answers) {
      expect(body.components.llm).toMatchObject({ status: 'error', reason: `no answer within ${PROBE_TIMEOUT_MS} ms` });
      expect(ms).toBeLessThan(PROBE_TIMEOUT_MS + BOUND_SLACK_MS);
    }
    expect(silent.requests()).toBe(1);
    // The failure is cached like a success: the next request answers at once.
    const again = await health(t);
    expect(again.ms).toBeLessThan(BOUND_SLACK_MS);
    expect(again.body.components.llm.reason).toBe(`no answer within ${PROBE_TIMEOUT_MS} ms`);
  });
});

describe('GET /health with wrong LLM credentials or a wrong base URL', () => {
  let keyed: OpenAiUpstream;
  let open: OpenAiUpstream;
  beforeAll(async () => {
    keyed = await startOpenAiUpstream({ requiredApiKey: 'sk-the-right-one' });
    open = await startOpenAiUpstream();
  });
  afterAll(async () => {
    await keyed?.close();
    await open?.close();
  });

  for (const scenario of [
    {
      name: 'a rejected key',
      baseUrl: () => keyed.baseUrl,
      reason: 'GET /models answered HTTP 401; check SERVICE_LLM_API_KEY',
    },
    {
      name: 'a base URL without /v1',
      baseUrl: () => open.baseUrl.replace(/\/v1$/, ''),
      reason: 'GET /models answered HTTP 404; check that SERVICE_LLM_BASE_URL includes the API version segment (…/v1)',
    },
  ]) {
    it(`reports ${scenario.name} as error naming the variable to check`, async () => {
      const t = await startTestApp({ env: { SERVICE_LLM_BASE_URL: scenario.baseUrl(), SERVICE_LLM_API_KEY: API_KEY } });
      try {
        const { body, text } = await health(t);
        expect(body.components.llm).toMatchObject({ status: 'error', reason: scenario.reason });
        expect(body.status).toBe('degraded');
        expect(text).not.toContain(API_KEY);
      } finally {
        await t.close();
      }
    });
  }
});

describe('probe functions against real loopback servers', () => {
  it('probeReachable: a server answering 5xx is an error, one answering 404 is reachable', async () => {
    const xtts = await startXttsFake();
    try {
      expect(
        await probeReachable(xtts.url, 'SERVICE_TTS_LOCAL_CLONE_A_BASE_URL', AbortSignal.timeout(PROBE_TIMEOUT_MS)),
      ).toEqual({ status: 'ok', detail: 'reachable' });
      xtts.scenario = 'server_error';
      expect(
        await probeReachable(xtts.url, 'SERVICE_TTS_LOCAL_CLONE_A_BASE_URL', AbortSignal.timeout(PROBE_TIMEOUT_MS)),
      ).toEqual({
        status: 'error',
        reason: 'the server answered HTTP 500',
      });
    } finally {
      await xtts.close();
    }
  });
});

describe('ProbeCache', () => {
  it('reuses a result until the cache time has passed, then probes again', async () => {
    let clock = 0;
    let probes = 0;
    const cache = new ProbeCache({ now: () => clock });
    const probe = async () => ({ status: 'ok' as const, detail: `probe ${++probes}` });
    expect((await cache.check('llm', probe)).detail).toBe('probe 1');
    clock += PROBE_CACHE_MS - 1;
    expect((await cache.check('llm', probe)).detail).toBe('probe 1');
    clock += 1;
    expect((await cache.check('llm', probe)).detail).toBe('probe 2');
    expect((await cache.check('asr', probe)).detail).toBe('probe 3');
  });

  it('cuts off a probe that ignores its signal at the time bound', async () => {
    const cache = new ProbeCache({ timeoutMs: 200 });
    const startedAt = performance.now();
    const result = await cache.check('hangs', () => new Promise(() => undefined));
    expect(result).toMatchObject({ status: 'error', reason: 'no answer within 200 ms' });
    expect(performance.now() - startedAt).toBeLessThan(200 + BOUND_SLACK_MS);
  });

  it('after close, a running probe ends at once as an error', async () => {
    const cache = new ProbeCache();
    const pending = cache.check(
      'llm',
      (signal) => new Promise((_resolve, reject) => signal.addEventListener('abort', () => reject(signal.reason))),
    );
    cache.close();
    expect(await pending).toMatchObject({ status: 'error', reason: 'the service is shutting down' });
  });
});
