/**
 * Reused frame buffers for live rendering. A speaking session used to get every frame back from its render
 * worker in a fresh transferred 384 KiB `ArrayBuffer` (75 a second for three sessions); V8 counts such
 * buffers as external memory and answers their growth with full mark-compacts, the largest single item of a
 * speaking session-second (docs/performance.md). Render tasks now carry `SharedArrayBuffer`s taken from a
 * free list here; the worker renders into them and the clock gives them back once nothing reads the frame.
 * Shared buffers are not counted as per-isolate external memory, and a reused one allocates nothing.
 *
 * Ownership is a reference count on the frame (`FrameLease`): the render pool hands the frame out holding
 * one reference; whoever keeps the frame beyond the call that gave it to them takes another (`retainFrame`)
 * and drops it when done (`releaseFrame`). The buffer goes back to the free list when the count reaches
 * zero, and only then may a worker write into it again. A holder that forgets to release costs one reuse
 * (the buffer is collected as garbage like before); releasing what one does not hold would show another
 * frame's pixels, so only the clock and the WebRTC output's unchanged-frame filter hold pooled frames, and
 * every other consumer copies what it keeps (the recorder) or keeps nothing (events, metrics).
 */
import type { I420Frame } from './types.ts';

/**
 * Free buffers kept per frame size. A live session holds ~6–8 frames at once (2 rendered ahead, ~3 held for
 * the video delay, the filter's last one); this covers a dozen sessions of one size, and past it a released
 * buffer is left to the garbage collector, so an idle service keeps at most this many (~18 MiB at 512²).
 */
export const MAX_FREE_FRAME_BUFFERS = 48;

/** A pooled frame's reference count and the buffer it returns. */
export class FrameLease {
  private refs = 1;

  constructor(
    private readonly pool: FrameBufferPool,
    private readonly buffer: SharedArrayBuffer,
  ) {}

  get references(): number {
    return this.refs;
  }

  retain(): void {
    // A frame already given back must not be revived: its buffer may hold another frame by now.
    if (this.refs <= 0) throw new Error('retained a frame buffer that was already released');
    this.refs++;
  }

  release(): void {
    if (this.refs <= 0) return;
    this.refs--;
    if (this.refs === 0) this.pool.give(this.buffer);
  }
}

/** A frame whose buffer goes back to a pool when released; plain frames have no lease. */
export type PooledFrame = I420Frame & { lease?: FrameLease };

/** Takes another reference to a pooled frame; nothing for plain frames. */
export function retainFrame(frame: I420Frame): void {
  (frame as PooledFrame).lease?.retain();
}

/** Drops a reference taken by `retainFrame` (or the one the render pool handed out); nothing for plain frames. */
export function releaseFrame(frame: I420Frame | null | undefined): void {
  if (frame) (frame as PooledFrame).lease?.release();
}

/** True when the frame's buffer will be reused once released: keep a copy, not the frame, past the call. */
export function isPooledFrame(frame: I420Frame): boolean {
  return (frame as PooledFrame).lease !== undefined;
}

/** Free shared buffers by byte size (main thread; workers only write into what a task hands them). */
export class FrameBufferPool {
  private readonly free = new Map<number, SharedArrayBuffer[]>();
  /** Buffers handed out that came from the free list, and ones newly allocated (metrics, tests). */
  reused = 0;
  allocated = 0;

  constructor(private readonly maxFreePerSize = MAX_FREE_FRAME_BUFFERS) {}

  take(bytes: number): SharedArrayBuffer {
    const buffer = this.free.get(bytes)?.pop();
    if (buffer) {
      this.reused++;
      return buffer;
    }
    this.allocated++;
    return new SharedArrayBuffer(bytes);
  }

  give(buffer: SharedArrayBuffer): void {
    let list = this.free.get(buffer.byteLength);
    if (!list) this.free.set(buffer.byteLength, (list = []));
    if (list.length < this.maxFreePerSize) list.push(buffer);
  }

  /** A frame rendered into `buffer`, holding the one reference its receiver owns. */
  lease(frame: I420Frame, buffer: SharedArrayBuffer): PooledFrame {
    return Object.assign(frame, { lease: new FrameLease(this, buffer) });
  }

  get freeCount(): number {
    let count = 0;
    for (const list of this.free.values()) count += list.length;
    return count;
  }
}

/**
 * The renderer side: a frame that starts as a copy of `base`, written into the task's buffer when one came
 * with the request (and fits), else into a new one.
 */
export function frameFromBase(base: I420Frame, target?: SharedArrayBuffer): I420Frame {
  if (target && target.byteLength === base.data.length) {
    const data = new Uint8Array(target);
    data.set(base.data);
    return { width: base.width, height: base.height, data };
  }
  return { width: base.width, height: base.height, data: base.data.slice() };
}
