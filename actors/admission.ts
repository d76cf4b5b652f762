/**
 * The one admission primitive of the service: a few slots run at once, a bounded line waits behind them, and
 * the rest are refused at once with a typed overload error (`Overloaded`, with when to retry) instead of piling
 * up work nobody bounded. A waiter that gives up (its AbortSignal) leaves the line; a released slot passes
 * straight to the next in line, so a newcomer cannot overtake it. Used by the TTS previews
 * (`src/tts/preview-queue.ts`), the avatar creations (`actors/faces/image-jobs.ts`), the remote lip-sync
 * inferences (`actors/lipsync/kserve-client.ts`) and the offline bundle jobs (`src/recording/offline-jobs.ts`).
 *
 * `Overloaded` lives here, below `src/`, because actors refuse work too; `src/domain-errors.ts` re-exports it as
 * the domain's overload refusal, and the error plugin answers it (and every subclass) with 503 + Retry-After.
 */

/**
 * The service cannot take this now, the request itself was fine: a cap or a bounded queue is full, the process
 * is out of file descriptors, or it is shutting down. `detail` is client-safe; `retryAfterS` is when trying
 * again makes sense (the Retry-After header).
 */
export class Overloaded extends Error {
  readonly detail: string;

  constructor(
    detail: string,
    readonly retryAfterS: number,
    options?: ErrorOptions,
  ) {
    super(detail, options);
    this.detail = detail;
    this.name = new.target.name;
  }
}

/** Gives a slot back; extra calls do nothing. */
export type Release = () => void;

export interface AdmissionBounds {
  /** Slots running at once (at least 1). */
  maxRunning: number;
  /** Callers waiting for a slot beyond the running ones (0: none wait). */
  maxWaiting: number;
  /** The error a full line refuses a newcomer with (an `Overloaded`, or a caller's own kind of it). */
  refusal: () => Error;
}

interface Waiter {
  /** Hands over the slot of a caller that finished (the running count stays the same). */
  start(): void;
  refuse(error: unknown): void;
}

export class Admission {
  private running = 0;
  private readonly waiting: Waiter[] = [];

  constructor(private readonly bounds: AdmissionBounds) {}

  /**
   * A running slot now, or the refusal thrown at once (nobody waits): for a caller that only counts places, such
   * as an upload admitted before its body is read.
   */
  take(): Release {
    if (this.running >= this.bounds.maxRunning) throw this.bounds.refusal();
    this.running += 1;
    return this.releaser();
  }

  /**
   * Waits for a running slot and resolves with its release (call it once the work is done). Throws (synchronously,
   * so a caller can refuse before doing anything else) the signal's reason when it already aborted and the
   * refusal when the line is full; the promise rejects with `signal.reason` when the caller gives up while
   * waiting (it leaves the line), or with the error `refuseWaiting` gives.
   */
  acquire(signal?: AbortSignal): Promise<Release> {
    signal?.throwIfAborted();
    if (this.running < this.bounds.maxRunning) return Promise.resolve(this.take());
    if (this.waiting.length >= this.bounds.maxWaiting) throw this.bounds.refusal();
    return new Promise<Release>((resolve, reject) => {
      const waiter: Waiter = {
        start: () => {
          signal?.removeEventListener('abort', onAbort);
          // The slot was handed over by a release already counted; only the release is new.
          resolve(this.releaser());
        },
        refuse: (error) => {
          signal?.removeEventListener('abort', onAbort);
          reject(error);
        },
      };
      const onAbort = (): void => {
        const index = this.waiting.indexOf(waiter);
        if (index >= 0) this.waiting.splice(index, 1);
        reject(signal!.reason);
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      this.waiting.push(waiter);
    });
  }

  /** Rejects everyone waiting with `error` (the service or client is closing); the running keep their slots. */
  refuseWaiting(error: unknown): void {
    for (const waiter of this.waiting.splice(0)) waiter.refuse(error);
  }

  /** Slots running and callers waiting (tests, diagnostics). */
  get load(): { running: number; waiting: number } {
    return { running: this.running, waiting: this.waiting.length };
  }

  private releaser(): Release {
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const next = this.waiting.shift();
      if (next) next.start();
      else this.running -= 1;
    };
  }
}
