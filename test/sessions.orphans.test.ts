import fs from 'node:fs';
import { chromium, type Browser, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { ConfigError, loadConfig } from '../src/config.ts';
import { SessionConsumers } from '../src/sessions/consumers.ts';
import { json, makeAvatarBundle, post, startTestApp, tempDir, type TestApp } from './helpers/app.ts';
import { ReceivingPeer } from './helpers/peer.ts';
import { SseClient } from './helpers/sse.ts';
import { AudioStreamClient } from './helpers/ws-audio.ts';
import { sessionParts } from '../src/sessions/session.ts';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** SERVICE_ORPHAN_TIMEOUT_S of the test app: checks run every 250 ms. */
const ORPHAN_TIMEOUT_S = 1;
/** Comfortably more than the timeout plus one check: an unused session would be gone by then. */
const SURVIVES_MS = 2_500;

describe('consumer bookkeeping of a session', () => {
  it('is idle only while nothing holds or watches it, counting from the last consumer or REST call', () => {
    let now = 0;
    const consumers = new SessionConsumers(() => now);
    now = 1_000;
    expect(consumers.idleMs()).toBe(1_000);
    const release = consumers.hold('sse');
    now = 5_000;
    expect(consumers.idleMs()).toBe(0);
    expect(consumers.present()).toEqual(['sse']);
    now = 6_000;
    release();
    release(); // idempotent: a second call must not drop another holder
    now = 6_500;
    expect(consumers.idleMs()).toBe(500);
    const a = consumers.hold('sse');
    const b = consumers.hold('sse');
    a();
    a();
    expect(consumers.present()).toEqual(['sse']);
    b();
    let connected = true;
    consumers.watch('webrtc', () => connected);
    now = 9_000;
    expect(consumers.idleMs()).toBe(0);
    connected = false;
    now = 9_700;
    expect(consumers.idleMs()).toBe(700);
    consumers.touch();
    expect(consumers.idleMs()).toBe(0);
  });

  it('SERVICE_ORPHAN_TIMEOUT_S defaults to 60 s, 0 disables it, anything else invalid stops the service', () => {
    expect(loadConfig({}).orphanTimeoutMs).toBe(60_000);
    expect(loadConfig({ SERVICE_ORPHAN_TIMEOUT_S: '0' }).orphanTimeoutMs).toBe(0);
    expect(loadConfig({ SERVICE_ORPHAN_TIMEOUT_S: '5' }).orphanTimeoutMs).toBe(5_000);
    for (const bad of ['-1', '1.5', 'soon', '86401']) {
      expect(() => loadConfig({ SERVICE_ORPHAN_TIMEOUT_S: bad })).toThrow(ConfigError);
    }
  });
});

describe('orphaned sessions are reaped', () => {
  let t: TestApp;
  beforeAll(async () => {
    const avatarsDir = await tempDir('orphans-');
    await makeAvatarBundle(avatarsDir, 'card');
    t = await startTestApp({
      avatarsDir,
      env: { SERVICE_ORPHAN_TIMEOUT_S: String(ORPHAN_TIMEOUT_S), SERVICE_MAX_SESSIONS: '2' },
    });
  });
  afterAll(async () => t?.close());

  async function startedSession(): Promise<string> {
    const { session_id } = await json(await post(t.baseUrl, '/sessions', { avatar_id: 'card', model: 'mock' }));
    expect((await post(t.baseUrl, `/sessions/${session_id}/start`)).status).toBe(200);
    return session_id;
  }

  /** Watches without touching: `liveSession` is not a REST call. */
  const isLive = (id: string) => t.services.supervisor.liveSession(id) !== undefined;

  it('keeps a session while SSE or a WebRTC peer is there; once both are gone it is terminated as orphaned and frees its slot', async () => {
    const id = await startedSession();
    const session = t.services.supervisor.liveSession(id)!;
    const logged = vi.spyOn(sessionParts(session).logger, 'info');
    const published: string[] = [];
    sessionParts(session).events.listen((event) => published.push(event.type));
    const before = (await json(await fetch(`${t.baseUrl}/metrics`, { headers: { accept: 'application/json' } })))
      .sessions_terminated_total.orphaned;

    const sse = await SseClient.open(`${t.baseUrl}/sessions/${id}/events`);
    await sleep(SURVIVES_MS);
    expect(isLive(id), 'the SSE subscriber alone keeps it').toBe(true);

    const peer = await ReceivingPeer.connect(t.baseUrl, id);
    await peer.until(
      () => sessionParts(session).media.output.connected && peer.frames.length > 0,
      10_000,
      'peer connected and receiving',
    );
    sse.close();
    await expect.poll(() => sessionParts(session).events.subscriberCount, { timeout: 5_000 }).toBe(0);
    await sleep(SURVIVES_MS);
    expect(isLive(id), 'the connected peer alone keeps it').toBe(true);

    // wrtc notices a vanished receiver after ~5 s (ICE consent); the orphan timeout runs from then.
    peer.close();
    await expect.poll(() => isLive(id), { timeout: 15_000, interval: 100 }).toBe(false);
    expect(published).toContain('session.terminated');
    const orphanedLog = logged.mock.calls.find(([, message]) => message === 'session orphaned');
    expect(orphanedLog?.[0]).toMatchObject({ idleS: expect.any(Number) });
    expect(sessionParts(session).logger.bindings()).toMatchObject({ sessionId: id });

    const info = await json(await fetch(`${t.baseUrl}/sessions/${id}`));
    expect(info).toMatchObject({ state: 'terminated', terminated_reason: 'orphaned' });
    expect(t.services.supervisor.activeCount).toBe(0);
    const metrics = await json(await fetch(`${t.baseUrl}/metrics`, { headers: { accept: 'application/json' } }));
    expect(metrics.sessions_terminated_total.orphaned).toBe(before + 1);
    expect(metrics.sessions).toMatchObject({ live: 0, active: 0, capacity: 2 });
  }, 40_000);

  it('frees slots: SERVICE_MAX_SESSIONS abandoned sessions no longer lock everyone out', async () => {
    await startedSession();
    await startedSession();
    const { session_id: waiting } = await json(
      await post(t.baseUrl, '/sessions', { avatar_id: 'card', model: 'mock' }),
    );
    expect((await post(t.baseUrl, `/sessions/${waiting}/start`)).status).toBe(503);
    await expect.poll(() => t.services.supervisor.activeCount, { timeout: 10_000, interval: 100 }).toBe(0);
    expect((await post(t.baseUrl, `/sessions/${waiting}/start`)).status).toBe(200);
    await fetch(`${t.baseUrl}/sessions/${waiting}`, { method: 'DELETE' });
  }, 20_000);

  it('a REST call on the session counts as activity', async () => {
    const id = await startedSession();
    const until = performance.now() + SURVIVES_MS;
    while (performance.now() < until) {
      expect((await fetch(`${t.baseUrl}/sessions/${id}/metrics`)).status).toBe(200);
      await sleep(300);
    }
    expect(isLive(id)).toBe(true);
    await expect.poll(() => isLive(id), { timeout: 10_000, interval: 100 }).toBe(false);
    expect(await json(await fetch(`${t.baseUrl}/sessions/${id}`))).toMatchObject({ terminated_reason: 'orphaned' });
  }, 20_000);

  it('an open audio WebSocket and a running recording each keep a session', async () => {
    const streamed = await startedSession();
    const socket = AudioStreamClient.connect(t.baseUrl, streamed);
    await socket.waitOpen();
    const recorded = await startedSession();
    expect((await post(t.baseUrl, `/sessions/${recorded}/rt-recording/start`)).status).toBe(200);
    await sleep(SURVIVES_MS);
    expect(isLive(streamed)).toBe(true);
    expect(isLive(recorded)).toBe(true);

    socket.close();
    expect((await post(t.baseUrl, `/sessions/${recorded}/rt-recording/stop`)).status).toBe(200);
    await expect.poll(() => isLive(streamed) || isLive(recorded), { timeout: 10_000, interval: 100 }).toBe(false);
  }, 30_000);

  it('an offline job holds the session until it settles', async () => {
    const id = await startedSession();
    const session = t.services.supervisor.liveSession(id)!;
    const hold = vi.spyOn(sessionParts(session).consumers, 'hold');
    const res = await post(t.baseUrl, `/sessions/${id}/rt-offline-bundle`, { text: 'A short offline line.' });
    expect(res.status).toBe(200);
    const { job_id } = await json(res);
    expect(hold).toHaveBeenCalledWith('offline_job');
    await t.services.jobs.whenSettled(job_id);
    await sleep(0);
    expect(sessionParts(session).consumers.present()).not.toContain('offline_job');
    await fetch(`${t.baseUrl}/sessions/${id}`, { method: 'DELETE' });
  }, 30_000);

  it('does not reap a created session that was never started (only SERVICE_START_TIMEOUT_MS applies)', async () => {
    const { session_id } = await json(await post(t.baseUrl, '/sessions', { avatar_id: 'card', model: 'mock' }));
    await sleep(SURVIVES_MS);
    expect(isLive(session_id)).toBe(true);
    await fetch(`${t.baseUrl}/sessions/${session_id}`, { method: 'DELETE' });
  }, 20_000);
});

describe('SERVICE_ORPHAN_TIMEOUT_S=0', () => {
  it('never reaps a session, used or not', async () => {
    const avatarsDir = await tempDir('orphans-off-');
    await makeAvatarBundle(avatarsDir, 'card');
    const t = await startTestApp({ avatarsDir, env: { SERVICE_ORPHAN_TIMEOUT_S: '0' } });
    try {
      const { session_id } = await json(await post(t.baseUrl, '/sessions', { avatar_id: 'card', model: 'mock' }));
      expect((await post(t.baseUrl, `/sessions/${session_id}/start`)).status).toBe(200);
      await sleep(SURVIVES_MS);
      expect(t.services.supervisor.liveSession(session_id)).toBeDefined();
    } finally {
      await t.close();
    }
  }, 20_000);
});

const CHROMIUM = '/usr/bin/chromium';

describe.skipIf(!fs.existsSync(CHROMIUM))('the demo page leaves no session behind', () => {
  let t: TestApp;
  let browser: Browser;
  beforeAll(async () => {
    const avatarsDir = await tempDir('orphans-page-');
    await makeAvatarBundle(avatarsDir, 'card');
    // Chromium starts while the app is built.
    [t, browser] = await Promise.all([
      startTestApp({ avatarsDir }),
      chromium.launch({
        executablePath: CHROMIUM,
        args: [
          '--no-sandbox',
          '--disable-gpu',
          '--disable-background-networking',
          '--disable-component-update',
          '--no-first-run',
        ],
      }),
    ]);
  });
  afterAll(async () => {
    await browser?.close();
    await t?.close();
  });

  /** Opens the page, double-clicks Start and waits until the session runs; returns the POST /sessions count. */
  async function startFromPage(page: Page): Promise<{ creates: number; sessionId: string }> {
    let creates = 0;
    page.on('request', (request) => {
      if (request.method() === 'POST' && new URL(request.url()).pathname === '/sessions') creates++;
    });
    await page.goto(`${t.baseUrl}/?debug`); // `mock` is offered behind the debug switch
    await page.waitForFunction(() => (document.getElementById('model') as HTMLSelectElement).options.length > 0);
    await page.selectOption('#model', 'mock');
    await page.dblclick('#start');
    await page.waitForFunction(() => document.getElementById('state')!.textContent === 'running', null, {
      timeout: 20_000,
    });
    const sessionId = await page.evaluate(() => (window as unknown as { demo: { sessionId: string } }).demo.sessionId);
    return { creates, sessionId };
  }

  it('a double click on Start creates one session', async () => {
    const page = await browser.newPage();
    const { creates, sessionId } = await startFromPage(page);
    expect(creates).toBe(1);
    expect(t.services.supervisor.liveCount).toBe(1);
    await page.click('#stop');
    await expect.poll(() => t.services.supervisor.liveSession(sessionId), { timeout: 5_000 }).toBeUndefined();
    await page.close();
  }, 40_000);

  it('leaving the page ends its session at once (keepalive DELETE on pagehide)', async () => {
    const page = await browser.newPage();
    const { sessionId } = await startFromPage(page);
    await page.goto('about:blank');
    await expect.poll(() => t.services.supervisor.liveSession(sessionId), { timeout: 5_000 }).toBeUndefined();
    expect(await json(await fetch(`${t.baseUrl}/sessions/${sessionId}`))).toMatchObject({
      state: 'terminated',
      terminated_reason: 'deleted by client',
    });
    await page.close();
  }, 40_000);

  it('closing the tab ends its session too', async () => {
    const page = await browser.newPage();
    const { sessionId } = await startFromPage(page);
    await page.close({ runBeforeUnload: true });
    await expect.poll(() => t.services.supervisor.liveSession(sessionId), { timeout: 10_000 }).toBeUndefined();
    expect(await json(await fetch(`${t.baseUrl}/sessions/${sessionId}`))).toMatchObject({
      terminated_reason: 'deleted by client',
    });
  }, 40_000);
});
