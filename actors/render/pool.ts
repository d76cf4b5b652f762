/**
 * Render pool: piscina worker threads running the renderers. `open()` binds an avatar + model type
 * and returns a handle; `render()` sends frame requests to the workers (large batches are split
 * across threads) and gets I420 frames back: for a live session, frames of no shared idle look in reused
 * shared buffers the caller releases (`frame-buffers.ts`); others as transferred buffers.
 */
import { createHash } from 'node:crypto';
import { stat } from 'node:fs/promises';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import { Piscina } from 'piscina';
import type { AvatarSource, FrameRequest, I420Frame, ModelType, Renderer } from './types.ts';
import type { RenderTask, RenderTaskResult } from './tasks.ts';
import { ProsodyTracker } from './prosody.ts';
import { BUNDLE_FRAME_PATH, readShared } from './image.ts';
import { SharedClipLoops, type ClipLoopLease } from './shared-clip-loops.ts';
import { abortReasonAsError, untilAborted } from '../upstream/abort.ts';
import { SharedIdleFrames, idleLookKey } from './idle-frames.ts';
import { PoolLoad, type PoolLoadSnapshot } from '../pool-load.ts';
import { FrameBufferPool } from './frame-buffers.ts';
import { i420Size } from './i420.ts';

export interface RenderHandle {
  readonly width: number;
  readonly height: number;
  readonly fps: number;
  render(requests: FrameRequest[], signal?: AbortSignal): Promise<I420Frame[]>;
  close(): void;
}

export interface RenderPoolOptions {
  threads?: number;
  /** Where a worker failure outside any task is reported (nothing else waits for it). */
  logger?: { error(obj: object, msg?: string): void };
}

/** Below this many frames per thread, splitting a batch costs more in messaging than it gains. */
const MIN_FRAMES_PER_SPLIT = 4;
/**
 * Frames of one session a render task carries at most when several wait at once (`PoolRenderHandle.renderQueued`).
 * A live session asks for one frame at a time; while its previous task is still with the worker, the frames asked
 * for meanwhile go together in the next task instead of one round trip each (on a starved core the round trip, not
 * the render, is what a frame cost). 8 frames are 320 ms of video at 25 fps: a batch never holds back a frame due
 * much later than the first, and a failed task takes at most that much video with it.
 */
export const MAX_FRAMES_PER_TASK = 8;

const renderAborted = (signal: AbortSignal): Error => abortReasonAsError(signal, 'render aborted');

/** Identifies the avatar's content: manifest JSON plus the bundle frame's size and mtime. */
export async function contentStamp(avatar: AvatarSource): Promise<string> {
  const hash = createHash('sha1').update(JSON.stringify(avatar.manifest));
  try {
    const info = await stat(join(avatar.dir, BUNDLE_FRAME_PATH));
    hash.update(`${info.size}:${info.mtimeMs}`);
  } catch {
    // Drawn avatars may render without a bundle frame; the manifest alone identifies them.
  }
  return hash.digest('hex').slice(0, 16);
}

export class RenderPool {
  private readonly piscina: Piscina;
  private readonly threads: number;
  /** Idle frames rendered once per avatar and handed to every session showing it (`idle-frames.ts`). */
  readonly idleFrames = new SharedIdleFrames();
  /** Buffers live frames are rendered into and given back to once nothing reads them (`frame-buffers.ts`). */
  readonly frameBuffers = new FrameBufferPool();
  /** Video avatars' loops, decoded once per avatar into shared memory for every worker and session (`shared-clip-loops.ts`). */
  readonly clipLoops: SharedClipLoops;
  private readonly load: PoolLoad;
  private closed = false;

  constructor(options: RenderPoolOptions = {}) {
    this.threads = Math.max(1, options.threads ?? availableParallelism() - 1);
    this.load = new PoolLoad(this.threads);
    this.clipLoops = new SharedClipLoops(async (clip, loop, avatar) => {
      await this.run({
        op: 'decode_loop',
        cacheKey: '',
        avatar,
        modelType: avatar.manifest.model_type,
        requests: [],
        loopDecode: { clip, loop },
      });
    });
    this.piscina = new Piscina({
      filename: new URL('../render-backends/worker-bootstrap.mjs', import.meta.url).href,
      minThreads: this.threads,
      maxThreads: this.threads,
      // Renderers are CPU-bound; more than a couple of queued tasks per thread only adds latency.
      concurrentTasksPerWorker: 1,
    });
    // A worker that dies mid-task rejects that task and piscina starts a replacement. One that fails between
    // tasks is re-emitted here as 'error', and an 'error' nobody listens to would crash the whole service.
    this.piscina.on('error', (error: unknown) =>
      options.logger?.error({ err: error }, 'render worker failed between tasks'),
    );
  }

  /** Worker threads currently alive (for tests and diagnostics). */
  get workers(): readonly import('node:worker_threads').Worker[] {
    return this.piscina.threads;
  }

  /**
   * `reuseFrameBuffers`: frames of no shared idle look come back leased from `frameBuffers`, for a caller that releases every
   * frame it is done with (the live media clock). Off for anyone else (offline jobs, fallbacks, tests): shared
   * memory is invisible to V8's heap accounting, so frames nobody releases at an offline job's pace would pile
   * up until some unrelated collection.
   */
  async open(
    source: AvatarSource,
    modelType: ModelType,
    signal?: AbortSignal,
    options: { reuseFrameBuffers?: boolean } = {},
  ): Promise<RenderHandle> {
    if (this.closed) throw new Error('render pool is closed');
    // Tasks carry a video avatar's decoded shared loop, never its PNGs (`clip`): no worker decodes them again.
    const { clip: _pngs, ...rest } = source;
    const framePng = source.framePng ?? (await readShared(join(source.dir, BUNDLE_FRAME_PATH)));
    const contentKey = [source.id, source.manifest.version, await contentStamp(source)].join('|');
    // The loop is decoded (once per avatar) before the session's renderer is ready, so its first frames wait for nothing.
    const lease = source.manifest.metadata.clip ? await this.clipLoops.acquire(contentKey, source, signal) : undefined;
    const avatar: AvatarSource = { ...rest, framePng, ...(lease?.loop ? { loop: lease.loop } : {}) };
    const cacheKey = [contentKey, modelType].join('|');
    const prepare: RenderTask = { op: 'prepare', cacheKey, avatar, modelType, requests: [] };
    try {
      // Fails fast on unknown model types or unreadable bundles, and warms one worker.
      await this.run(prepare, signal);
    } catch (error) {
      lease?.release();
      throw error;
    }
    return new PoolRenderHandle(this, avatar, modelType, cacheKey, options.reuseFrameBuffers ?? false, lease);
  }

  /** @internal used by handles */
  async run(task: RenderTask, signal?: AbortSignal, transferList?: ArrayBuffer[]): Promise<RenderTaskResult> {
    if (this.closed) throw new Error('render pool is closed');
    if (signal?.aborted) throw renderAborted(signal);
    // The signal is not handed to piscina: aborting a running task there kills the worker and its
    // prepared avatars. Instead the caller stops waiting and the late result is dropped.
    const done = this.load.begin();
    const result = (
      transferList?.length ? this.piscina.run(task, { transferList }) : this.piscina.run(task)
    ) as Promise<RenderTaskResult>;
    result.then(done, done);
    if (!signal) return result;
    return untilAborted(result, signal, renderAborted);
  }

  get threadCount(): number {
    return this.threads;
  }

  /** Busy threads, queued tasks and busy time (`avatar_pool_*` metrics); tasks past the thread count wait in piscina's queue. */
  get loadSnapshot(): PoolLoadSnapshot {
    return this.load.snapshot(0);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.piscina.destroy();
  }
}

/** A session's frame waiting to go to a worker with the next ones (`PoolRenderHandle.renderQueued`). */
interface QueuedFrame {
  request: FrameRequest;
  target: SharedArrayBuffer | undefined;
  resolve(frame: I420Frame): void;
  reject(error: unknown): void;
}

class PoolRenderHandle implements RenderHandle {
  readonly width: number;
  readonly height: number;
  readonly fps: number;
  private readonly prosody: ProsodyTracker;
  private readonly frameBytes: number;
  /** Single frames waiting for this session's tasks in flight to finish (`renderQueued`). */
  private readonly queued: QueuedFrame[] = [];
  private tasksInFlight = 0;
  private closed = false;

  constructor(
    private readonly pool: RenderPool,
    private readonly avatar: AvatarSource,
    private readonly modelType: ModelType,
    private readonly cacheKey: string,
    private readonly reuseFrameBuffers: boolean,
    /** The video avatar's shared loop this session holds, given back at close. */
    private readonly loopLease?: ClipLoopLease,
  ) {
    this.width = avatar.manifest.width;
    this.height = avatar.manifest.height;
    this.fps = avatar.manifest.fps;
    this.prosody = new ProsodyTracker(this.fps > 0 ? this.fps : 25);
    this.frameBytes = i420Size(this.width, this.height);
  }

  async render(requests: FrameRequest[], signal?: AbortSignal): Promise<I420Frame[]> {
    if (this.closed) throw new Error('render handle is closed');
    if (requests.length === 0) return [];
    if (signal?.aborted) throw renderAborted(signal);
    const annotated = this.prosody.annotate(requests);
    // Idle frames whose look was rendered before (by any session of this avatar) need no worker at all, and
    // one look is rendered once per batch.
    const frames: Array<I420Frame | undefined> = new Array(annotated.length);
    const looks = annotated.map((request) => idleLookKey(this.modelType, request, this.fps));
    const missing: number[] = [];
    const firstOfLook = new Map<string, number>();
    for (let i = 0; i < annotated.length; i++) {
      const look = looks[i];
      frames[i] = look === null ? undefined : this.pool.idleFrames.get(this.cacheKey, look);
      if (frames[i]) continue;
      if (look !== null && firstOfLook.has(look)) continue;
      if (look !== null) firstOfLook.set(look, i);
      missing.push(i);
    }
    if (missing.length > 0) {
      // Frames of no shared look are this caller's alone: they are rendered into reused buffers and handed out
      // leased (the caller releases them); a shared idle frame is kept by the cache and never goes back.
      const buffers = this.pool.frameBuffers;
      const targets = missing.map((i) =>
        this.reuseFrameBuffers && looks[i] === null && buffers.canLend() ? buffers.take(this.frameBytes) : undefined,
      );
      let rendered: I420Frame[];
      try {
        const wanted = missing.length === annotated.length ? annotated : missing.map((i) => annotated[i]);
        // A live session's single frame (no signal: it never gives up on one) may share a task with its next ones.
        rendered =
          wanted.length === 1 && !signal
            ? [await this.renderQueued(wanted[0], targets[0])]
            : await this.renderOnWorkers(wanted, targets, signal);
      } catch (error) {
        for (const target of targets) if (target) buffers.abandon(target);
        throw error;
      }
      missing.forEach((i, k) => {
        const target = targets[k];
        const frame = rendered[k];
        // A frame in shared memory came back as a view of a clone of `target`: same bytes, another object.
        const intoTarget = target && frame && frame.data.buffer instanceof SharedArrayBuffer;
        if (intoTarget) {
          frames[i] = buffers.lease({ width: frame.width, height: frame.height, data: new Uint8Array(target) }, target);
        } else {
          if (target) buffers.abandon(target);
          frames[i] = frame;
        }
        const look = looks[i];
        if (look !== null && rendered[k]) this.pool.idleFrames.set(this.cacheKey, look, rendered[k]);
      });
    }
    for (let i = 0; i < annotated.length; i++) if (!frames[i]) frames[i] = frames[firstOfLook.get(looks[i]!)!];
    return frames as I420Frame[];
  }

  /**
   * One frame, in a task of its own when fewer of this session's tasks are in flight than the pool has threads
   * (so the first frame waits for nothing), else queued: when a task of this session finishes, up to
   * `MAX_FRAMES_PER_TASK` queued frames go to the worker together, in presentation order, each still handed back
   * to its own caller, so the media clock delivers every one on its pts.
   */
  private renderQueued(request: FrameRequest, target: SharedArrayBuffer | undefined): Promise<I420Frame> {
    return new Promise<I420Frame>((resolve, reject) => {
      this.queued.push({ request, target, resolve, reject });
      this.dispatchQueued();
    });
  }

  private dispatchQueued(): void {
    while (this.tasksInFlight < this.pool.threadCount && this.queued.length > 0) {
      const batch = this.queued.splice(0, MAX_FRAMES_PER_TASK).sort((a, b) => a.request.ptsMs - b.request.ptsMs);
      const { cacheKey, avatar, modelType } = this;
      const task: RenderTask = {
        op: 'render',
        cacheKey,
        avatar,
        modelType,
        requests: batch.map((f) => f.request),
        targets: batch.map((f) => f.target),
      };
      this.tasksInFlight++;
      this.pool
        .run(task)
        .then(
          (result) => batch.forEach((frame, k) => frame.resolve(result.frames[k])),
          (error: unknown) => batch.forEach((frame) => frame.reject(error)),
        )
        .finally(() => {
          this.tasksInFlight--;
          this.dispatchQueued();
        });
    }
  }

  private async renderOnWorkers(
    annotated: FrameRequest[],
    targets: Array<SharedArrayBuffer | undefined>,
    signal?: AbortSignal,
  ): Promise<I420Frame[]> {
    const parts = Math.min(this.pool.threadCount, Math.floor(annotated.length / MIN_FRAMES_PER_SPLIT)) || 1;
    const size = Math.ceil(annotated.length / parts);
    const tasks: RenderTask[] = [];
    for (let i = 0; i < annotated.length; i += size) {
      const { cacheKey, avatar, modelType } = this;
      tasks.push({
        op: 'render',
        cacheKey,
        avatar,
        modelType,
        requests: annotated.slice(i, i + size),
        targets: targets.slice(i, i + size),
      });
    }
    // A failed or abandoned task's buffers are not given back: its worker may still be writing into them.
    const results = await Promise.all(tasks.map((task) => this.pool.run(task, signal)));
    return results.flatMap((result) => result.frames);
  }

  close(): void {
    this.closed = true;
    this.loopLease?.release();
  }
}

/**
 * Renders in the calling thread, e.g. for offline batches that already run inside a worker.
 * Pass the same tracker across calls of one sequence so rt_head motion stays continuous.
 */
export function renderFramesInline(
  renderer: Renderer,
  requests: FrameRequest[],
  tracker?: ProsodyTracker,
  fps = 25,
): I420Frame[] {
  const prosody = tracker ?? new ProsodyTracker(fps);
  return prosody.annotate(requests).map((request) => renderer.render(request));
}

/** Reads a file into shared memory: structured clone to workers then shares it instead of copying. */
