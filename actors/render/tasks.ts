/**
 * What a render pool worker is asked to do, one variant per operation (the worker's handler table,
 * `actors/render-backends/worker.ts`, has one handler per `op`), and what it answers. Declared here, beside the
 * pool that sends them, with render types only: the neural lip-sync stages (`actors/lipsync/neural-stages.ts`)
 * run in the same workers without `render/` importing `lipsync/`.
 */
import type { AvatarSource, FrameRequest, I420Frame, ModelType, SharedClipLoopData } from './types.ts';
import type { ClipSource } from './clip-loop.ts';

/** Every task names the prepared thing it works with: a renderer or a neural face, cached per worker by `cacheKey`. */
interface TaskOf<Op extends string> {
  op: Op;
  cacheKey: string;
  avatar: AvatarSource;
  modelType: ModelType;
  requests: FrameRequest[];
}

/** Prepares a renderer for the avatar in one worker (before the session is ready). */
export type PrepareTask = TaskOf<'prepare'>;

/** Renders `requests`, each into its reused buffer when `targets` brings one (`frame-buffers.ts`). */
export interface RenderFramesTask extends TaskOf<'render'> {
  targets?: Array<SharedArrayBuffer | undefined>;
}

/** Decodes a video avatar's loop PNGs into shared memory for every worker (`shared-clip-loops.ts`). */
export interface DecodeLoopTask extends TaskOf<'decode_loop'> {
  loopDecode: { clip: ClipSource; loop: SharedClipLoopData };
}

/** The neural lip-sync renderer's CPU stages (`actors/lipsync/neural-stages.ts`), at the model's face size S. */
export interface NeuralPrepareTask extends TaskOf<'neural_prepare'> {
  faceSize: number;
}
/** One mel window per request's audio. */
export interface NeuralMelTask extends TaskOf<'neural_mel'> {
  faceSize: number;
}
/** The model's outputs [3, S, S], one per request, pasted back onto the avatar's frames. */
export interface NeuralComposeTask extends TaskOf<'neural_compose'> {
  faceSize: number;
  outputs: Float32Array[];
}
export type NeuralTask = NeuralPrepareTask | NeuralMelTask | NeuralComposeTask;

export type RenderTask = PrepareTask | RenderFramesTask | DecodeLoopTask | NeuralTask;

export interface RenderTaskResult {
  threadId: number;
  frames: I420Frame[];
  /** `neural_mel`: one mel window [1, 80, 16] per request. */
  mels?: Float32Array[];
  /** Loop frames this thread has decoded from PNG so far (a worker rendering a shared loop decodes none). */
  loopFramesDecoded: number;
  /** Mouth poses the lipsync renderer warped in this thread so far (a video avatar's: all at prepare). */
  mouthPosesBuilt: number;
}

/** What one handler gives back: its frames (and mel windows), and the buffers to move to the caller uncopied. */
export interface TaskOutcome {
  frames: I420Frame[];
  mels?: Float32Array[];
  transfer: ArrayBuffer[];
}
