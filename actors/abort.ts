/**
 * Resolves with `work`, or rejects as soon as `signal` aborts. The work itself is left to finish (used where
 * cancelling it would cost more than letting it complete: a worker thread's compiled engines, a prepared
 * renderer); the caller just stops waiting.
 */
export function untilAborted<T>(work: Promise<T>, signal: AbortSignal, reasonOf: (signal: AbortSignal) => unknown = (s) => s.reason): Promise<T> {
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
