/**
 * Piscina render worker. Prepared renderers are cached per worker thread keyed by
 * (avatar id, manifest version, model type, content stamp); frames are written into the task's shared buffers
 * when it brings them (`frame-buffers.ts`), else go back as transferred buffers.
 */
import { threadId } from 'node:worker_threads';
import { move, transferableSymbol, valueSymbol } from 'piscina';
import type { AvatarSource, FrameRequest, I420Frame, ModelType, Renderer } from './types.ts';
import { createRenderer } from './renderers/index.ts';
import { runNeuralStage } from '../lipsync/neural-stages.ts';

/** A handful of avatars per worker: enough for a few concurrent sessions without unbounded memory. */
const MAX_CACHED_RENDERERS = 6;

export interface RenderTask {
  /** `neural_*`: the neural lip-sync renderer's CPU stages (`actors/lipsync/neural-stages.ts`), not a renderer. */
  op: 'prepare' | 'render' | 'neural_prepare' | 'neural_mel' | 'neural_compose';
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
}

export interface RenderTaskResult {
  threadId: number;
  frames: I420Frame[];
  /** `neural_mel`: one mel window [1, 80, 16] per request. */
  mels?: Float32Array[];
}

const cache = new Map<string, Promise<Renderer>>();

function rendererFor(task: RenderTask): Promise<Renderer> {
  let entry = cache.get(task.cacheKey);
  if (entry) {
    // Refresh LRU position.
    cache.delete(task.cacheKey);
    cache.set(task.cacheKey, entry);
    return entry;
  }
  entry = (async () => {
    const renderer = createRenderer(task.modelType);
    await renderer.prepare(task.avatar);
    return renderer;
  })();
  entry.catch(() => cache.delete(task.cacheKey));
  cache.set(task.cacheKey, entry);
  while (cache.size > MAX_CACHED_RENDERERS) cache.delete(cache.keys().next().value as string);
  return entry;
}

export default async function runRenderTask(task: RenderTask) {
  if (task.op.startsWith('neural_')) {
    const { frames, mels, transfer } = await runNeuralStage(task);
    const neural: RenderTaskResult = { threadId, frames, mels };
    return move({ [transferableSymbol]: transfer, [valueSymbol]: neural });
  }
  const renderer = await rendererFor(task);
  const frames = task.op === 'render' ? task.requests.map((request, i) => renderer.render(request, task.targets?.[i])) : [];
  const result: RenderTaskResult = { threadId, frames };
  // A Transferable wrapper marked movable: every fresh frame buffer goes back in the transfer list, uncopied;
  // frames rendered into the task's shared buffers need nothing moved.
  return move({
    [transferableSymbol]: frames.map((frame) => frame.data.buffer).filter((buffer) => buffer instanceof ArrayBuffer),
    [valueSymbol]: result,
  });
}
