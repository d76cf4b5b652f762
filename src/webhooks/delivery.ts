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
export function backoffDelayMs(
  attempts: number,
  baseMs = WEBHOOK_BACKOFF_BASE_MS,
  maxMs = WEBHOOK_BACKOFF_MAX_MS,
): number {
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
export async function attemptDelivery({
  message,
  signer,
  fetch: fetchImpl,
  timeoutMs,
  signal,
}: AttemptInput): Promise<AttemptResult> {
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
 * What the loop knows of one receiver (a URL). While it fails, its deliveries wait together: one probe (the oldest
 * delivery) at its back-off time, nothing else, so a dead receiver costs one attempt per back-off step however many
 * deliveries wait for it (issue 42, H2: each delivery retrying on its own kept a core busy).
 */
interface ReceiverState {
  /** Consecutive failed attempts; 0 while it answers. */
  failures: number;
  /** While failing: when the next probe may go. */
  nextAt: number;
}

/**
 * Sends the outbox's deliveries: each signed afresh per attempt (a new `webhook-timestamp`, the same `webhook-id`),
 * a 2xx delivers it, a network error, a timeout, a 408, a 429 or a 5xx retries it with exponential backoff for
 * the retry period, any other status gives up (the receiver refused it; a redirect is not followed, since it could
 * point anywhere). The back-off is per receiver: after a failure only its oldest delivery is tried again, at the
 * back-off time, and the rest follow once it answers. Runs beside the sessions: nothing a turn does waits for it.
 */
export class WebhookDelivery {
  private readonly inFlight = new Set<string>();
  private readonly receivers = new Map<string, ReceiverState>();
  /** Attempts in flight per receiver: whether a failing one is being probed, without walking its deliveries. */
  private readonly inFlightOf = new Map<string, number>();
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

  /** Something was added or became due: starts what may start now and times the next. Costs O(receivers) while they fail. */
  kick(): void {
    if (this.closing.signal.aborted) return;
    const now = Date.now();
    let nextAt = Infinity;
    for (const url of this.options.outbox.receivers()) {
      nextAt = Math.min(nextAt, this.giveUpExpired(url, now));
      const receiver = this.receiverState(url);
      if (receiver.failures > 0) {
        // A failing receiver gets one probe at a time, when its back-off is over.
        if (this.probing(url)) continue;
        if (receiver.nextAt > now) {
          nextAt = Math.min(nextAt, receiver.nextAt);
          continue;
        }
      }
      for (const entry of this.options.outbox.pendingOf(url)) {
        if (this.inFlight.size >= this.concurrency) break;
        if (this.inFlight.has(entry.key)) continue;
        this.start(entry);
        if (receiver.failures > 0) break;
      }
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

  /**
   * A receiver seen for the first time (at start-up, or after its queue emptied) takes its state from its entries:
   * after a restart a dead receiver stays backed off as far as its deliveries' stored schedules say.
   */
  private receiverState(url: string): ReceiverState {
    let receiver = this.receivers.get(url);
    if (!receiver) {
      receiver = { failures: 0, nextAt: 0 };
      for (const entry of this.options.outbox.pendingOf(url)) {
        receiver.failures = Math.max(receiver.failures, entry.attempts);
        receiver.nextAt = Math.max(receiver.nextAt, entry.nextAt);
      }
      this.receivers.set(url, receiver);
    }
    return receiver;
  }

  private probing(url: string): boolean {
    return (this.inFlightOf.get(url) ?? 0) > 0;
  }

  /** Gives up a receiver's deliveries past the retry period (oldest first); answers when the next one expires. */
  private giveUpExpired(url: string, now: number): number {
    for (const entry of this.options.outbox.pendingOf(url)) {
      const expiresAt = entry.createdAt + this.retryPeriodMs;
      if (expiresAt > now || this.inFlight.has(entry.key)) return expiresAt;
      this.giveUp(entry, entry.attempts, false);
    }
    return Infinity;
  }

  private giveUp(entry: OutboxEntry, attempts: number, refused: boolean): Promise<void> {
    this.options.counters.failed();
    this.options.logger.warn({ webhookId: entry.id, type: entry.type, attempts, refused }, 'webhook delivery given up');
    return this.options.outbox.remove(entry.key).catch((error: unknown) => this.logNotStored(entry, error));
  }

  private logNotStored(entry: OutboxEntry, error: unknown): void {
    this.options.logger.error({ webhookId: entry.id, err: errorForLog(error) }, 'webhook delivery state not stored');
  }

  private wakeAt(at: number): void {
    if (at === Infinity || at >= this.timerAt) return;
    if (this.timer) clearTimeout(this.timer);
    this.timerAt = at;
    this.timer = setTimeout(
      () => {
        this.timer = null;
        this.timerAt = Infinity;
        this.kick();
      },
      Math.max(0, at - Date.now()),
    );
    this.timer.unref();
  }

  private start(entry: OutboxEntry): void {
    this.inFlight.add(entry.key);
    this.inFlightOf.set(entry.url, (this.inFlightOf.get(entry.url) ?? 0) + 1);
    const attempt = this.deliver(entry)
      .catch((error: unknown) => this.logNotStored(entry, error))
      .finally(() => {
        this.inFlight.delete(entry.key);
        const left = (this.inFlightOf.get(entry.url) ?? 1) - 1;
        if (left > 0) this.inFlightOf.set(entry.url, left);
        else this.inFlightOf.delete(entry.url);
        this.attempts.delete(attempt);
        // A receiver with nothing left waiting is forgotten (the map stays as small as the outbox's receivers).
        if (this.options.outbox.pendingOf(entry.url).next().done) this.receivers.delete(entry.url);
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
    const receiver = this.receiverState(entry.url);
    if (result !== 'retry') {
      // It answered: whatever waits for it may go.
      receiver.failures = 0;
      receiver.nextAt = 0;
    }
    if (result === 'delivered') {
      counters.delivered();
      logger.debug({ webhookId: entry.id, type: entry.type, attempts }, 'webhook delivered');
      await outbox.remove(entry.key);
      return;
    }
    if (result === 'give-up') return this.giveUp(entry, attempts, true);
    const now = Date.now();
    // Attempts that were already in flight when the receiver went down add no further step.
    if (receiver.nextAt <= now) {
      receiver.failures += 1;
      receiver.nextAt = now + backoffDelayMs(receiver.failures, this.backoffBaseMs, this.backoffMaxMs);
    }
    if (receiver.nextAt - entry.createdAt > this.retryPeriodMs) return this.giveUp(entry, attempts, false);
    await outbox.reschedule({ ...entry, attempts: Math.max(attempts, receiver.failures), nextAt: receiver.nextAt });
  }
}
