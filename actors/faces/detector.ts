import { Piscina } from 'piscina';
import { LazyPiscina } from '../lazy-piscina.ts';
import { movedWith } from '../transferable.ts';
import type { MouthDetection, RgbaImage } from './types.ts';

export type { MouthDetection, RgbaImage, DetectionFailureReason } from './types.ts';
export { MIN_FACE_SCORE, MIN_CANDIDATE_SCORE, DOMINANCE_AREA_RATIO, DETECTOR_NAME } from './landmarks.ts';

const WORKER_BOOTSTRAP = new URL('./worker.mjs', import.meta.url);
/**
 * The loaded models (~6 MB of weights plus the wasm heap) stay in the worker between uploads; custom avatars
 * are created rarely, so the thread is let go after this long without work.
 */
const IDLE_TIMEOUT_MS = 5 * 60_000;

const pool = new LazyPiscina<RgbaImage, MouthDetection>(() => {
  const current = new Piscina<RgbaImage, MouthDetection>({
    filename: WORKER_BOOTSTRAP.href,
    minThreads: 0,
    // One detection at a time is plenty for portrait uploads and leaves the other core to sessions.
    maxThreads: 1,
    idleTimeout: IDLE_TIMEOUT_MS,
    // Detection is async (wasm backend init, model loading); Atomics.wait between tasks would stall it.
    atomics: 'disabled',
  });
  // A worker that dies mid-detection fails that detection (`reason: 'error'` below) and the next one starts a
  // fresh thread (one failing between tasks is heard by `LazyPiscina`'s 'error' listener). A worker that dies
  // before it is ready (or is killed by an aborted detection) leaves the queued detections waiting for a thread
  // piscina will only start on the next submission: with no thread left, they are stranded.
  current.on('workerDestroy', () =>
    setImmediate(() => {
      if (current.threads.length > 0) return;
      for (const waiting of waitingDetections) waiting.abort(STRANDED);
    }),
  );
  return current;
});

/** Abort reason of a detection no thread will run; it is submitted again once (which starts a thread). */
const STRANDED = new Error('the face detector worker exited before the detection ran');
const waitingDetections = new Set<AbortController>();

/** The detector's worker threads (none while idle past IDLE_TIMEOUT_MS); for tests and diagnostics. */
export function faceDetectorWorkers(): readonly import('node:worker_threads').Worker[] {
  return pool.threads;
}

/**
 * Finds the portrait's face and returns its mouth/eye geometry (`metadata.animation`), or why not.
 * Runs in a worker thread; aborting `signal` cancels the task (the worker is restarted, a cold start) and
 * rejects with the signal's reason. Every other failure resolves as `{ok: false, reason: 'error'}`.
 */
export async function detectMouth(image: RgbaImage, opts: { signal?: AbortSignal } = {}): Promise<MouthDetection> {
  for (let attempt = 1; ; attempt++) {
    opts.signal?.throwIfAborted();
    // Always a private copy: transferring the caller's own buffer would detach it under their feet, and the
    // copy (4 bytes/pixel, ~1 ms for 1 Mpx) is nothing next to the detection itself.
    const rgba = new Uint8Array(image.rgba);
    const task: RgbaImage = {
      rgba,
      width: image.width,
      height: image.height,
      ...(image.near ? { near: image.near } : {}),
    };
    const stranded = new AbortController();
    waitingDetections.add(stranded);
    try {
      const signal = opts.signal ? AbortSignal.any([opts.signal, stranded.signal]) : stranded.signal;
      return await pool.get().run(movedWith(task, [rgba.buffer]), { signal });
    } catch (error) {
      if (opts.signal?.aborted) throw opts.signal.reason ?? error;
      if (stranded.signal.aborted && attempt === 1) continue;
      return {
        ok: false,
        reason: 'error',
        detail: stranded.signal.aborted ? STRANDED.message : (error as Error).message,
      };
    } finally {
      waitingDetections.delete(stranded);
    }
  }
}

/** Stops the detector thread; the next `detectMouth` starts a fresh one. Idempotent. */
export function closeFaceDetector(): Promise<void> {
  return pool.close();
}
