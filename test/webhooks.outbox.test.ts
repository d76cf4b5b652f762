import pino from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { WebhookSigner } from '../actors/upstream/webhook-signing.ts';
import { Store } from '../src/store/db.ts';
import { WEBHOOK_DELIVERY_CONCURRENCY, WebhookDelivery } from '../src/webhooks/delivery.ts';
import { WEBHOOK_BODY_MAX_BYTES, WebhookOutbox, type OutboxEntry } from '../src/webhooks/outbox.ts';
import { tempDir } from './helpers/app.ts';
import { startWebhookReceiver, type WebhookReceiver } from './fakes/webhook-receiver.ts';

const SECRET = `whsec_${Buffer.from('a test secret of 32 bytes, ok!!!').toString('base64')}`;
/** Deliveries over loopback; generous for 2 busy cores. */
const DELIVERY_MS = 15_000;

const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => undefined);
});

async function openOutbox(dir: string, options: { maxEntries?: number; maxBytes?: number } = {}) {
  const store = await Store.open(dir);
  let dropped = 0;
  const outbox = new WebhookOutbox(store, options.maxEntries, () => dropped++, options.maxBytes);
  await outbox.load();
  return { store, outbox, dropped: () => dropped };
}

function message(i: number, url: string, body = `{"n":${i}}`): Omit<OutboxEntry, 'key'> {
  const now = Date.now();
  return { id: `msg_${i}`, url, type: 'turn.completed', body, createdAt: now, attempts: 0, nextAt: now };
}

function deliveryOf(outbox: WebhookOutbox, options: { backoffBaseMs?: number } = {}) {
  const counts = { delivered: 0, failed: 0 };
  const delivery = new WebhookDelivery({
    outbox,
    signer: new WebhookSigner(SECRET),
    logger: pino({ level: 'silent' }),
    counters: { delivered: () => counts.delivered++, failed: () => counts.failed++ },
    ...options,
  });
  cleanups.push(() => delivery.close());
  return { delivery, counts };
}

async function receiver(options: Parameters<typeof startWebhookReceiver>[0]): Promise<WebhookReceiver> {
  const started = await startWebhookReceiver(options);
  cleanups.push(() => started.close());
  return started;
}

describe('the webhook outbox byte budget', () => {
  it('drops the oldest deliveries past its byte bound, refuses a body over WEBHOOK_BODY_MAX_BYTES, and holds the bound after a reopen', async () => {
    const dir = await tempDir('outbox-bytes-');
    const { store, outbox, dropped } = await openOutbox(dir, { maxBytes: 10_000 });
    const body = 'x'.repeat(3_000);
    for (let i = 0; i < 6; i++) await outbox.add(message(i, 'http://127.0.0.1:9/h', body));
    expect(outbox.all().map((e) => e.id)).toEqual(['msg_3', 'msg_4', 'msg_5']);
    expect(outbox.bytes).toBe(9_000);
    expect(dropped()).toBe(3);
    expect(await outbox.add(message(9, 'http://127.0.0.1:9/h', 'y'.repeat(WEBHOOK_BODY_MAX_BYTES + 1)))).toBeNull();
    expect(dropped()).toBe(4);
    expect(outbox.size).toBe(3);
    await store.close();

    const again = await openOutbox(dir, { maxBytes: 10_000 });
    cleanups.push(() => again.store.close());
    expect(again.outbox.all().map((e) => e.id)).toEqual(['msg_3', 'msg_4', 'msg_5']);
    expect(again.outbox.bytes).toBe(9_000);
  });

  it('writes a body once: a reschedule rewrites only attempts and next time, which a reopen reads back', async () => {
    const dir = await tempDir('outbox-once-');
    const { store, outbox } = await openOutbox(dir);
    const written: Array<{ sublevel: string; bytes: number }> = [];
    store.db.on('write', (operations: Array<{ type: string; key: string; value?: unknown }>) => {
      for (const op of operations)
        if (op.type === 'put')
          written.push({ sublevel: String(op.key).split('!')[1], bytes: JSON.stringify(op.value).length });
    });
    const entry = (await outbox.add(message(1, 'http://127.0.0.1:9/h', 'z'.repeat(50_000))))!;
    for (let attempts = 1; attempts <= 5; attempts++)
      await outbox.reschedule({ ...entry, attempts, nextAt: entry.createdAt + attempts * 1000 });
    expect(written.filter((w) => w.sublevel === 'webhook-messages')).toHaveLength(1);
    const schedules = written.filter((w) => w.sublevel === 'webhook-schedule');
    expect(schedules).toHaveLength(5);
    expect(Math.max(...schedules.map((w) => w.bytes))).toBeLessThan(100);
    await store.close();

    const again = await openOutbox(dir);
    cleanups.push(() => again.store.close());
    expect(again.outbox.all()).toEqual([{ ...entry, attempts: 5, nextAt: entry.createdAt + 5000 }]);
  });

  it('moves whole entries an earlier version left in webhook-outbox to the new layout, once', async () => {
    const dir = await tempDir('outbox-legacy-');
    const store = await Store.open(dir);
    const legacy = store.sublevel<OutboxEntry>('webhook-outbox');
    await legacy.put('0000000000000007', {
      key: '0000000000000007',
      ...message(7, 'http://127.0.0.1:9/h'),
      attempts: 3,
      nextAt: 123,
    });
    await store.close();
    const { store: reopened, outbox } = await openOutbox(dir);
    cleanups.push(() => reopened.close());
    expect(outbox.all()).toMatchObject([{ id: 'msg_7', attempts: 3, nextAt: 123 }]);
    expect(await reopened.sublevel('webhook-outbox').get('0000000000000007')).toBeUndefined();
  });
});

describe('per-receiver back-off', () => {
  it('a failing receiver is probed with its oldest delivery only, at the back-off steps; once it answers every delivery follows', async () => {
    const failing = await receiver({ fallback: 503 });
    const healthy = await receiver({ fallback: 204 });
    const dir = await tempDir('outbox-backoff-');
    const { store, outbox } = await openOutbox(dir);
    cleanups.push(() => store.close());
    for (let i = 0; i < 200; i++) await outbox.add(message(i, failing.url));
    for (let i = 200; i < 205; i++) await outbox.add(message(i, healthy.url));
    const { delivery, counts } = deliveryOf(outbox, { backoffBaseMs: 100 });
    const started = performance.now();
    delivery.kick();
    await healthy.until((received) => received.length >= 5, DELIVERY_MS, "the healthy receiver's five");
    await failing.until(
      (received) => received.length >= WEBHOOK_DELIVERY_CONCURRENCY + 2,
      DELIVERY_MS,
      'the first burst and two probes',
    );
    const elapsed = performance.now() - started;
    // Before its first failure a receiver gets up to WEBHOOK_DELIVERY_CONCURRENCY attempts at once; then only probes,
    // at 100, 300, 700, 1500 ms …: at most log2(elapsed / base) + 1 of them, never one per delivery.
    const firstBurst = ['msg_0', 'msg_1', 'msg_2', 'msg_3'];
    expect(failing.received.length).toBeLessThanOrEqual(WEBHOOK_DELIVERY_CONCURRENCY + Math.log2(elapsed / 100) + 1);
    expect(firstBurst).toEqual(
      expect.arrayContaining([...new Set(failing.received.map((r) => String(r.headers['webhook-id'])))]),
    );
    expect(failing.received.slice(-2).map((r) => r.headers['webhook-id'])).toEqual(['msg_0', 'msg_0']);
    // Every other delivery of the failing receiver was never attempted, so nothing of it was rewritten.
    expect(firstBurst).toEqual(
      expect.arrayContaining(
        outbox
          .all()
          .filter((e) => e.url === failing.url && e.attempts > 0)
          .map((e) => e.id),
      ),
    );

    failing.fallback = 204;
    await failing.until(
      (received) => received.filter((r) => r.status === 204).length >= 200,
      DELIVERY_MS,
      'all 200 once it answers',
    );
    expect(failing.delivered(SECRET)).toHaveLength(200);
    expect(counts).toEqual({ delivered: 205, failed: 0 });
    expect(outbox.size).toBe(0);
  });

  it('after a restart a dead receiver stays backed off as its stored schedule says: nothing is sent before then', async () => {
    const dead = await receiver({ fallback: 503 });
    const dir = await tempDir('outbox-restart-');
    const first = await openOutbox(dir);
    for (let i = 0; i < 50; i++) await first.outbox.add(message(i, dead.url));
    const probe = first.outbox.all()[0];
    await first.outbox.reschedule({ ...probe, attempts: 12, nextAt: Date.now() + 1_500 });
    await first.store.close();

    const { store, outbox } = await openOutbox(dir);
    cleanups.push(() => store.close());
    const { delivery } = deliveryOf(outbox, { backoffBaseMs: 60_000 });
    const restarted = Date.now();
    delivery.kick();
    await dead.until((received) => received.length >= 1, DELIVERY_MS, 'the probe at its stored time');
    expect(Date.now() - restarted).toBeGreaterThanOrEqual(1_400);
    // One probe, the oldest; the next waits the receiver's 13th back-off step (a minute here).
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(dead.received.map((r) => r.headers['webhook-id'])).toEqual(['msg_0']);
  });
});
