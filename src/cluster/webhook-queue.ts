import { Queue, UnrecoverableError, Worker, type Job } from 'bullmq';
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
import { WEBHOOK_OUTBOX_MAX_ENTRIES, type OutboxEntry } from '../webhooks/outbox.ts';
import { BULL_PREFIX } from './scripts.ts';

export const WEBHOOK_QUEUE_NAME = 'webhooks';
/**
 * BullMQ's attempt cap, out of the way: a delivery ends by the retry period (`WEBHOOK_RETRY_PERIOD_MS`), which the
 * worker checks itself, or by a refusal. At one attempt per 10 minutes a day is ~150 attempts.
 */
const MAX_ATTEMPTS = 1_000;
/** The custom backoff's name (BullMQ looks it up in the worker's `backoffStrategy`). */
const BACKOFF_TYPE = 'webhook';

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
}

/**
 * Webhook deliveries of cluster mode, on BullMQ: an event is emitted once it is a job in Redis (its `webhook-id`
 * is the job id, so it exists once), and every node's worker takes from the one queue, so each delivery is
 * attempted by one node at a time and delivered once cluster-wide, also when the node that emitted it died.
 * The same attempt, backoff, retry period and refusal rules as the one-node outbox (`src/webhooks/delivery.ts`);
 * the queue holds at most `maxEntries` waiting and retrying deliveries, the oldest dropped past it.
 */
export class ClusterWebhookQueue {
  private readonly queue: Queue<Message>;
  private worker: Worker<Message> | null = null;
  private readonly closing = new AbortController();
  private readonly backoffBaseMs: number;
  private readonly maxEntries: number;

  constructor(private readonly deps: ClusterWebhookDeps) {
    this.backoffBaseMs = deps.backoffBaseMs ?? WEBHOOK_BACKOFF_BASE_MS;
    this.maxEntries = deps.maxEntries ?? WEBHOOK_OUTBOX_MAX_ENTRIES;
    this.queue = new Queue<Message>(WEBHOOK_QUEUE_NAME, { connection: deps.connection, prefix: BULL_PREFIX });
  }

  /** Starts this node's worker (only with a secret: unsigned deliveries are never sent). */
  start(): void {
    if (!this.deps.signer || this.worker || this.closing.signal.aborted) return;
    this.worker = new Worker<Message>(WEBHOOK_QUEUE_NAME, (job) => this.process(job), {
      connection: this.deps.connection,
      prefix: BULL_PREFIX,
      name: this.deps.nodeId,
      concurrency: WEBHOOK_DELIVERY_CONCURRENCY,
      settings: { backoffStrategy: (attemptsMade: number) => backoffDelayMs(attemptsMade, this.backoffBaseMs, WEBHOOK_BACKOFF_MAX_MS) },
    });
    this.worker.on('error', (error) => this.deps.logger.warn({ err: errorForLog(error) }, 'webhook worker error'));
  }

  /** Stores a delivery (the event is emitted once Redis has it), dropping the oldest waiting one past the bound. */
  async add(entry: Omit<OutboxEntry, 'key'>): Promise<void> {
    const { attempts: _attempts, nextAt: _nextAt, ...message } = entry;
    if ((await this.queue.getJobCountByTypes('waiting', 'delayed', 'prioritized')) >= this.maxEntries) await this.dropOldest();
    await this.queue.add(entry.type, message, {
      jobId: entry.id,
      attempts: MAX_ATTEMPTS,
      backoff: { type: BACKOFF_TYPE },
      removeOnComplete: true,
      removeOnFail: true,
    });
  }

  /** Stops this node's worker; attempts in flight are aborted and retried (by another node, or this one after its restart). */
  async close(): Promise<void> {
    if (this.closing.signal.aborted) return;
    this.closing.abort(new DOMException('webhook delivery closed', 'AbortError'));
    await this.worker?.close();
    await this.queue.close();
  }

  private async dropOldest(): Promise<void> {
    const candidates = await this.queue.getJobs(['waiting', 'delayed', 'prioritized'], 0, 0, true);
    const oldest = candidates.filter(Boolean).sort((a, b) => a.timestamp - b.timestamp)[0];
    if (!oldest) return;
    try {
      await oldest.remove();
      this.deps.counters.dropped();
    } catch {
      // Taken by a worker meanwhile: it is no longer waiting, so it does not count against the bound.
    }
  }

  private async process(job: Job<Message>): Promise<void> {
    const message = job.data;
    const result = await attemptDelivery({
      message,
      signer: this.deps.signer!,
      fetch: this.deps.fetch ?? fetch,
      timeoutMs: WEBHOOK_ATTEMPT_TIMEOUT_MS,
      signal: this.closing.signal,
    });
    if (result === 'delivered') {
      this.deps.counters.delivered();
      return;
    }
    if (this.closing.signal.aborted) throw new Error('node shutting down');
    const nextAt = Date.now() + backoffDelayMs(job.attemptsMade + 1, this.backoffBaseMs, WEBHOOK_BACKOFF_MAX_MS);
    if (result === 'give-up' || nextAt - message.createdAt > WEBHOOK_RETRY_PERIOD_MS) {
      this.deps.counters.failed();
      this.deps.logger.warn({ webhookId: message.id, type: message.type, refused: result === 'give-up' }, 'webhook delivery given up');
      throw new UnrecoverableError('webhook delivery given up');
    }
    throw new Error('webhook attempt failed');
  }
}
