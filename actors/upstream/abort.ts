/**
 * The abort helpers every stage shares. Which error an abort surfaces as is part of each caller's contract:
 * - `abortReason`: the signal's own reason, so the caller sees why it stopped (TTS upstream calls, the
 *   inference pool); `abortReasonAsError` the same but always an Error (the render pool, audio conversion).
 * - `abortError`: always an `AbortError` carrying the reason as `cause` (LLM, ASR and remote lipsync, whose
 *   callers tell an abort from a failure by the name).
 */

/** The signal's reason, or an AbortError saying `fallback` when it has none. */
export function abortReason(signal: AbortSignal, fallback = 'aborted'): unknown {
  return signal.reason ?? new DOMException(fallback, 'AbortError');
}

/** The signal's reason when it is an Error, else an AbortError saying `fallback`. */
export function abortReasonAsError(signal: AbortSignal, fallback = 'aborted'): Error {
  return signal.reason instanceof Error ? signal.reason : new DOMException(fallback, 'AbortError');
}

/** A fresh `AbortError` whatever the reason (kept as `cause`). */
export function abortError(signal: AbortSignal): Error {
  const error = new Error('The operation was aborted', { cause: signal.reason });
  error.name = 'AbortError';
  return error;
}

/**
 * Whether `error` is an abort. `includeTimeout` (the default) also counts a `TimeoutError`, which is how an
 * `AbortSignal.timeout` among the caller's signals aborts; without it only an `AbortError` counts.
 */
export function isAbortError(error: unknown, { includeTimeout = true }: { includeTimeout?: boolean } = {}): boolean {
  return error instanceof Error && (error.name === 'AbortError' || (includeTimeout && error.name === 'TimeoutError'));
}

/**
 * Resolves with `work`, or rejects as soon as `signal` aborts. The work itself is left to finish (used where
 * cancelling it would cost more than letting it complete: a worker thread's compiled engines, a prepared
 * renderer); the caller just stops waiting.
 */
export function untilAborted<T>(
  work: Promise<T>,
  signal: AbortSignal,
  reasonOf: (signal: AbortSignal) => unknown = (s) => s.reason,
): Promise<T> {
  if (signal.aborted) return Promise.reject(reasonOf(signal));
  return new Promise<T>((resolve, reject) => {
    const onAbort = (): void => reject(reasonOf(signal));
    signal.addEventListener('abort', onAbort, { once: true });
    work.then(
      (value) => {
        signal.removeEventListener('abort', onAbort);
        resolve(value);
      },
      (error: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(error);
      },
    );
  });
}
