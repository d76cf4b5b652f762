/**
 * The session-side renderer of the neural lip-sync models (`lipsync_b` local ONNX, `lipsync_c` KServe): a
 * `FrameRenderer` for the media clock that turns each frame's audio (`FrameRequest.audio`, asked for through
 * `audioWindow`) into Wav2Lip's mel window, sends it with the avatar's prepared face tensor to an inference
 * backend, and pastes the generated lower face back into the avatar frame (`face-crop.ts`).
 *
 * - Frames without speech in their window are the avatar frame itself, no inference. On a video avatar every
 *   frame is the loop's frame at its index (`faceAt`): idle plays the loop, and speech crops the face from that
 *   frame's tracked box and pastes the generated face back into it (Wav2Lip's video path).
 * - The clock asks for frames `RENDER_AHEAD` ahead in bursts (`renderAhead`), so a burst's frames reach the
 *   backend together and run as one batch (the inference pool also batches across sessions).
 * - A flush (barge-in) drops the clock's audio and rendered-ahead frames; answers still in flight are discarded
 *   by the clock, and the frames asked for next carry no audio: the face is back at rest at once.
 * - With a `fallback` (lipsync_c), a backend failure does not fail the frame: the renderer reports it once
 *   (`backendError`), renders speech with the fallback renderer (the CPU `lipsync` one) for the rest of the
 *   turn, and tries the backend again (`recover`) once speech has stopped, at most every `RECOVER_INTERVAL_MS`.
 *   Without one (lipsync_b), the failure goes to the clock like any renderer's (`renderFailed`).
 * - A backend that works but cannot take a frame now (`BackendOverloadedError`: its bounded backlog is full, or a
 *   loaded host read its answer too late) costs that frame only: it renders on the fallback, the turn stays on the
 *   backend, and the next frames try the backend again (`backendOverloaded` once per streak, no `backendError`).
 */
import { EventEmitter, setMaxListeners } from 'node:events';
import type { FrameRenderer, RenderBackendWatcher } from '../media/playout.ts';
import type { FrameRequest, I420Frame } from '../render/types.ts';
import { baseFrame, faceAt, type PreparedFace } from './face-crop.ts';
import { MEL_STREAM_LEAD_SAMPLES, MEL_STREAM_WINDOW_SAMPLES, WAV2LIP_MEL } from './mel.ts';
import { inlineStages, type NeuralStages } from './neural-stages.ts';

/**
 * Frames asked for ahead of the clock: 320 ms at 25 fps. Covers a batch's inference plus messaging on a loaded
 * CPU, and a KServe round trip; an interrupt still shows at once because a flush drops them all.
 */
export const NEURAL_RENDER_AHEAD_FRAMES = 8;
/** Frames asked for together: a batch of 4 per session and burst, refilled when half the lead has played. */
export const NEURAL_RENDER_BURST = 4;
/** Frames of one renderer in flight at once: the clock's render-ahead (≤ 25) or an offline job's 3 batches of 16. */
const MAX_FRAMES_IN_FLIGHT = 64;
/** Listeners on a render call's signal beyond one per frame (the fallback's and the backend client's own). */
const MAX_LISTENERS_SLACK = 8;
/** After a backend failure, the backend is tried again at most this often (and only between turns). */
export const RECOVER_INTERVAL_MS = 2_000;

/** One model run per frame: mel [1, 80, 16] and face [6, S, S] in, face [3, S, S] out. */
export interface LipsyncInference {
  readonly size: number;
  infer(mel: Float32Array, face: Float32Array, signal: AbortSignal): Promise<Float32Array>;
  /** Checks the backend is usable again after a failure (remote backends); resolves true when it is. */
  recover?(signal: AbortSignal): Promise<boolean>;
  close(): void;
}

/**
 * The backend is up but cannot serve this frame in time (overload, not failure): the frame renders on the fallback
 * and the turn stays on the backend. Every other backend error means the backend is failing.
 */
export class BackendOverloadedError extends Error {
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = 'BackendOverloadedError';
  }
}

/** The renderer that takes over speech frames while the backend is down. */
export type FallbackRenderer = FrameRenderer & { close(): void | Promise<void> };

export interface NeuralRendererOptions {
  face: PreparedFace;
  fps: number;
  backend: LipsyncInference;
  /** Opens the fallback on first need (or ahead: its promise is kept). */
  fallback?: () => Promise<FallbackRenderer>;
  /** Where the mel windows and the paste-back run (the service: the render pool's workers); default this thread. */
  stages?: NeuralStages;
}

export interface NeuralRendererEvents {
  /** The backend failed; speech renders on the fallback until it recovers. */
  backendError: [error: unknown];
  /** The backend answered again after `backendError`. */
  backendRecovered: [];
  /** The backend could not take some frames (`BackendOverloadedError`); they render on the fallback. Once per streak. */
  backendOverloaded: [error: BackendOverloadedError];
}

export { streamWindowOf } from './neural-stages.ts';

export class NeuralLipsyncRenderer extends EventEmitter<NeuralRendererEvents> implements FrameRenderer {
  readonly width: number;
  readonly height: number;
  readonly fps: number;
  readonly audioWindow = {
    leadMs: (MEL_STREAM_LEAD_SAMPLES * 1000) / WAV2LIP_MEL.sampleRate,
    lagMs: ((MEL_STREAM_WINDOW_SAMPLES - MEL_STREAM_LEAD_SAMPLES) * 1000) / WAV2LIP_MEL.sampleRate,
  };
  readonly renderAhead = { frames: NEURAL_RENDER_AHEAD_FRAMES, burst: NEURAL_RENDER_BURST };

  /** The backend's health as the session's media watches it (`FrameRenderer.watchBackend`), from this renderer's events. */
  watchBackend(watcher: RenderBackendWatcher): () => void {
    const failed = (error: unknown): void => watcher.failed(error);
    const recovered = (): void => watcher.recovered();
    const overloaded = (error: unknown): void => watcher.overloaded(error);
    this.on('backendError', failed);
    this.on('backendRecovered', recovered);
    this.on('backendOverloaded', overloaded);
    return () => {
      this.off('backendError', failed);
      this.off('backendRecovered', recovered);
      this.off('backendOverloaded', overloaded);
    };
  }

  private readonly face: PreparedFace;
  private readonly backend: LipsyncInference;
  private readonly stages: NeuralStages;
  private readonly openFallback?: () => Promise<FallbackRenderer>;
  private fallback: Promise<FallbackRenderer> | undefined;
  private degraded = false;
  /** Since the last frame the backend answered, some frame went to the fallback for overload (one event per streak). */
  private overloaded = false;
  private recovering = false;
  private lastRecoverAt = 0;
  private readonly closing = new AbortController();
  private closed = false;
  /**
   * Frames rendered through the backend, through the fallback (all of them), and of those the ones the backend was
   * too loaded to take (tests, diagnostics).
   */
  readonly counts = { neural: 0, fallback: 0, overloaded: 0, idle: 0 };

  constructor(options: NeuralRendererOptions) {
    super();
    this.face = options.face;
    this.width = options.face.width;
    this.height = options.face.height;
    this.fps = options.fps;
    this.backend = options.backend;
    this.stages = options.stages ?? inlineStages(options.face);
    this.openFallback = options.fallback;
    // Without a caller's signal every frame in flight listens on this one: at most an offline job's 48 frames.
    setMaxListeners(MAX_FRAMES_IN_FLIGHT, this.closing.signal);
  }

  /** True while speech renders on the fallback. */
  get isDegraded(): boolean {
    return this.degraded;
  }

  /** Opens the fallback now, so the first failure does not wait for it (best effort). */
  prepareFallback(): void {
    if (!this.openFallback || this.fallback || this.closed) return;
    this.fallback = this.openFallback();
    // A failed open is retried at the next need.
    this.fallback.catch(() => (this.fallback = undefined));
  }

  render(requests: FrameRequest[], signal?: AbortSignal): Promise<I420Frame[]> {
    if (this.closed) return Promise.reject(new Error('neural renderer is closed'));
    // One combined signal per call (not per frame): an offline job asks for 16 frames at a time, and each frame's
    // backend call listens on it once, so the listener count is bounded by the request count.
    const bounded = signal ? AbortSignal.any([signal, this.closing.signal]) : this.closing.signal;
    if (signal) setMaxListeners(requests.length + MAX_LISTENERS_SLACK, bounded);
    return this.renderBatch(requests, bounded);
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.closing.abort();
    this.backend.close();
    const fallback = this.fallback;
    this.fallback = undefined;
    void fallback?.then((renderer) => renderer.close()).catch(() => undefined);
    this.removeAllListeners();
  }

  /**
   * Frames without audio are the photo; the others go through the stages together: one mel task, one backend call
   * per frame (the backend batches them), one paste-back task for every frame the backend answered. A frame the
   * backend failed renders on the fallback (lipsync_c) or fails the call (lipsync_b).
   */
  private async renderBatch(requests: FrameRequest[], bounded: AbortSignal): Promise<I420Frame[]> {
    const frames: Array<I420Frame | Promise<I420Frame>> = new Array(requests.length);
    const speech: number[] = [];
    requests.forEach((request, i) => {
      if (request.audio) return void speech.push(i);
      this.counts.idle++;
      frames[i] = baseFrame(faceAt(this.face, request.frameIdx));
    });
    if (this.degraded && speech.length < requests.length) this.tryRecover();
    if (this.degraded) {
      for (const i of speech) frames[i] = quiet(this.renderFallback(requests[i], bounded));
      return Promise.all(frames);
    }
    if (speech.length === 0) return frames as I420Frame[];
    const mels = await this.stages.mel(
      speech.map((i) => requests[i].audio!),
      bounded,
    );
    const answers = await Promise.all(
      mels.map((mel, k) =>
        this.backend.infer(mel, faceAt(this.face, requests[speech[k]].frameIdx).faceInput, bounded).then(
          (output) => ({ output }),
          (error: unknown) => ({ error }),
        ),
      ),
    );
    const answered: number[] = [];
    const outputs: Float32Array[] = [];
    answers.forEach((answer, k) => {
      const i = speech[k];
      if ('output' in answer) {
        answered.push(i);
        outputs.push(answer.output);
        return;
      }
      const { error } = answer;
      if (!this.openFallback || this.closed || bounded.aborted) throw error;
      if (error instanceof BackendOverloadedError) {
        this.counts.overloaded++;
        if (!this.overloaded) {
          this.overloaded = true;
          this.emit('backendOverloaded', error);
        }
      } else if (!this.degraded) {
        this.degraded = true;
        this.lastRecoverAt = performance.now();
        this.emit('backendError', error);
      }
      frames[i] = quiet(this.renderFallback(requests[i], bounded));
    });
    if (answered.length > 0) this.overloaded = false;
    const composed = await this.stages.compose(
      outputs,
      answered.map((i) => requests[i].frameIdx),
      bounded,
    );
    answered.forEach((i, k) => (frames[i] = composed[k]));
    this.counts.neural += answered.length;
    return Promise.all(frames);
  }

  private async renderFallback(request: FrameRequest, signal?: AbortSignal): Promise<I420Frame> {
    this.prepareFallback();
    const fallback = await this.fallback!;
    const { audio: _audio, ...plain } = request;
    const [frame] = await fallback.render([plain], signal);
    this.counts.fallback++;
    return frame;
  }

  /** Between turns: asks the backend whether it is back, at most every `RECOVER_INTERVAL_MS`. */
  private tryRecover(): void {
    if (this.recovering || this.closed || performance.now() - this.lastRecoverAt < RECOVER_INTERVAL_MS) return;
    this.recovering = true;
    this.lastRecoverAt = performance.now();
    const attempt = this.backend.recover ? this.backend.recover(this.closing.signal) : Promise.resolve(true);
    attempt
      .then((ok) => {
        if (!ok || this.closed || !this.degraded) return;
        this.degraded = false;
        this.emit('backendRecovered');
      })
      .catch(() => undefined)
      .finally(() => (this.recovering = false));
  }
}

/** Marks a frame promise as handled (a later throw in the same call leaves it unawaited); awaiting it still rejects. */
function quiet<T>(promise: Promise<T>): Promise<T> {
  promise.catch(() => undefined);
  return promise;
}
