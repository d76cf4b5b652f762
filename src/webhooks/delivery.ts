import type { Logger } from 'pino';
import { fetchUpstream, type FetchLike } from '../../actors/upstream/http.ts';
import { UpstreamError } from '../../actors/upstream/errors.ts';
import type { WebhookSigner } from '../../actors/upstream/webhook-signing.ts';
import { errorForLog } from '../logger.ts';
import type { OutboxEntry, WebhookOutbox } from './outbox.ts';

/** The first retry waits this long; each further one twice as long (1 s, 2 s, 4 s, … up to WEBHOOK_BACKOFF_MAX_MS). */
export const WEBHOOK_BACKOFF_BASE_MS = 1_000;
/** Retries of a receiver that stays down settle at one every 10 minutes: often enough to catch its return, cheap for both. */
export const WEBHOOK_BACKOFF_MAX_MS = 10 * 60 * 1000;
/**
 * A delivery is retried for this long after its event (then given up, counted as failed): a receiver down for a
 * day has bigger problems than our events, and the outbox bound keeps what waits small meanwhile.
 */
export const WEBHOOK_RETRY_PERIOD_MS = 24 * 3600 * 1000;
/**
 * One attempt's deadline, until the receiver's status line: receivers are told to answer at once and work later
 * (Standard Webhooks); a receiver that holds the request is a failed attempt, retried later.
 */
export const WEBHOOK_ATTEMPT_TIMEOUT_MS = 10_000;
/** Attempts in flight at once, all receivers: one slow receiver must not hold the others' events back. */
export const WEBHOOK_DELIVERY_CONCURRENCY = 4;

export interface DeliveryCounters {
  delivered(): void;
  failed(): void;
}

export interface WebhookDeliveryOptions {
  outbox: WebhookOutbox;
  signer: WebhookSigner;
  logger: Logger;
  counters: DeliveryCounters;
  fetch?: FetchLike;
  backoffBaseMs?: number;
  backoffMaxMs?: number;
  retryPeriodMs?: number;
  attemptTimeoutMs?: number;
  concurrency?: number;
}

/** What became of one attempt. */
export type AttemptResult = 'delivered' | 'retry' | 'give-up';

/** How long to wait after the `attempts`-th failed attempt: exponential from `baseMs`, at most `maxMs`. */
export function backoffDelayMs(attempts: number, baseMs = WEBHOOK_BACKOFF_BASE_MS, maxMs = WEBHOOK_BACKOFF_MAX_MS): number {
  return Math.min(maxMs, baseMs * 2 ** (attempts - 1));
}

/** What one attempt needs: the message (its id, receiver, body) and how to send it. */
export interface AttemptInput {
  message: Pick<OutboxEntry, 'id' | 'url' | 'body'>;
  signer: WebhookSigner;
  fetch: FetchLike;
  timeoutMs: number;
  signal: AbortSignal;
}

/**
 * One signed POST of a message (a fresh `webhook-timestamp` and signature, the message's `webhook-id`): a 2xx
 * delivers it; a network error, a timeout, a 408, a 429 or a 5xx is worth a retry; anything else (a refusal, a
 * redirect, which is never followed since it could point anywhere) gives up. The caller's abort answers `retry`.
 */
export async function attemptDelivery({ message, signer, fetch: fetchImpl, timeoutMs, signal }: AttemptInput): Promise<AttemptResult> {
  const headers = signer.headers(message.id, message.body);
  try {
    const response = await fetchUpstream(fetchImpl, message.url, {
      method: 'POST',
      headers: { ...headers, 'content-type': 'application/json' },
      body: message.body,
      redirect: 'manual',
      signal,
      provider: 'webhook',
      headersTimeoutMs: timeoutMs,
    });
    await response.body?.cancel().catch(() => undefined);
    // fetch answers a redirect as a 3xx with `redirect: 'manual'`: not followed, not delivered.
    return response.status >= 200 && response.status < 300 ? 'delivered' : 'give-up';
  } catch (error) {
    if (signal.aborted) return 'retry';
    if (!(error instanceof UpstreamError)) throw error;
    const status = error.upstreamStatus;
    if (status === undefined || status >= 500 || status === 408 || status === 429) return 'retry';
    return 'give-up';
  }
}

/**
 * Sends the outbox's deliveries: each signed afresh per attempt (a new `webhook-timestamp`, the same `webhook-id`),
 * a 2xx delivers it, a network error, a timeout, a 408, a 429 or a 5xx retries it with exponential backoff for
 * the retry period, any other status gives up (the receiver refused it; a redirect is not followed, since it could
 * point anywhere). Runs beside the sessions: nothing a turn does waits for it.
 */
export class WebhookDelivery {
  private readonly inFlight = new Set<string>();
  private readonly closing = new AbortController();
  private timer: NodeJS.Timeout | null = null;
  private timerAt = Infinity;
  private readonly fetchImpl: FetchLike;
  private readonly backoffBaseMs: number;
  private readonly backoffMaxMs: number;
  private readonly retryPeriodMs: number;
  private readonly attemptTimeoutMs: number;
  private readonly concurrency: number;
  private readonly attempts = new Set<Promise<void>>();

  constructor(private readonly options: WebhookDeliveryOptions) {
    this.fetchImpl = options.fetch ?? fetch;
    this.backoffBaseMs = options.backoffBaseMs ?? WEBHOOK_BACKOFF_BASE_MS;
    this.backoffMaxMs = options.backoffMaxMs ?? WEBHOOK_BACKOFF_MAX_MS;
    this.retryPeriodMs = options.retryPeriodMs ?? WEBHOOK_RETRY_PERIOD_MS;
    this.attemptTimeoutMs = options.attemptTimeoutMs ?? WEBHOOK_ATTEMPT_TIMEOUT_MS;
    this.concurrency = options.concurrency ?? WEBHOOK_DELIVERY_CONCURRENCY;
  }

  /** Something was added or became due: starts what may start now and times the next. */
  kick(): void {
    if (this.closing.signal.aborted) return;
    const now = Date.now();
    let nextAt = Infinity;
    for (const entry of this.options.outbox.all()) {
      if (this.inFlight.has(entry.key)) continue;
      if (entry.nextAt > now) {
        nextAt = Math.min(nextAt, entry.nextAt);
        continue;
      }
      if (this.inFlight.size >= this.concurrency) break;
      this.start(entry);
    }
    this.wakeAt(nextAt);
  }

  /** Stops delivering; attempts in flight are aborted (their entries stay in the outbox for the next start). */
  async close(): Promise<void> {
    if (this.closing.signal.aborted) return;
    this.closing.abort(new DOMException('webhook delivery closed', 'AbortError'));
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    await Promise.allSettled([...this.attempts]);
  }

  private wakeAt(at: number): void {
    if (at === Infinity || at >= this.timerAt) return;
    if (this.timer) clearTimeout(this.timer);
    this.timerAt = at;
    this.timer = setTimeout(() => {
      this.timer = null;
      this.timerAt = Infinity;
      this.kick();
    }, Math.max(0, at - Date.now()));
    this.timer.unref();
  }

  private start(entry: OutboxEntry): void {
    this.inFlight.add(entry.key);
    const attempt = this.deliver(entry)
      .catch((error: unknown) => this.options.logger.error({ webhookId: entry.id, err: errorForLog(error) }, 'webhook delivery state not stored'))
      .finally(() => {
        this.inFlight.delete(entry.key);
        this.attempts.delete(attempt);
        this.kick();
      });
    this.attempts.add(attempt);
  }

  private async deliver(entry: OutboxEntry): Promise<void> {
    const { outbox, logger, counters } = this.options;
    const result = await attemptDelivery({
      message: entry,
      signer: this.options.signer,
      fetch: this.fetchImpl,
      timeoutMs: this.attemptTimeoutMs,
      signal: this.closing.signal,
    });
    if (this.closing.signal.aborted) return;
    const attempts = entry.attempts + 1;
    const log = { webhookId: entry.id, type: entry.type, attempts };
    if (result === 'delivered') {
      counters.delivered();
      logger.debug(log, 'webhook delivered');
      await outbox.remove(entry.key);
      return;
    }
    const nextAt = Date.now() + backoffDelayMs(attempts, this.backoffBaseMs, this.backoffMaxMs);
    if (result === 'give-up' || nextAt - entry.createdAt > this.retryPeriodMs) {
      counters.failed();
      logger.warn({ ...log, refused: result === 'give-up' }, 'webhook delivery given up');
      await outbox.remove(entry.key);
      return;
    }
    await outbox.reschedule({ ...entry, attempts, nextAt });
  }
}
