/**
 * Render kits are built in a thread of their own, never on the event loop nor in the render pool's workers: a kit
 * takes a photo's every mouth pose (~1–2 s of CPU) or a clip's loop decoded and re-encoded (a few seconds), and the
 * render workers' frames are due every 40 ms. Builds are rare (once per avatar version and model; the service keeps
 * the result), so one thread, made on first use and let go when idle.
 */
import { Piscina } from 'piscina';
import { Overloaded } from '../admission.ts';
import { LazyPiscina } from '../lazy-piscina.ts';
import type { RenderKitTask } from './render-kit-worker.ts';

const WORKER_BOOTSTRAP = new URL('./render-kit-worker.mjs', import.meta.url);
/** One build at a time: the other core stays with the live sessions. */
const RENDER_KIT_THREADS = 1;
/** Builds waiting for the thread: one per avatar being opened in a browser at once; past it a 503 with Retry-After. */
export const RENDER_KIT_QUEUE = 8;
/** Longest a build may take, waiting included: a 150-frame clip builds in ~10 s on a loaded core. */
export const RENDER_KIT_TIMEOUT_MS = 180_000;
/** The thread is let go after this long without builds. */
const IDLE_TIMEOUT_MS = 60_000;
/** Retry-After of a busy builder: about one clip's build. */
const RENDER_KIT_BUSY_RETRY_AFTER_S = 10;

const pool = new LazyPiscina<RenderKitTask, Uint8Array>(
  () =>
    new Piscina<RenderKitTask, Uint8Array>({
      filename: WORKER_BOOTSTRAP.href,
      minThreads: 0,
      maxThreads: RENDER_KIT_THREADS,
      maxQueue: RENDER_KIT_QUEUE,
      idleTimeout: IDLE_TIMEOUT_MS,
      atomics: 'disabled',
    }),
);

/** The avatar's kit for `model`, built in the kit thread. Throws `Overloaded` when the builder is busy or too slow. */
export async function buildRenderKitOffThread(task: RenderKitTask, signal?: AbortSignal): Promise<Uint8Array> {
  signal?.throwIfAborted();
  const deadline = AbortSignal.timeout(RENDER_KIT_TIMEOUT_MS);
  try {
    return await pool.get().run(task, { signal: signal ? AbortSignal.any([signal, deadline]) : deadline });
  } catch (error) {
    if (signal?.aborted) throw signal.reason ?? error;
    if (deadline.aborted)
      throw new Overloaded(
        `building the render kit took longer than ${RENDER_KIT_TIMEOUT_MS / 1000} s`,
        RENDER_KIT_BUSY_RETRY_AFTER_S,
      );
    if (/queue is at limit/i.test((error as Error).message))
      throw new Overloaded('the render kit builder is busy', RENDER_KIT_BUSY_RETRY_AFTER_S);
    throw error;
  }
}

/** Stops the kit thread (service shutdown); idempotent. */
export function closeRenderKitPool(): Promise<void> {
  return pool.close();
}
