import { randomUUID } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../src/config.ts';
import { Store } from '../src/store/db.ts';
import { JobStore } from '../src/store/jobs.ts';
import { WebhookOutbox, type OutboxEntry } from '../src/webhooks/outbox.ts';
import { copyRepoAvatars, json, makeAvatarBundle, post, startTestApp, tempDir } from './helpers/app.ts';
import { SseClient } from './helpers/sse.ts';
import { startServiceProcess, type ServiceProcess } from './helpers/service-process.ts';
import { startWebhookReceiver, type WebhookReceiver } from './fakes/webhook-receiver.ts';
import { toneTtsRegistry } from './fakes/tone-tts.ts';

const SECRET = `whsec_${Buffer.from('a test secret of 32 bytes, ok!!!').toString('base64')}`;
/** Retries in tests: milliseconds, not the production second (WEBHOOK_BACKOFF_BASE_MS). */
const FAST_BACKOFF = { backoffBaseMs: 20 };
/** Deliveries over loopback; generous for 2 busy cores. */
const DELIVERY_MS = 15_000;
/** A turn of the tone TTS with real-time playout; generous. */
const TURN_MS = 20_000;
const FIXTURE = path.resolve(import.meta.dirname, 'fixtures', 'portrait-astronaut.png');

const webhookEnv = (receiver: WebhookReceiver, extra: Record<string, string> = {}) => ({
  SERVICE_WEBHOOK_URL: receiver.url,
  SERVICE_WEBHOOK_SECRET: SECRET,
  SERVICE_WEBHOOK_ALLOWED_HOSTS: '127.0.0.1',
  ...extra,
});

async function avatarsWithCard(): Promise<string> {
  const dir = await tempDir('hooks-avatars-');
  await copyRepoAvatars(dir);
  await makeAvatarBundle(dir, 'card');
  return dir;
}

async function createSession(t: { baseUrl: string }, extra: Record<string, unknown> = {}): Promise<string> {
  const res = await post(t.baseUrl, '/sessions', { avatar_id: 'card', model: 'mock', ...extra });
  expect(res.status, await res.clone().text()).toBe(200);
  return (await json(res)).session_id;
}

const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => undefined);
});

describe('webhook events', () => {
  let avatarsDir: string;
  beforeAll(async () => {
    avatarsDir = await avatarsWithCard();
  });

  it('every event type arrives, signed so that standardwebhooks verifies it, body {type, timestamp, data}', async () => {
    const receiver = await startWebhookReceiver();
    cleanups.push(() => receiver.close());
    const t = await startTestApp({
      avatarsDir,
      env: webhookEnv(receiver),
      overrides: { tts: toneTtsRegistry(200), webhooks: FAST_BACKOFF },
    });
    cleanups.push(() => t.close());

    const id = await createSession(t);
    expect((await post(t.baseUrl, `/sessions/${id}/start`)).status).toBe(200);
    const sse = await SseClient.open(`${t.baseUrl}/sessions/${id}/events`);
    cleanups.push(async () => sse.close());
    expect((await post(t.baseUrl, `/sessions/${id}/rt-recording/start`)).status, 'recording start').toBe(200);
    expect((await post(t.baseUrl, `/sessions/${id}/speak`, { text: 'Hello there.' })).status).toBe(200);
    await sse.waitFor((e) => e.type === 'status' && e.data.stage === 'idle', TURN_MS, 'idle after speak');
    const stopped = await post(t.baseUrl, `/sessions/${id}/rt-recording/stop`);
    expect(stopped.status, `recording stop: ${await stopped.clone().text()}`).toBe(200);

    const bundle = await json(await post(t.baseUrl, `/sessions/${id}/rt-offline-bundle`, { text: 'An offline line.' }));
    await t.services.jobs.whenSettled(bundle.job_id);
    const failing = await json(await post(t.baseUrl, `/sessions/${id}/rt-offline-bundle`, { text: 'Please explode.' }));
    await t.services.jobs.whenSettled(failing.job_id);

    const form = new FormData();
    form.append('name', 'Hooked');
    form.append('base_avatar_id', 'astronaut');
    form.append('image', new Blob([new Uint8Array(await fs.readFile(FIXTURE))], { type: 'image/png' }), 'portrait.png');
    const avatar = await fetch(`${t.baseUrl}/avatars/custom`, { method: 'POST', body: form });
    expect(avatar.status, `custom avatar: ${await avatar.clone().text()}`).toBe(200);
    const avatarId = (await json(avatar)).id;

    expect((await fetch(`${t.baseUrl}/sessions/${id}`, { method: 'DELETE' })).status).toBe(200);

    const types = [
      'session.started',
      'turn.completed',
      'recording.ready',
      'bundle.completed',
      'bundle.failed',
      'avatar.created',
      'session.terminated',
    ];
    await receiver.until(
      (received) => types.every((type) => received.some((r) => r.status === 204 && JSON.parse(r.body).type === type)),
      DELIVERY_MS,
      'every event type',
    );
    const events = receiver.delivered(SECRET);
    const byType = (type: string) => events.find((event) => event.type === type)!;
    for (const event of events) {
      expect(event.id).toMatch(/^msg_[0-9a-f]{32}$/u);
      expect(Number.isNaN(Date.parse(event.timestamp))).toBe(false);
    }
    expect(byType('session.started').data).toMatchObject({ session_id: id, avatar_id: 'card', model: 'mock' });
    expect(byType('turn.completed').data).toMatchObject({
      session_id: id,
      kind: 'speak',
      assistant_text: 'Hello there.',
      outcome: 'completed',
    });
    expect(byType('recording.ready').data).toMatchObject({
      session_id: id,
      artifact_url: `/sessions/${id}/rt-recording/artifact`,
    });
    expect(byType('bundle.completed').data).toMatchObject({ session_id: id, job_id: bundle.job_id });
    expect(byType('bundle.failed').data).toMatchObject({
      session_id: id,
      job_id: failing.job_id,
      error: expect.any(String),
    });
    expect(byType('avatar.created').data).toMatchObject({ avatar_id: avatarId, name: 'Hooked' });
    expect(byType('session.terminated').data).toEqual({ session_id: id, reason: 'deleted by client' });
    // A forged body does not verify.
    const { Webhook } = await import('standardwebhooks');
    const started = receiver.received.find((r) => JSON.parse(r.body).type === 'session.started')!;
    expect(() =>
      new Webhook(SECRET).verify(started.body.replace('mock', 'fake'), started.headers as Record<string, string>),
    ).toThrow();
  }, 120_000);

  it('a receiver answering 500 twice then 200 gets the same webhook-id three times', async () => {
    const receiver = await startWebhookReceiver({ script: [500, 500], fallback: 200 });
    cleanups.push(() => receiver.close());
    const t = await startTestApp({ avatarsDir, env: webhookEnv(receiver), overrides: { webhooks: FAST_BACKOFF } });
    cleanups.push(() => t.close());
    const id = await createSession(t);
    expect((await post(t.baseUrl, `/sessions/${id}/start`)).status).toBe(200);
    await receiver.until((received) => received.some((r) => r.status === 200), DELIVERY_MS, 'a delivery answered 200');
    expect(receiver.received.map((r) => r.status)).toEqual([500, 500, 200]);
    expect(new Set(receiver.received.map((r) => r.headers['webhook-id'])).size).toBe(1);
    expect(receiver.delivered(SECRET).map((e) => e.type)).toEqual(['session.started']);
    const metrics = await (await fetch(`${t.baseUrl}/metrics`)).text();
    expect(metrics).toMatch(/^avatar_webhook_deliveries_delivered_total 1$/mu);
  });

  it('a refusing receiver (4xx other than 408/429) is not retried: the delivery is given up and counted failed', async () => {
    const receiver = await startWebhookReceiver({ fallback: 410 });
    cleanups.push(() => receiver.close());
    const t = await startTestApp({ avatarsDir, env: webhookEnv(receiver), overrides: { webhooks: FAST_BACKOFF } });
    cleanups.push(() => t.close());
    const id = await createSession(t);
    await post(t.baseUrl, `/sessions/${id}/start`);
    await fetch(`${t.baseUrl}/sessions/${id}`, { method: 'DELETE' });
    await receiver.until((received) => received.length >= 2, DELIVERY_MS, 'both events tried');
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(receiver.received).toHaveLength(2);
    expect(await (await fetch(`${t.baseUrl}/metrics`)).text()).toMatch(/^avatar_webhook_deliveries_failed_total 2$/mu);
  });

  it('a receiver that never answers does not slow speak: the turn is answered and played while the delivery is still held', async () => {
    const receiver = await startWebhookReceiver({ fallback: 'hang' });
    cleanups.push(() => receiver.close());
    const t = await startTestApp({ avatarsDir, env: webhookEnv(receiver), overrides: { tts: toneTtsRegistry(200) } });
    cleanups.push(() => t.close());
    const id = await createSession(t);
    expect((await post(t.baseUrl, `/sessions/${id}/start`)).status).toBe(200);
    await receiver.until((received) => received.length >= 1, DELIVERY_MS, 'session.started held by the receiver');
    const sse = await SseClient.open(`${t.baseUrl}/sessions/${id}/events`);
    cleanups.push(async () => sse.close());
    expect((await post(t.baseUrl, `/sessions/${id}/speak`, { text: 'Still talking.' })).status).toBe(200);
    await sse.waitFor((e) => e.type === 'status' && e.data.stage === 'idle', TURN_MS, 'idle after speak');
    // Nothing was answered yet: the speak and its whole turn went by while the first delivery hung.
    expect(receiver.received.every((r) => r.status === null)).toBe(true);
    expect(JSON.parse(receiver.received[0].body).type).toBe('session.started');
  });

  it('keeps a bounded outbox: past its bound the oldest deliveries are dropped and counted', async () => {
    // Nobody listens on this port: every attempt fails and is retried a minute later, so deliveries pile up.
    const gone = await startWebhookReceiver();
    await gone.close();
    const t = await startTestApp({
      avatarsDir,
      env: webhookEnv(gone),
      overrides: { webhooks: { backoffBaseMs: 60_000, outboxMaxEntries: 2 } },
    });
    cleanups.push(() => t.close());
    const ids = [await createSession(t), await createSession(t)];
    for (const id of ids) await post(t.baseUrl, `/sessions/${id}/start`);
    for (const id of ids) await fetch(`${t.baseUrl}/sessions/${id}`, { method: 'DELETE' });
    const kept: OutboxEntry[] = [];
    for await (const entry of t.services.store.sublevel<OutboxEntry>('webhook-messages').values()) kept.push(entry);
    expect(kept.map((entry) => JSON.parse(entry.body)).map((body) => `${body.type} ${body.data.session_id}`)).toEqual(
      ids.map((id) => `session.terminated ${id}`),
    );
    expect(await (await fetch(`${t.baseUrl}/metrics`)).text()).toMatch(/^avatar_webhook_deliveries_dropped_total 2$/mu);
  });

  it('a per-session webhook_url gets its session’s events, only on SERVICE_WEBHOOK_ALLOWED_HOSTS (else 400)', async () => {
    const service = await startWebhookReceiver();
    const own = await startWebhookReceiver();
    cleanups.push(
      () => service.close(),
      () => own.close(),
    );
    const t = await startTestApp({ avatarsDir, env: webhookEnv(service), overrides: { webhooks: FAST_BACKOFF } });
    cleanups.push(() => t.close());
    for (const url of [
      'http://169.254.169.254/latest/meta-data',
      'http://localhost:1/x',
      'ftp://127.0.0.1/x',
      'http://user:pw@127.0.0.1/x',
    ]) {
      const refused = await post(t.baseUrl, '/sessions', { avatar_id: 'card', model: 'mock', webhook_url: url });
      expect(refused.status, url).toBe(400);
      expect((await json(refused)).detail).toMatch(/SERVICE_WEBHOOK_ALLOWED_HOSTS/u);
    }
    const id = await createSession(t, { webhook_url: own.url });
    await post(t.baseUrl, `/sessions/${id}/start`);
    await own.until((received) => received.length >= 1, DELIVERY_MS, 'the session receiver');
    await service.until((received) => received.length >= 1, DELIVERY_MS, 'the service receiver');
    expect(own.delivered(SECRET).map((e) => e.type)).toEqual(['session.started']);
    expect(service.delivered(SECRET).map((e) => e.type)).toEqual(['session.started']);
  });

  it('configuration: a malformed secret, or a receiver without a secret, is refused at start-up', () => {
    const problems = (env: Record<string, string>) => {
      try {
        loadConfig(env, '/ignored');
        return [];
      } catch (error) {
        if (!(error instanceof ConfigError)) throw error;
        return error.problems;
      }
    };
    expect(
      problems({ SERVICE_WEBHOOK_URL: 'http://127.0.0.1:9/h', SERVICE_WEBHOOK_SECRET: 'not-a-secret' }).join(),
    ).toMatch(/SERVICE_WEBHOOK_SECRET must be whsec_/u);
    expect(problems({ SERVICE_WEBHOOK_URL: 'http://127.0.0.1:9/h' }).join()).toMatch(
      /SERVICE_WEBHOOK_SECRET is required/u,
    );
    expect(
      problems({ SERVICE_WEBHOOK_SECRET: SECRET, SERVICE_WEBHOOK_ALLOWED_HOSTS: 'https://x.example.com' }).join(),
    ).toMatch(/SERVICE_WEBHOOK_ALLOWED_HOSTS/u);
    expect(
      loadConfig(
        {
          ...{
            SERVICE_WEBHOOK_URL: 'http://127.0.0.1:9/h',
            SERVICE_WEBHOOK_SECRET: SECRET,
            SERVICE_WEBHOOK_ALLOWED_HOSTS: 'hooks.example.com,.corp.example',
          },
        },
        '/ignored',
      ).webhooks,
    ).toEqual({
      url: 'http://127.0.0.1:9/h',
      secret: SECRET,
      allowedHosts: ['hooks.example.com', '.corp.example'],
    });
  });
});

describe('the webhook outbox in LevelDB', () => {
  it('persists deliveries in order, drops the oldest past its bound, and loads what is left after a reopen', async () => {
    const dir = await tempDir('outbox-');
    let dropped = 0;
    const store = await Store.open(dir);
    const outbox = new WebhookOutbox(store, 3, () => dropped++);
    await outbox.load();
    for (let i = 0; i < 5; i++)
      await outbox.add({
        id: `msg_${i}`,
        url: 'http://127.0.0.1:9/h',
        type: 'session.started',
        body: '{}',
        createdAt: i,
        attempts: 0,
        nextAt: i,
      });
    expect(outbox.all().map((entry) => entry.id)).toEqual(['msg_2', 'msg_3', 'msg_4']);
    expect(dropped).toBe(2);
    await store.close();
    const reopened = await Store.open(dir);
    const again = new WebhookOutbox(reopened, 3);
    await again.load();
    expect(again.all().map((entry) => entry.id)).toEqual(['msg_2', 'msg_3', 'msg_4']);
    const next = await again.add({
      id: 'msg_5',
      url: 'http://127.0.0.1:9/h',
      type: 'session.started',
      body: '{}',
      createdAt: 5,
      attempts: 0,
      nextAt: 5,
    });
    expect(next!.key > again.all()[1].key).toBe(true);
    expect(again.all().map((entry) => entry.id)).toEqual(['msg_3', 'msg_4', 'msg_5']);
    await reopened.close();
  });
});

describe('kill -9 with a delivery pending', () => {
  const services: ServiceProcess[] = [];
  afterAll(async () => {
    await Promise.all(services.map((service) => service.kill()));
  });

  it('the delivery pending when the service was killed arrives after the restart, with the same webhook-id', async () => {
    const receiver = await startWebhookReceiver({ fallback: 'hang' });
    cleanups.push(() => receiver.close());
    const avatarsDir = await avatarsWithCard();
    const env = webhookEnv(receiver);
    const first = await startServiceProcess({ env, avatarsDir });
    services.push(first);
    const id = await createSession(first);
    expect((await post(first.baseUrl, `/sessions/${id}/start`)).status).toBe(200);
    await receiver.until((received) => received.length >= 1, DELIVERY_MS, 'session.started in flight');
    const pendingId = receiver.received[0].headers['webhook-id'];
    await first.kill();

    receiver.release(503);
    receiver.fallback = 200;
    const second = await startServiceProcess({ env, avatarsDir, dataDir: first.dataDir });
    services.push(second);
    await receiver.until(
      (received) => received.filter((r) => r.status === 200).length >= 2,
      60_000,
      'the pending delivery after the restart',
    );
    const delivered = receiver.delivered(SECRET);
    expect(delivered.map((event) => [event.id, event.type])).toContainEqual([pendingId, 'session.started']);
    expect(delivered.find((event) => event.id === pendingId)!.data).toMatchObject({ session_id: id });
    // The session the crash ended is reported too, once the restarted service has turned it into a tombstone.
    expect(delivered.find((event) => event.type === 'session.terminated')!.data).toEqual({
      session_id: id,
      reason: 'service restarted',
    });
    await second.stop();
  }, 120_000);
});

describe('restart with an offline bundle unfinished', () => {
  it('a bundle job the service died while running is failed at the restart and reported bundle.failed once, through the outbox', async () => {
    const receiver = await startWebhookReceiver();
    cleanups.push(() => receiver.close());
    const avatarsDir = await avatarsWithCard();
    const env = webhookEnv(receiver);
    const first = await startTestApp({ avatarsDir, env, overrides: { webhooks: FAST_BACKOFF } });
    cleanups.push(() => first.close());
    const sessionId = await createSession(first);
    // What a process that died mid-render leaves: the job's record still `running` (a clean shutdown fails its
    // jobs itself, and reports them, before it stops).
    const jobId = randomUUID();
    const now = new Date().toISOString();
    await new JobStore(first.services.store).put({
      job_id: jobId,
      session_id: sessionId,
      status: 'running',
      progress: 0.4,
      error: null,
      created_at: now,
      updated_at: now,
    });
    await first.close();

    const second = await startTestApp({
      avatarsDir,
      env,
      dataDir: first.dataDir,
      overrides: { webhooks: FAST_BACKOFF },
    });
    cleanups.push(() => second.close());
    const bundleFailed = () => receiver.delivered(SECRET).filter((event) => event.type === 'bundle.failed');
    await receiver.until(() => bundleFailed().length > 0, DELIVERY_MS, 'bundle.failed after the restart');
    expect(bundleFailed().map((event) => event.data)).toEqual([
      { job_id: jobId, session_id: sessionId, error: 'interrupted by restart' },
    ]);
    // A further restart finds the job failed already and reports nothing: a second event would have been
    // delivered by now or still be in the outbox.
    await second.close();
    const third = await startTestApp({
      avatarsDir,
      env,
      dataDir: first.dataDir,
      overrides: { webhooks: FAST_BACKOFF },
    });
    cleanups.push(() => third.close());
    await third.close();
    const store = await Store.open(first.dataDir);
    cleanups.push(() => store.close());
    const outbox = new WebhookOutbox(store);
    await outbox.load();
    expect(outbox.all().filter((entry) => entry.type === 'bundle.failed')).toEqual([]);
    expect(bundleFailed()).toHaveLength(1);
  }, 120_000);
});
