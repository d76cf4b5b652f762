import { Piscina } from 'piscina';
import type { MouthDetection, RgbaImage } from './types.ts';

export type { MouthDetection, RgbaImage, DetectionFailureReason } from './types.ts';
export { MIN_FACE_SCORE, MIN_CANDIDATE_SCORE, DOMINANCE_AREA_RATIO, DETECTOR_NAME } from './landmarks.ts';

const WORKER_BOOTSTRAP = new URL('./worker.mjs', import.meta.url);
/**
 * The loaded models (~6 MB of weights plus the wasm heap) stay in the worker between uploads; custom avatars
 * are created rarely, so the thread is let go after this long without work.
 */
const IDLE_TIMEOUT_MS = 5 * 60_000;

let pool: Piscina<RgbaImage, MouthDetection> | null = null;

function detectorPool(): Piscina<RgbaImage, MouthDetection> {
  pool ??= new Piscina<RgbaImage, MouthDetection>({
    filename: WORKER_BOOTSTRAP.href,
    minThreads: 0,
    // One detection at a time is plenty for portrait uploads and leaves the other core to sessions.
    maxThreads: 1,
    idleTimeout: IDLE_TIMEOUT_MS,
    // Detection is async (wasm backend init, model loading); Atomics.wait between tasks would stall it.
    atomics: 'disabled',
  });
  return pool;
}

/**
 * Finds the portrait's face and returns its mouth/eye geometry (`metadata.animation`), or why not.
 * Runs in a worker thread; aborting `signal` cancels the task (the worker is restarted, a cold start) and
 * rejects with the signal's reason. Every other failure resolves as `{ok: false, reason: 'error'}`.
 */
export async function detectMouth(image: RgbaImage, opts: { signal?: AbortSignal } = {}): Promise<MouthDetection> {
  opts.signal?.throwIfAborted();
  // Always a private copy: transferring the caller's own buffer would detach it under their feet, and the
  // copy (4 bytes/pixel, ~1 ms for 1 Mpx) is nothing next to the detection itself.
  const rgba = new Uint8Array(image.rgba);
  const task = { rgba, width: image.width, height: image.height };
  try {
    return await detectorPool().run(Piscina.move(new TransferableImage(task) as never) as never, opts.signal ? { signal: opts.signal } : {});
  } catch (error) {
    if (opts.signal?.aborted) throw opts.signal.reason ?? error;
    return { ok: false, reason: 'error', detail: (error as Error).message };
  }
}

/** Stops the detector thread; the next `detectMouth` starts a fresh one. Idempotent. */
export async function closeFaceDetector(): Promise<void> {
  const current = pool;
  pool = null;
  await current?.destroy();
}

/** Lets piscina transfer the pixel buffer to the worker instead of cloning it. */
class TransferableImage {
  constructor(private readonly value: RgbaImage) {}
  get [Piscina.transferableSymbol]() {
    return [this.value.rgba.buffer];
  }
  get [Piscina.valueSymbol]() {
    return this.value;
  }
}
