/**
 * Piscina render worker. Prepared renderers are cached per worker thread keyed by
 * (avatar id, manifest version, model type, content stamp); frames are written into the task's shared buffers
 * when it brings them (`frame-buffers.ts`), else go back as transferred buffers.
 */
import { threadId } from 'node:worker_threads';
import { move, transferableSymbol, valueSymbol } from 'piscina';
import type { AvatarSource, FrameRequest, I420Frame, ModelType, Renderer, SharedClipLoopData } from './types.ts';
import { createRenderer } from './renderers/index.ts';
import { decodeClipFramesInto, loopFramesDecodedInThisThread, type ClipSource } from './clip-loop.ts';
import { runNeuralStage } from '../lipsync/neural-stages.ts';
import { mouthPosesBuiltInThisThread } from './renderers/lipsync.ts';

/** A handful of avatars per worker: enough for a few concurrent sessions without unbounded memory. */
const MAX_CACHED_RENDERERS = 6;

export interface RenderTask {
  /** `neural_*`: the neural lip-sync renderer's CPU stages (`actors/lipsync/neural-stages.ts`), not a renderer. */
  /** `decode_loop`: decodes a video avatar's loop into shared memory for every worker (`shared-clip-loops.ts`). */
  op: 'prepare' | 'render' | 'decode_loop' | 'neural_prepare' | 'neural_mel' | 'neural_compose';
  cacheKey: string;
  avatar: AvatarSource;
  modelType: ModelType;
  requests: FrameRequest[];
  /** `neural_*`: the model's face size S. */
  faceSize?: number;
  /** `neural_compose`: the model's outputs [3, S, S], one per frame. */
  outputs?: Float32Array[];
  /** `render`: a reused buffer per request to render into (`frame-buffers.ts`); none where a fresh one is wanted. */
  targets?: Array<SharedArrayBuffer | undefined>;
  /** `decode_loop`: the loop's PNGs and the shared loop to decode them into. */
  loopDecode?: { clip: ClipSource; loop: SharedClipLoopData };
}

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

/** Prepared renderers, with the shared loop each renders from (if any): dropped once that loop is released. */
const cache = new Map<string, { renderer: Promise<Renderer>; loop?: SharedClipLoopData }>();

/** Forgets renderers whose video loop the pool released (its last session closed), so its memory can go. */
function dropReleasedLoops(): void {
  for (const [key, entry] of cache) if (entry.loop && Atomics.load(entry.loop.released, 0) === 1) cache.delete(key);
}

function rendererFor(task: RenderTask): Promise<Renderer> {
  const cached = cache.get(task.cacheKey);
  if (cached) {
    // Refresh LRU position.
    cache.delete(task.cacheKey);
    cache.set(task.cacheKey, cached);
    return cached.renderer;
  }
  const renderer = (async () => {
    const created = createRenderer(task.modelType);
    await created.prepare(task.avatar);
    return created;
  })();
  const entry = { renderer, loop: task.avatar.loop };
  renderer.catch(() => {
    if (cache.get(task.cacheKey) === entry) cache.delete(task.cacheKey);
  });
  cache.set(task.cacheKey, entry);
  while (cache.size > MAX_CACHED_RENDERERS) cache.delete(cache.keys().next().value as string);
  return renderer;
}

export default async function runRenderTask(task: RenderTask) {
  if (task.op.startsWith('neural_')) {
    const { frames, mels, transfer } = await runNeuralStage(task);
    const neural: RenderTaskResult = { threadId, frames, mels, loopFramesDecoded: loopFramesDecodedInThisThread(), mouthPosesBuilt: mouthPosesBuiltInThisThread() };
    return move({ [transferableSymbol]: transfer, [valueSymbol]: neural });
  }
  dropReleasedLoops();
  if (task.op === 'decode_loop') {
    const { clip, loop } = task.loopDecode!;
    await decodeClipFramesInto(clip, loop);
    const decoded: RenderTaskResult = { threadId, frames: [], loopFramesDecoded: loopFramesDecodedInThisThread(), mouthPosesBuilt: mouthPosesBuiltInThisThread() };
    return decoded;
  }
  const renderer = await rendererFor(task);
  const frames = task.op === 'render' ? task.requests.map((request, i) => renderer.render(request, task.targets?.[i])) : [];
  const result: RenderTaskResult = { threadId, frames, loopFramesDecoded: loopFramesDecodedInThisThread(), mouthPosesBuilt: mouthPosesBuiltInThisThread() };
  // A Transferable wrapper marked movable: every fresh frame buffer goes back in the transfer list, uncopied;
  // frames rendered into the task's shared buffers need nothing moved.
  return move({
    [transferableSymbol]: frames.map((frame) => frame.data.buffer).filter((buffer) => buffer instanceof ArrayBuffer),
    [valueSymbol]: result,
  });
}
