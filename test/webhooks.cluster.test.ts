import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WebhookSigner, newWebhookId } from '../actors/upstream/webhook-signing.ts';
import { connectRedis } from '../src/cluster/node.ts';
import { ClusterWebhookQueue } from '../src/cluster/webhook-queue.ts';
import { startRedis, type RedisProcess } from './helpers/redis-server.ts';
import { startWebhookReceiver, type WebhookReceiver } from './fakes/webhook-receiver.ts';

/**
 * Cluster mode's webhook deliveries on BullMQ, against a real redis-server: two nodes' queues on one Redis, as two
 * service processes would have them (each with its own connection and worker).
 */

const SECRET = `whsec_${Buffer.from('a test secret of 32 bytes, ok!!!').toString('base64')}`;
/** Deliveries through Redis and loopback; generous for 2 busy cores. */
const DELIVERY_MS = 20_000;

interface Node {
  queue: ClusterWebhookQueue;
  counts: { delivered: number; failed: number; dropped: number };
  close(): Promise<void>;
}

let redis: RedisProcess;
const nodes: Node[] = [];

function node(name: string, options: { worker: boolean; maxEntries?: number }): Node {
  const connection = connectRedis(redis.url, { forBullmq: true });
  const counts = { delivered: 0, failed: 0, dropped: 0 };
  const queue = new ClusterWebhookQueue({
    connection,
    nodeId: name,
    signer: new WebhookSigner(SECRET),
    logger: pino({ level: 'silent' }),
    counters: { delivered: () => counts.delivered++, failed: () => counts.failed++, dropped: () => counts.dropped++ },
    backoffBaseMs: 20,
    maxEntries: options.maxEntries,
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

const event = (url: string, type = 'session.started') => {
  const now = Date.now();
  return { id: newWebhookId(), url, type, body: JSON.stringify({ type, timestamp: new Date(now).toISOString(), data: { n: 1 } }), createdAt: now, attempts: 0, nextAt: now };
};

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
    await receiver.until((received) => received.some((r) => r.status === 200), DELIVERY_MS, 'the delivery answered 200');
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
      while (survivor.counts.delivered < 1 && Date.now() < counted) await new Promise((resolve) => setTimeout(resolve, 20));
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
});
