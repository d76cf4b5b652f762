/**
 * lipsync_c answers in KServe v2 JSON (a server without the binary tensor extension) are read in a worker thread,
 * never on the event loop: an 8-frame answer of a 96² model is ~2 MB of number text, tens of ms to parse and convert
 * on a slow host, which delayed every session's media clock and, at half speed, made the JSON path fall behind its
 * frames (issue 25, row 9). Binary answers are a copy and stay on the caller's thread.
 */
import { Piscina } from 'piscina';
import { LazyPiscina } from '../lazy-piscina.ts';
import { movedWith } from '../transferable.ts';
import { untilAborted } from '../upstream/abort.ts';
import { KserveError } from './kserve-client.ts';
import type { JsonOutputOutcome, JsonOutputTask } from './kserve-json-worker.ts';

const WORKER_BOOTSTRAP = new URL('./kserve-json-worker.mjs', import.meta.url);
/** One thread: a parse takes a few ms there, and the other core stays with the sessions' clocks and renders. */
export const KSERVE_JSON_THREADS = 1;
/**
 * Answers waiting for the thread. Each session's client has at most `KSERVE_DEFAULT_MAX_IN_FLIGHT` (2) requests,
 * so this holds the answers of 16 sessions at once; past it the answer is refused as the backend being busy
 * (its frames render on the fallback) rather than queued without end.
 */
export const KSERVE_JSON_QUEUE = 32;
/** The thread is let go after this long without JSON answers. */
const IDLE_TIMEOUT_MS = 60_000;

const pool = new LazyPiscina<JsonOutputTask, JsonOutputOutcome>(
  () =>
    new Piscina<JsonOutputTask, JsonOutputOutcome>({
      filename: WORKER_BOOTSTRAP.href,
      minThreads: 0,
      maxThreads: KSERVE_JSON_THREADS,
      maxQueue: KSERVE_JSON_QUEUE,
      idleTimeout: IDLE_TIMEOUT_MS,
    }),
);

/**
 * `readOutput` of a JSON answer in the worker: the output `name` of `shape` as floats. Throws `KserveError`
 * ('protocol' for a malformed answer, 'busy' when the thread's queue is full) or the signal's reason.
 */
export async function readJsonOutputOffThread(
  body: Uint8Array,
  name: string,
  shape: number[],
  signal: AbortSignal,
): Promise<Float32Array> {
  signal.throwIfAborted();
  // The answer's bytes are ours alone (read into one buffer by the client); a view is copied so only it moves.
  const bytes = body.byteOffset === 0 && body.byteLength === body.buffer.byteLength ? body : new Uint8Array(body);
  let outcome: JsonOutputOutcome;
  try {
    // The caller stops waiting on abort, but the read is not cancelled: piscina cancels a running task by ending
    // its thread, and on a slow host a thread started afresh for every late answer would never read one. An
    // abandoned read finishes in a few ms and its result is dropped; the queue bound holds them.
    const reading = pool.get().run(movedWith({ body: bytes, name, shape }, [bytes.buffer]));
    reading.catch(() => undefined);
    outcome = await untilAborted(reading, signal);
  } catch (error) {
    if (signal.aborted) throw signal.reason ?? error;
    if (/queue is at limit/i.test((error as Error).message))
      throw new KserveError('busy', 'inference: the JSON answer reader is busy');
    throw error;
  }
  if (!outcome.ok) throw new KserveError('protocol', outcome.message);
  return outcome.output;
}

/**
 * Starts the reader's thread ahead of the first answer (a JSON connection was just made): a thread's start-up
 * (loading its modules) can take seconds on a loaded host, which must not land on the first live frames' deadline.
 * Resolves once the thread has answered; never rejects.
 */
export async function prepareKserveJsonReader(): Promise<void> {
  // Answers "lacks output": only the start-up matters.
  await pool
    .get()
    .run({ body: new TextEncoder().encode('{"outputs":[]}'), name: '', shape: [] })
    .catch(() => undefined);
}

/** Stops the thread; the next JSON answer starts a fresh one. Idempotent. */
export function closeKserveJsonReader(): Promise<void> {
  return pool.close();
}
