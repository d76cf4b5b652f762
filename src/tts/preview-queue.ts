/**
 * Admission for `POST /tts/preview`: a few previews synthesise at once, a bounded line waits behind them, and
 * the rest are refused at once (503 + Retry-After) instead of piling up work nobody bounded. Previews are
 * tooling, not conversation: they wait for each other here, and the built-in engine runs them apart from live
 * turns (actors/tts/builtin/pool.ts), so a flood of them never delays a live session's speech.
 */
import { AtCapacity } from '../domain-errors.ts';

/**
 * Previews synthesising at once. Two keep the built-in preview engine busy (each asks for its next sentence
 * while the current one is handed over) and bound the upstream calls a flood of previews makes to a cloud
 * provider; a third would only wait inside the engine instead of here.
 */
export const MAX_RUNNING_PREVIEWS = 2;
/**
 * Previews waiting for a running slot. A waiting preview holds its ≤ 1000-character text and its socket, no
 * audio; 18 behind the 2 running admit a burst of 20 (a page previewing every voice), the 21st is refused.
 */
export const MAX_WAITING_PREVIEWS = 18;
/** Retry-After of a full line: a 1000-character preview takes a few seconds, so a slot frees within this. */
export const PREVIEW_RETRY_AFTER_S = 5;

export function previewsBusy(): AtCapacity {
  return new AtCapacity(`${MAX_RUNNING_PREVIEWS + MAX_WAITING_PREVIEWS} previews are already running or waiting; try again shortly`, PREVIEW_RETRY_AFTER_S);
}

interface Waiter {
  start(): void;
}

export class PreviewQueue {
  private running = 0;
  private readonly waiting: Waiter[] = [];

  constructor(
    private readonly maxRunning = MAX_RUNNING_PREVIEWS,
    private readonly maxWaiting = MAX_WAITING_PREVIEWS,
  ) {}

  /**
   * Waits for a running slot and resolves with its release (call it once the preview is done; extra calls do
   * nothing). Throws the 503 at once when the line is full; rejects with `signal.reason` when the caller gives
   * up while waiting, leaving the line.
   */
  async acquire(signal: AbortSignal): Promise<() => void> {
    signal.throwIfAborted();
    if (this.running < this.maxRunning) return this.take();
    if (this.waiting.length >= this.maxWaiting) throw previewsBusy();
    await new Promise<void>((resolve, reject) => {
      const waiter: Waiter = {
        start: () => {
          signal.removeEventListener('abort', onAbort);
          resolve();
        },
      };
      const onAbort = (): void => {
        const index = this.waiting.indexOf(waiter);
        if (index >= 0) this.waiting.splice(index, 1);
        reject(signal.reason);
      };
      signal.addEventListener('abort', onAbort, { once: true });
      this.waiting.push(waiter);
    });
    // The slot was handed over by `release` already counted; only the release is new.
    return this.releaser();
  }

  /** Previews running and waiting (tests, diagnostics). */
  get load(): { running: number; waiting: number } {
    return { running: this.running, waiting: this.waiting.length };
  }

  private take(): () => void {
    this.running += 1;
    return this.releaser();
  }

  private releaser(): () => void {
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const next = this.waiting.shift();
      // The slot passes straight to the next in line, so a newcomer cannot overtake it.
      if (next) next.start();
      else this.running -= 1;
    };
  }
}
