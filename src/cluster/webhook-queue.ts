import { createHash } from 'node:crypto';
import { DelayedError, Queue, UnrecoverableError, Worker, type Job } from 'bullmq';
import type { Redis } from 'ioredis';
import type { Logger } from 'pino';
import type { FetchLike } from '../../actors/upstream/http.ts';
import type { WebhookSigner } from '../../actors/upstream/webhook-signing.ts';
import { errorForLog } from '../logger.ts';
import {
  attemptDelivery,
  backoffDelayMs,
  WEBHOOK_ATTEMPT_TIMEOUT_MS,
  WEBHOOK_BACKOFF_BASE_MS,
  WEBHOOK_BACKOFF_MAX_MS,
  WEBHOOK_DELIVERY_CONCURRENCY,
  WEBHOOK_RETRY_PERIOD_MS,
  type DeliveryCounters,
} from '../webhooks/delivery.ts';
import {
  WEBHOOK_BODY_MAX_BYTES,
  WEBHOOK_OUTBOX_MAX_BYTES,
  WEBHOOK_OUTBOX_MAX_ENTRIES,
  type OutboxEntry,
} from '../webhooks/outbox.ts';
import { BULL_PREFIX } from './scripts.ts';

export const WEBHOOK_QUEUE_NAME = 'webhooks';
/**
 * BullMQ's attempt cap, out of the way: a delivery ends by the retry period (`WEBHOOK_RETRY_PERIOD_MS`), which the
 * worker checks itself, or by a refusal. At one attempt per 10 minutes a day is ~150 attempts.
 */
const MAX_ATTEMPTS = 1_000;
/** The custom backoff's name (BullMQ looks it up in the worker's `backoffStrategy`). */
const BACKOFF_TYPE = 'webhook';
/** Redis hash of the queued deliveries' body sizes (job id → bytes), and the counter of their sum, shared by all nodes. */
const BODY_SIZES_KEY = `${BULL_PREFIX}:${WEBHOOK_QUEUE_NAME}:body-sizes`;
const BODY_BYTES_KEY = `${BULL_PREFIX}:${WEBHOOK_QUEUE_NAME}:body-bytes`;
/** Per receiver (a hash of its URL): consecutive failures, when the next probe may go, and until when one is in flight. */
const receiverKey = (url: string) =>
  `${BULL_PREFIX}:${WEBHOOK_QUEUE_NAME}:receiver:${createHash('sha256').update(url).digest('hex')}`;
/**
 * How long a probe of a failing receiver holds its turn: the attempt's deadline and a margin. A node that dies during
 * a probe frees the receiver after this.
 */
const PROBE_LEASE_MS = WEBHOOK_ATTEMPT_TIMEOUT_MS + 5_000;

/** Counts a body once (idempotent per job id): answers the total after it. */
const RESERVE_BYTES = `
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 1 then return redis.call('INCRBY', KEYS[2], ARGV[2]) end
return tonumber(redis.call('GET', KEYS[2]) or '0')`;
/** Uncounts a body (idempotent: a job removed twice, by a drop and by its worker, is uncounted once). */
const RELEASE_BYTES = `
local size = redis.call('HGET', KEYS[1], ARGV[1])
if size then redis.call('HDEL', KEYS[1], ARGV[1]); redis.call('DECRBY', KEYS[2], size) end
return 0`;
/** Uncounts bodies whose jobs are gone (a node that died between a job's end and its release); ARGV[1] is the job key prefix. */
const RECONCILE_BYTES = `
local fields = redis.call('HKEYS', KEYS[1])
for _, id in ipairs(fields) do
  if redis.call('EXISTS', ARGV[1] .. id) == 0 then
    redis.call('DECRBY', KEYS[2], redis.call('HGET', KEYS[1], id)); redis.call('HDEL', KEYS[1], id)
  end
end
return 0`;
/**
 * Whether an attempt to a receiver may go now: 0 if so (a failing receiver's turn is then taken for this one probe),
 * else when to look again. ARGV: now, probe lease.
 */
const CLAIM_RECEIVER = `
local now = tonumber(ARGV[1])
local state = redis.call('HMGET', KEYS[1], 'failures', 'nextAt', 'probeUntil', 'stepMs')
local failures, nextAt, probeUntil = tonumber(state[1] or '0'), tonumber(state[2] or '0'), tonumber(state[3] or '0')
if failures == 0 then return 0 end
if nextAt > now then return nextAt end
-- A probe in flight: look again a back-off step later (or when its lease ends), not a whole lease after it answered.
if probeUntil > now then return math.min(probeUntil, now + tonumber(state[4] or ARGV[2])) end
redis.call('HSET', KEYS[1], 'probeUntil', now + tonumber(ARGV[2]))
return 0`;
/**
 * A failed attempt: one more back-off step, unless the receiver is already backed off (attempts in flight when it went
 * down add no further step). A compare-and-set on the failure count the caller read (ARGV[2]), so the delay
 * (ARGV[3], `backoffDelayMs` of that count plus one) is computed in one place. Answers when the next attempt may go.
 * ARGV: now, failures read, delay, state lifetime.
 */
const STEP_RECEIVER = `
local now = tonumber(ARGV[1])
local state = redis.call('HMGET', KEYS[1], 'failures', 'nextAt')
local failures, nextAt = tonumber(state[1] or '0'), tonumber(state[2] or '0')
if nextAt > now or failures ~= tonumber(ARGV[2]) then return math.max(nextAt, now) end
nextAt = now + tonumber(ARGV[3])
redis.call('HSET', KEYS[1], 'failures', failures + 1, 'nextAt', nextAt, 'stepMs', ARGV[3])
redis.call('HDEL', KEYS[1], 'probeUntil')
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return nextAt`;

type Message = Omit<OutboxEntry, 'key' | 'attempts' | 'nextAt'>;

export interface ClusterWebhookDeps {
  connection: Redis;
  nodeId: string;
  signer: WebhookSigner | null;
  logger: Logger;
  counters: DeliveryCounters & { dropped(): void };
  fetch?: FetchLike;
  backoffBaseMs?: number;
  maxEntries?: number;
  /** Body bytes the whole cluster's queue holds at most (WEBHOOK_OUTBOX_MAX_BYTES, the one-node outbox's budget). */
  maxBytes?: number;
}

/**
 * Webhook deliveries of cluster mode, on BullMQ: an event is emitted once it is a job in Redis (its `webhook-id`
 * is the job id, so it exists once), and every node's worker takes from the one queue, so each delivery is
 * attempted by one node at a time and delivered once cluster-wide, also when the node that emitted it died.
 * The same attempt, backoff, retry period and refusal rules as the one-node outbox (`src/webhooks/delivery.ts`);
 * the queue holds at most `maxEntries` waiting and retrying deliveries and `maxBytes` of their bodies (counted in Redis,
 * so every node sees the same total), the oldest dropped past either; a body over WEBHOOK_BODY_MAX_BYTES is not queued.
 * The back-off is per receiver, kept in Redis: while a receiver fails, one delivery (from any node) probes it per
 * back-off step and its other deliveries are only moved further along the delayed set, never sent nor signed.
 */
export class ClusterWebhookQueue {
  private readonly queue: Queue<Message>;
  private worker: Worker<Message> | null = null;
  private readonly closing = new AbortController();
  private readonly backoffBaseMs: number;
  private readonly maxEntries: number;
  private readonly maxBytes: number;

  constructor(private readonly deps: ClusterWebhookDeps) {
    this.backoffBaseMs = deps.backoffBaseMs ?? WEBHOOK_BACKOFF_BASE_MS;
    this.maxEntries = deps.maxEntries ?? WEBHOOK_OUTBOX_MAX_ENTRIES;
    this.maxBytes = deps.maxBytes ?? WEBHOOK_OUTBOX_MAX_BYTES;
    this.queue = new Queue<Message>(WEBHOOK_QUEUE_NAME, { connection: deps.connection, prefix: BULL_PREFIX });
  }

  /** Starts this node's worker (only with a secret: unsigned deliveries are never sent). */
  start(): void {
    if (!this.deps.signer || this.worker || this.closing.signal.aborted) return;
    this.worker = new Worker<Message>(WEBHOOK_QUEUE_NAME, (job, token) => this.process(job, token), {
      connection: this.deps.connection,
      prefix: BULL_PREFIX,
      name: this.deps.nodeId,
      concurrency: WEBHOOK_DELIVERY_CONCURRENCY,
      settings: {
        backoffStrategy: (attemptsMade: number) =>
          backoffDelayMs(attemptsMade, this.backoffBaseMs, WEBHOOK_BACKOFF_MAX_MS),
      },
    });
    this.worker.on('error', (error) => this.deps.logger.warn({ err: errorForLog(error) }, 'webhook worker error'));
    // Delivered or given up: the job is removed (removeOnComplete/removeOnFail), so its body no longer counts.
    this.worker.on('completed', (job) => void this.releaseBytes(job.id));
    this.worker.on('failed', (job) => {
      if (job?.finishedOn) void this.releaseBytes(job.id);
    });
    this.deps.connection
      .eval(RECONCILE_BYTES, 2, BODY_SIZES_KEY, BODY_BYTES_KEY, `${BULL_PREFIX}:${WEBHOOK_QUEUE_NAME}:`)
      .catch((error: unknown) =>
        this.deps.logger.warn({ err: errorForLog(error) }, 'webhook byte count not reconciled'),
      );
  }

  /**
   * Stores a delivery (the event is emitted once Redis has it), dropping the oldest waiting ones past the bounds. A body
   * over WEBHOOK_BODY_MAX_BYTES is not queued (counted as dropped), as in the one-node outbox.
   */
  async add(entry: Omit<OutboxEntry, 'key'>): Promise<void> {
    const { attempts: _attempts, nextAt: _nextAt, ...message } = entry;
    const size = Buffer.byteLength(entry.body);
    if (size > Math.min(WEBHOOK_BODY_MAX_BYTES, this.maxBytes)) {
      this.deps.counters.dropped();
      return;
    }
    if ((await this.queue.getJobCountByTypes('waiting', 'delayed', 'prioritized')) >= this.maxEntries)
      await this.dropOldest();
    // Counted before the job exists: concurrent adds on any node must not each see room for themselves.
    let total = Number(
      await this.deps.connection.eval(RESERVE_BYTES, 2, BODY_SIZES_KEY, BODY_BYTES_KEY, entry.id, size),
    );
    while (total > this.maxBytes) {
      if (!(await this.dropOldest(entry.id))) break;
      total = Number(await this.deps.connection.get(BODY_BYTES_KEY));
    }
    await this.queue
      .add(entry.type, message, {
        jobId: entry.id,
        attempts: MAX_ATTEMPTS,
        backoff: { type: BACKOFF_TYPE },
        removeOnComplete: true,
        removeOnFail: true,
      })
      .catch(async (error: unknown) => {
        await this.releaseBytes(entry.id);
        throw error;
      });
  }

  /** Body bytes the cluster's queue holds (the bound is `maxBytes`). */
  async bytes(): Promise<number> {
    return Number((await this.deps.connection.get(BODY_BYTES_KEY)) ?? 0);
  }

  /** Stops this node's worker; attempts in flight are aborted and retried (by another node, or this one after its restart). */
  async close(): Promise<void> {
    if (this.closing.signal.aborted) return;
    this.closing.abort(new DOMException('webhook delivery closed', 'AbortError'));
    await this.worker?.close();
    await this.queue.close();
  }

  /** Drops the oldest waiting delivery (never `keep`, the one being added); false when there was none to drop. */
  private async dropOldest(keep?: string): Promise<boolean> {
    const candidates = await this.queue.getJobs(['waiting', 'delayed', 'prioritized'], 0, 1, true);
    const oldest = candidates.filter((job) => job && job.id !== keep).sort((a, b) => a.timestamp - b.timestamp)[0];
    if (!oldest) return false;
    try {
      await oldest.remove();
      this.deps.counters.dropped();
      await this.releaseBytes(oldest.id);
    } catch {
      // Taken by a worker meanwhile: it is no longer waiting, so it does not count against the bound.
    }
    return true;
  }

  private async releaseBytes(id: string | undefined): Promise<void> {
    if (!id) return;
    await this.deps.connection
      .eval(RELEASE_BYTES, 2, BODY_SIZES_KEY, BODY_BYTES_KEY, id)
      .catch((error: unknown) => this.deps.logger.warn({ err: errorForLog(error) }, 'webhook byte count not released'));
  }

  /** A failed attempt: the receiver's next back-off step (in Redis, for every node), or the one it is already in. */
  private async stepReceiver(url: string): Promise<number> {
    const key = receiverKey(url);
    const failures = Number((await this.deps.connection.hget(key, 'failures')) ?? 0);
    const delayMs = backoffDelayMs(failures + 1, this.backoffBaseMs, WEBHOOK_BACKOFF_MAX_MS);
    return Number(
      await this.deps.connection.eval(STEP_RECEIVER, 1, key, Date.now(), failures, delayMs, WEBHOOK_RETRY_PERIOD_MS),
    );
  }

  private async process(job: Job<Message>, token: string | undefined): Promise<void> {
    const message = job.data;
    if (Date.now() - message.createdAt > WEBHOOK_RETRY_PERIOD_MS) this.giveUp(message, false);
    const waitUntil = Number(
      await this.deps.connection.eval(CLAIM_RECEIVER, 1, receiverKey(message.url), Date.now(), PROBE_LEASE_MS),
    );
    // The receiver is backed off, or being probed: this delivery waits, unsent and unsigned, and costs no attempt.
    if (waitUntil > 0) await this.delay(job, token, waitUntil);
    const result = await attemptDelivery({
      message,
      signer: this.deps.signer!,
      fetch: this.deps.fetch ?? fetch,
      timeoutMs: WEBHOOK_ATTEMPT_TIMEOUT_MS,
      signal: this.closing.signal,
    });
    if (this.closing.signal.aborted) throw new Error('node shutting down');
    // It answered: its other deliveries may go.
    if (result !== 'retry') await this.deps.connection.del(receiverKey(message.url));
    if (result === 'delivered') {
      this.deps.counters.delivered();
      return;
    }
    if (result === 'give-up') this.giveUp(message, true);
    const nextAt = await this.stepReceiver(message.url);
    if (nextAt - message.createdAt > WEBHOOK_RETRY_PERIOD_MS) this.giveUp(message, false);
    await this.delay(job, token, nextAt);
  }

  private giveUp(message: Message, refused: boolean): never {
    this.deps.counters.failed();
    this.deps.logger.warn({ webhookId: message.id, type: message.type, refused }, 'webhook delivery given up');
    throw new UnrecoverableError('webhook delivery given up');
  }

  /** Moves the job to the delayed set until `at` (BullMQ's DelayedError: not a failed attempt). */
  private async delay(job: Job<Message>, token: string | undefined, at: number): Promise<never> {
    await job.moveToDelayed(at, token);
    throw new DelayedError();
  }
}
