import fs from 'node:fs';
import path from 'node:path';
import os from 'node:os';
import { Piscina } from 'piscina';
import type { AvatarSource, FrameRequest, I420Frame, ModelType } from './types.ts';
import type { RenderTask } from './worker.ts';

const WORKER_BOOTSTRAP = new URL('./worker.mjs', import.meta.url);

export interface RenderHandle {
  readonly width: number;
  readonly height: number;
  readonly fps: number;
  render(requests: FrameRequest[], signal?: AbortSignal): Promise<I420Frame[]>;
  close(): void;
}

interface RenderResult {
  buffer: ArrayBuffer;
  width: number;
  height: number;
  count: number;
}

/**
 * Renders frames in piscina worker threads so the event loop (WebRTC pacing, HTTP) never waits on pixels.
 * Each worker prepares an avatar once and keeps it; `open` warms one worker and fails fast on a broken bundle.
 */
export class RenderPool {
  private readonly pool: Piscina<RenderTask, RenderResult>;
  private closed = false;

  constructor(opts: { threads?: number } = {}) {
    const threads = Math.max(1, opts.threads ?? Math.max(1, os.availableParallelism() - 1));
    this.pool = new Piscina<RenderTask, RenderResult>({
      filename: WORKER_BOOTSTRAP.href,
      minThreads: 1,
      maxThreads: threads,
      // Prepared avatars live in the workers; keep them warm while the service runs.
      idleTimeout: 60_000,
      // Frames for the live clock must not queue behind offline batches forever.
      concurrentTasksPerWorker: 1,
      // Tasks are async (sharp, tsx loader); blocking the worker in Atomics.wait between tasks stalls them.
      atomics: 'disabled',
    });
  }

  async open(avatar: AvatarSource, model: ModelType): Promise<RenderHandle> {
    if (this.closed) throw new Error('render pool closed');
    const key = `${avatar.id}@${avatar.manifest.version}:${model}:${bundleStamp(avatar.dir)}`;
    const { width, height, fps } = avatar.manifest;
    // Prepare once now so errors surface at session creation rather than on the first frame.
    await this.pool.run({ key, avatar, model, requests: [] });
    let handleClosed = false;
    const run = async (requests: FrameRequest[], signal?: AbortSignal): Promise<I420Frame[]> => {
      if (handleClosed || this.closed) throw new Error('render handle closed');
      const result = await this.pool.run({ key, avatar, model, requests }, signal ? { signal } : {});
      const frameSize = (result.width * result.height * 3) / 2;
      const bytes = new Uint8Array(result.buffer);
      return Array.from({ length: result.count }, (_, i) => ({
        width: result.width,
        height: result.height,
        data: bytes.subarray(i * frameSize, (i + 1) * frameSize),
      }));
    };
    return {
      width,
      height,
      fps,
      render: run,
      close() {
        handleClosed = true;
      },
    };
  }

  get threads(): number {
    return this.pool.threads.length;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.pool.destroy();
  }
}

function bundleStamp(dir: string): number {
  try {
    return Math.round(fs.statSync(path.join(dir, 'manifest.json')).mtimeMs);
  } catch {
    return 0;
  }
}
