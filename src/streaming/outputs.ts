import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from 'pino';
import { OutputLimitReached, SessionResourceNotFound } from '../domain-errors.ts';
import { errorForLog } from '../logger.ts';
import { validateOutputUrl, redactOutputUrl, type OutputType } from './output-url.ts';

/**
 * Outputs one session may push at once. Each RTMP output is one more H.264 encode of the session (~a core's
 * fraction per output, docs/streaming.md); fan-out to many belongs to the media server it feeds.
 * Past it: 409 (`OutputLimitReached`), since only deleting an output of this session frees a slot.
 */
export const MAX_OUTPUTS_PER_SESSION = 4;
/** First wait before reconnecting a failed output; doubled per failure up to `OUTPUT_RETRY_MAX_DELAY_MS`. */
export const OUTPUT_RETRY_INITIAL_MS = 1_000;
/** Longest wait between reconnects: a server back after a restart is found within this. */
export const OUTPUT_RETRY_MAX_DELAY_MS = 16_000;
/**
 * How long an output keeps reconnecting after it failed (counted from the first failure since it was last live)
 * before it is `failed` for good: long enough for a media server's restart, short enough that a wrong URL or a
 * revoked key stops costing an encoder. Deleting and adding the output tries again.
 */
export const OUTPUT_RETRY_GIVE_UP_MS = 120_000;

/** When an output reconnects and when it gives up; the constants above, shorter in tests. */
export interface OutputRetryPolicy {
  initialMs: number;
  maxDelayMs: number;
  giveUpMs: number;
}

export const OUTPUT_RETRY_POLICY: OutputRetryPolicy = {
  initialMs: OUTPUT_RETRY_INITIAL_MS,
  maxDelayMs: OUTPUT_RETRY_MAX_DELAY_MS,
  giveUpMs: OUTPUT_RETRY_GIVE_UP_MS,
};

export type OutputState = 'connecting' | 'live' | 'retrying' | 'failed' | 'stopped';

export interface OutputRequest {
  type: OutputType;
  url: string;
  bearer_token?: string;
}

export interface OutputStatus {
  output_id: string;
  type: OutputType;
  /** Scheme, host and the first path segment only (`redactOutputUrl`). */
  url: string;
  state: OutputState;
}

/** One push attempt, live once it resolved: `ended` says why it stopped on its own; `close` ends it (idempotent). */
export interface OutputLink {
  readonly ended: Promise<string>;
  close(): Promise<void>;
}

/** Starts one attempt of an output (the session's RTMP or WHIP push); rejects when it could not go live. */
export type OutputConnector = (
  request: { type: OutputType; url: string; bearerToken?: string },
  signal: AbortSignal,
) => Promise<OutputLink>;

/** Reports an output's failures to the session's clients (SSE `error` `output_failed`). */
export type OutputFailureReporter = (outputId: string, message: string) => void;

/** The session's media is gone (the session is ending): the output stops without a failure. */
export function isSessionGone(reason: string): boolean {
  return /media output closed|media clock stopped/.test(reason);
}

/**
 * One output: connects, stays live, and on a failure reports it, backs off and reconnects until it has failed for
 * `OUTPUT_RETRY_GIVE_UP_MS`. Stopping (DELETE, the session ending) closes the live link (a WHIP DELETE, ffmpeg killed).
 */
class StreamOutput {
  readonly id = randomUUID();
  state: OutputState = 'connecting';
  private readonly stopping = new AbortController();
  private link: OutputLink | null = null;
  readonly done: Promise<void>;

  constructor(
    readonly type: OutputType,
    private readonly url: URL,
    private readonly bearerToken: string | undefined,
    private readonly connect: OutputConnector,
    private readonly report: OutputFailureReporter,
    private readonly logger: Logger,
    private readonly retry: OutputRetryPolicy,
  ) {
    this.done = this.run();
  }

  get status(): OutputStatus {
    return { output_id: this.id, type: this.type, url: redactOutputUrl(this.url), state: this.state };
  }

  async stop(): Promise<void> {
    this.stopping.abort();
    await this.link?.close();
    await this.done;
    this.state = 'stopped';
  }

  private async run(): Promise<void> {
    const signal = this.stopping.signal;
    let failingSince: number | null = null;
    const { initialMs, maxDelayMs, giveUpMs } = this.retry;
    let delay = initialMs;
    while (!signal.aborted) {
      let reason: string;
      try {
        this.link = await this.connect({ type: this.type, url: this.url.href, bearerToken: this.bearerToken }, signal);
        if (signal.aborted) {
          await this.link.close();
          break;
        }
        this.state = 'live';
        this.logger.info({ outputId: this.id, type: this.type }, 'output live');
        failingSince = null;
        delay = initialMs;
        reason = await this.link.ended;
        await this.link.close();
        this.link = null;
      } catch (error) {
        reason = (error as Error).message;
      }
      if (signal.aborted) break;
      if (isSessionGone(reason)) {
        this.state = 'stopped';
        return;
      }
      failingSince ??= performance.now();
      const givingUp = performance.now() - failingSince >= giveUpMs;
      this.logger.warn(
        { outputId: this.id, type: this.type, err: errorForLog(new Error(reason)), givingUp },
        'output failed',
      );
      // Reported on each failure of a live output and on the first failed attempt after it; silent retries in between.
      if (this.state !== 'retrying' || givingUp) {
        this.report(
          this.id,
          givingUp
            ? `${this.type} output ${this.id} failed for ${giveUpMs / 1000} s and was given up: ${reason}`
            : `${this.type} output ${this.id} failed (${reason}); retrying with backoff for up to ${giveUpMs / 1000} s`,
        );
      }
      if (givingUp) {
        this.state = 'failed';
        return;
      }
      this.state = 'retrying';
      await sleep(delay, undefined, { signal }).catch(() => undefined);
      delay = Math.min(delay * 2, maxDelayMs);
    }
  }
}

/**
 * A session's outputs (RTMP and WHIP pushes, docs/streaming.md): bounded, each retried on its own, so one output's
 * failure touches neither the session, its viewers nor the other outputs. `closeAll` is the session's close step.
 */
export class SessionOutputs {
  private readonly outputs = new Map<string, StreamOutput>();
  private closed = false;

  constructor(
    private readonly connect: OutputConnector,
    private readonly report: OutputFailureReporter,
    private readonly logger: Logger,
    private readonly retry: OutputRetryPolicy = OUTPUT_RETRY_POLICY,
  ) {}

  /** Outputs still pushing or trying to (connecting, live, retrying): a failed one no longer keeps the session used. */
  get active(): number {
    return [...this.outputs.values()].filter((output) => output.state !== 'failed' && output.state !== 'stopped')
      .length;
  }

  /** Validates and starts an output (`InvalidInput` 400, `OutputLimitReached` 409); answers before it is live. */
  add(request: OutputRequest): OutputStatus {
    const url = validateOutputUrl(request.type, request.url);
    if (this.outputs.size >= MAX_OUTPUTS_PER_SESSION)
      throw new OutputLimitReached(`the session already has ${MAX_OUTPUTS_PER_SESSION} outputs; delete one first`);
    const output = new StreamOutput(
      request.type,
      url,
      request.bearer_token,
      this.connect,
      this.report,
      this.logger,
      this.retry,
    );
    this.outputs.set(output.id, output);
    return output.status;
  }

  list(): OutputStatus[] {
    return [...this.outputs.values()].map((output) => output.status);
  }

  /** Stops and forgets one output; `SessionResourceNotFound` (404) when there is none with this id. */
  async remove(outputId: string): Promise<void> {
    const output = this.outputs.get(outputId);
    if (!output) throw new SessionResourceNotFound('output not found');
    this.outputs.delete(outputId);
    await output.stop();
  }

  /** Stops every output (the session's close cascade); idempotent. */
  async closeAll(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    const outputs = [...this.outputs.values()];
    await Promise.all(outputs.map((output) => output.stop()));
  }
}
