import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WebhookSigner, newWebhookId } from '../actors/upstream/webhook-signing.ts';
import { connectRedis } from '../src/cluster/node.ts';
import { ClusterWebhookQueue } from '../src/cluster/webhook-queue.ts';
import { WEBHOOK_DELIVERY_CONCURRENCY } from '../src/webhooks/delivery.ts';
import { WEBHOOK_BODY_MAX_BYTES } from '../src/webhooks/outbox.ts';
import { startRedis, type RedisProcess } from './helpers/redis-server.ts';
import { startWebhookReceiver, type WebhookReceiver } from './fakes/webhook-receiver.ts';

/**
 * Cluster mode's webhook deliveries on BullMQ, against a real redis-server: two nodes' queues on one Redis, as two
 * service processes would have them (each with its own connection and worker).
 */

const SECRET = `whsec_${Buffer.from('a test secret of 32 bytes, ok!!!').toString('base64')}`;
/** Deliveries through Redis and loopback; generous for 2 busy cores. */
const DELIVERY_MS = 20_000;
/** Deliveries that waited behind a probe look again one back-off step later (the largest here is a few seconds). */
const PROBE_WAIT_MS = 10_000;

interface Node {
  queue: ClusterWebhookQueue;
  counts: { delivered: number; failed: number; dropped: number };
  close(): Promise<void>;
}

let redis: RedisProcess;
const nodes: Node[] = [];

function node(
  name: string,
  options: { worker: boolean; maxEntries?: number; maxBytes?: number; backoffBaseMs?: number; redisUrl?: string },
): Node {
  const connection = connectRedis(options.redisUrl ?? redis.url, { forBullmq: true });
  const counts = { delivered: 0, failed: 0, dropped: 0 };
  const queue = new ClusterWebhookQueue({
    connection,
    nodeId: name,
    signer: new WebhookSigner(SECRET),
    logger: pino({ level: process.env.DEBUG_HOOKS ? 'debug' : 'silent' }),
    counters: { delivered: () => counts.delivered++, failed: () => counts.failed++, dropped: () => counts.dropped++ },
    backoffBaseMs: options.backoffBaseMs ?? 20,
    maxEntries: options.maxEntries,
    maxBytes: options.maxBytes,
  });
  if (options.worker) queue.start();
  const made: Node = {
    queue,
    counts,
    async close() {
      await queue.close();
      connection.disconnect();
    },
  };
  nodes.push(made);
  return made;
}

const event = (url: string, type = 'session.started', text = '') => {
  const now = Date.now();
  return {
    id: newWebhookId(),
    url,
    type,
    body: JSON.stringify({ type, timestamp: new Date(now).toISOString(), data: { n: 1, text } }),
    createdAt: now,
    attempts: 0,
    nextAt: now,
  };
};

/** Queued deliveries of a Redis, as any node sees them (a fresh connection). */
async function queued(url: string): Promise<Array<{ id: string; body: string }>> {
  const check = connectRedis(url);
  try {
    const { Queue } = await import('bullmq');
    const { BULL_PREFIX } = await import('../src/cluster/scripts.ts');
    const queue = new Queue('webhooks', { connection: check, prefix: BULL_PREFIX });
    const jobs = await queue.getJobs(['waiting', 'delayed', 'prioritized', 'active']);
    await queue.close();
    return jobs.map((job) => ({ id: String(job.id), body: String(job.data.body) }));
  } finally {
    check.disconnect();
  }
}

beforeAll(async () => {
  redis = await startRedis();
});
afterAll(async () => {
  for (const made of nodes.splice(0)) await made.close().catch(() => undefined);
  await redis?.stop();
});

describe('webhooks in cluster mode (BullMQ)', () => {
  let receiver: WebhookReceiver;
  afterAll(() => receiver?.close());

  it('an event is delivered once cluster-wide with two workers; 500 twice then 200 carries the same webhook-id three times', async () => {
    receiver = await startWebhookReceiver({ script: [500, 500], fallback: 200 });
    const a = node('node-a', { worker: true });
    const b = node('node-b', { worker: true });
    const sent = event(receiver.url);
    await a.queue.add(sent);
    await receiver.until(
      (received) => received.some((r) => r.status === 200),
      DELIVERY_MS,
      'the delivery answered 200',
    );
    // Anything a second worker would have sent has had time to arrive.
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(receiver.received.map((r) => r.status)).toEqual([500, 500, 200]);
    expect(receiver.received.map((r) => r.headers['webhook-id'])).toEqual([sent.id, sent.id, sent.id]);
    expect(receiver.delivered(SECRET).map((e) => e.type)).toEqual(['session.started']);
    expect(a.counts.delivered + b.counts.delivered).toBe(1);
    await a.close();
    await b.close();
  });

  it('an event stored by a node that died before delivering it is delivered by another node', async () => {
    const late = await startWebhookReceiver();
    try {
      const dying = node('node-c', { worker: false });
      const sent = event(late.url, 'turn.completed');
      await dying.queue.add(sent);
      await dying.close();
      const survivor = node('node-d', { worker: true });
      await late.until((received) => received.length >= 1, DELIVERY_MS, 'the orphaned delivery');
      expect(late.delivered(SECRET).map((e) => [e.id, e.type])).toEqual([[sent.id, 'turn.completed']]);
      // The receiver records the request before the worker has read its answer and counted it.
      const counted = Date.now() + DELIVERY_MS;
      while (survivor.counts.delivered < 1 && Date.now() < counted)
        await new Promise((resolve) => setTimeout(resolve, 20));
      expect(survivor.counts.delivered).toBe(1);
      await survivor.close();
    } finally {
      await late.close();
    }
  });

  it('keeps the queue bounded: past its bound the oldest waiting delivery is dropped and counted', async () => {
    const idle = node('node-e', { worker: false, maxEntries: 2 });
    const sent = [event('http://127.0.0.1:9/a'), event('http://127.0.0.1:9/b'), event('http://127.0.0.1:9/c')];
    for (const message of sent) {
      await idle.queue.add(message);
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
    expect(idle.counts.dropped).toBe(1);
    const check = connectRedis(redis.url);
    try {
      const { Queue } = await import('bullmq');
      const { BULL_PREFIX } = await import('../src/cluster/scripts.ts');
      const queue = new Queue('webhooks', { connection: check, prefix: BULL_PREFIX });
      const waiting = await queue.getJobs(['waiting', 'delayed', 'prioritized']);
      expect(waiting.map((job) => job.id).sort()).toEqual([sent[1].id, sent[2].id].sort());
      for (const job of waiting) await job.remove();
      await queue.close();
    } finally {
      check.disconnect();
    }
    await idle.close();
  });

  it('keeps the bodies within the byte budget cluster-wide: a body over its own cap is not queued, the oldest go past the total', async () => {
    const own = await startRedis();
    try {
      const maxBytes = 10 * 1024;
      const a = node('node-f', { worker: false, maxBytes, redisUrl: own.url });
      const b = node('node-g', { worker: false, maxBytes, redisUrl: own.url });
      const huge = event('http://127.0.0.1:9/huge', 'turn.completed', 'x'.repeat(WEBHOOK_BODY_MAX_BYTES));
      await a.queue.add(huge);
      expect(a.counts.dropped).toBe(1);
      expect(await queued(own.url)).toEqual([]);
      expect(await a.queue.bytes()).toBe(0);
      // Twenty bodies of ~1 KiB from two nodes: ten fit, the oldest go, whichever node queued them.
      const sent = Array.from({ length: 20 }, (_, i) =>
        event(`http://127.0.0.1:9/${i}`, 'turn.completed', 'y'.repeat(1_000)),
      );
      for (const [i, message] of sent.entries()) {
        await (i % 2 === 0 ? a : b).queue.add(message);
        await new Promise((resolve) => setTimeout(resolve, 2));
      }
      const kept = await queued(own.url);
      const keptBytes = kept.reduce((sum, job) => sum + Buffer.byteLength(job.body), 0);
      expect(keptBytes).toBeLessThanOrEqual(maxBytes);
      expect(await b.queue.bytes()).toBe(keptBytes);
      expect(kept.length).toBeGreaterThanOrEqual(8);
      expect(kept.map((job) => job.id).sort()).toEqual(
        sent
          .slice(-kept.length)
          .map((message) => message.id)
          .sort(),
      );
      expect(a.counts.dropped + b.counts.dropped).toBe(1 + sent.length - kept.length);
    } finally {
      for (const made of nodes.splice(0)) await made.close().catch(() => undefined);
      await own.stop();
    }
  });

  it('a dead receiver gets at most one attempt per back-off step from all nodes together; once it answers every delivery follows', async () => {
    const own = await startRedis();
    const dead = await startWebhookReceiver({ fallback: 503 });
    try {
      const baseMs = 200;
      const a = node('node-h', { worker: true, backoffBaseMs: baseMs, redisUrl: own.url });
      const b = node('node-i', { worker: true, backoffBaseMs: baseMs, redisUrl: own.url });
      const sent = Array.from({ length: 60 }, () => event(dead.url, 'turn.completed', 'z'.repeat(2_000)));
      const started = performance.now();
      for (const message of sent) await a.queue.add(message);
      // However short the first burst was, five attempts take at least three back-off steps (1.4 s).
      await dead.until((received) => received.length >= 5, DELIVERY_MS, 'the first burst and the probes');
      // Anything a per-delivery retry would have sent has had time to arrive.
      await new Promise((resolve) => setTimeout(resolve, 1_000));
      const elapsed = performance.now() - started;
      // Before the first failure each node's worker may have WEBHOOK_DELIVERY_CONCURRENCY attempts in flight; then
      // only probes, one per back-off step (200, 400, 800 ms …): at most log2(elapsed / base) + 1 of them.
      expect(dead.received.length).toBeLessThanOrEqual(
        2 * WEBHOOK_DELIVERY_CONCURRENCY + Math.log2(elapsed / baseMs) + 1,
      );
      expect(new Set(dead.received.map((r) => r.headers['webhook-id'])).size).toBeLessThanOrEqual(
        2 * WEBHOOK_DELIVERY_CONCURRENCY + Math.log2(elapsed / baseMs) + 1,
      );
      expect(dead.received.length).toBeLessThan(sent.length);
      expect(a.counts.delivered + b.counts.delivered + a.counts.failed + b.counts.failed).toBe(0);

      dead.fallback = 204;
      await dead.until(
        (received) =>
          new Set(received.filter((r) => r.status === 204).map((r) => r.headers['webhook-id'])).size >= sent.length,
        DELIVERY_MS + PROBE_WAIT_MS,
        'all sixty once it answers',
      );
      expect(new Set(dead.delivered(SECRET).map((e) => e.id))).toEqual(new Set(sent.map((message) => message.id)));
      const counted = Date.now() + DELIVERY_MS;
      while (
        (a.counts.delivered + b.counts.delivered < sent.length || (await a.queue.bytes()) > 0) &&
        Date.now() < counted
      )
        await new Promise((resolve) => setTimeout(resolve, 20));
      expect(a.counts.delivered + b.counts.delivered).toBe(sent.length);
      expect(await a.queue.bytes()).toBe(0);
    } finally {
      for (const made of nodes.splice(0)) await made.close().catch(() => undefined);
      await dead.close();
      await own.stop();
    }
  });
});
