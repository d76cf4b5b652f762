/**
 * The single worker thread that runs the built-in engines. One thread is enough: the engines are
 * serial by nature (eSpeak keeps one current voice), each thread would hold its own ~100 MB of
 * compiled WASM, and the machine has 2 cores shared with rendering.
 */
import { Piscina } from 'piscina';
import type { EngineAudio } from './engine.ts';
import type { SentenceTask } from './synthesize-sentence.ts';
import type { WorkerTask } from './worker.ts';

const WORKER_BOOTSTRAP = new URL('./worker.mjs', import.meta.url);

let pool: Piscina<WorkerTask, EngineAudio | null> | undefined;

function enginePool(): Piscina<WorkerTask, EngineAudio | null> {
  pool ??= new Piscina<WorkerTask, EngineAudio | null>({
    filename: WORKER_BOOTSTRAP.href,
    minThreads: 1,
    maxThreads: 1,
    // Keep the thread (and its compiled engines) for the life of the process.
    idleTimeout: Number.POSITIVE_INFINITY,
  });
  return pool;
}

export async function synthesizeSentenceInWorker(task: SentenceTask): Promise<EngineAudio> {
  // No AbortSignal here on purpose: piscina aborts a running task by killing the thread, which
  // would throw away the compiled engines. Callers stop waiting instead; the sentence finishes alone.
  const result = await enginePool().run({ kind: 'sentence', ...task });
  if (!result) throw new Error('builtin TTS worker returned no audio');
  return result;
}

/** Loads both engines in the worker; call at start-up so the first request does not wait for it. */
export async function warmUpBuiltinEngines(): Promise<void> {
  await enginePool().run({ kind: 'warm-up' });
}

/** Stops the worker thread (graceful shutdown, tests). Safe to call more than once. */
export async function closeBuiltinEngines(): Promise<void> {
  const closing = pool;
  pool = undefined;
  if (closing) await closing.destroy();
}
