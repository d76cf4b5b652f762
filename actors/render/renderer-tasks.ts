/**
 * The render pool worker's renderer side: prepared renderers cached per worker thread, keyed by (avatar id,
 * manifest version, model type, content stamp), for `prepare` and `render` tasks, and a video avatar's loop
 * decoded into shared memory (`decode_loop`). Frames are written into the task's shared buffers when it brings
 * them (`frame-buffers.ts`), else go back as transferred buffers.
 */
import type { Renderer, SharedClipLoopData } from './types.ts';
import { createRenderer } from './renderers/index.ts';
import { decodeClipFramesInto } from './clip-loop.ts';
import type { DecodeLoopTask, PrepareTask, RenderFramesTask, TaskOutcome } from './tasks.ts';

/** A handful of avatars per worker: enough for a few concurrent sessions without unbounded memory. */
const MAX_CACHED_RENDERERS = 6;

/** Prepared renderers, with the shared loop each renders from (if any): dropped once that loop is released. */
const cache = new Map<string, { renderer: Promise<Renderer>; loop?: SharedClipLoopData }>();

/** Forgets renderers whose video loop the pool released (its last session closed), so its memory can go. */
function dropReleasedLoops(): void {
  for (const [key, entry] of cache) if (entry.loop && Atomics.load(entry.loop.released, 0) === 1) cache.delete(key);
}

function rendererFor(task: PrepareTask | RenderFramesTask): Promise<Renderer> {
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

/** `prepare`: the avatar's renderer, prepared in this thread (and kept for its frames). */
export async function prepareRendererTask(task: PrepareTask): Promise<TaskOutcome> {
  dropReleasedLoops();
  await rendererFor(task);
  return { frames: [], transfer: [] };
}

/** `render`: the requested frames; every fresh frame buffer moves back uncopied, frames in shared buffers need nothing moved. */
export async function renderFramesTask(task: RenderFramesTask): Promise<TaskOutcome> {
  dropReleasedLoops();
  const renderer = await rendererFor(task);
  const frames = task.requests.map((request, i) => renderer.render(request, task.targets?.[i]));
  return {
    frames,
    transfer: frames.map((frame) => frame.data.buffer).filter((buffer) => buffer instanceof ArrayBuffer),
  };
}

/** `decode_loop`: a video avatar's loop decoded into the shared loop every worker renders from. */
export async function decodeLoopTask(task: DecodeLoopTask): Promise<TaskOutcome> {
  dropReleasedLoops();
  await decodeClipFramesInto(task.loopDecode.clip, task.loopDecode.loop);
  return { frames: [], transfer: [] };
}
