/**
 * Reused frame buffers for live rendering. A live session used to get every rendered frame back from its render
 * worker in a fresh transferred 384 KiB `ArrayBuffer` (75 a second for three speaking sessions); V8 counts such
 * buffers as external memory and answers their growth with full mark-compacts, the largest single item of a
 * speaking session-second (docs/performance.md). Render tasks now carry `SharedArrayBuffer`s taken from a
 * free list here; the worker renders into them and the clock gives them back once nothing reads the frame.
 * Shared buffers are not counted as per-isolate external memory, and a reused one allocates nothing.
 *
 * Ownership is a reference count on the frame (`FrameLease`): the render pool hands the frame out holding
 * one reference; whoever keeps the frame beyond the call that gave it to them takes another (`retainFrame`)
 * and drops it when done (`releaseFrame`). The buffer goes back to the free list when the count reaches
 * zero, and only then may a worker write into it again. A holder that forgets to release loses the buffer to
 * the garbage collector, which does not count shared memory, so it may linger (`outstanding` shows it).
 * Releasing what one does not hold would show another frame's pixels, so only the clock and the WebRTC
 * output's unchanged-frame filter hold pooled frames, and every other consumer copies what it keeps (the
 * recorder) or keeps nothing (events, metrics). Every rendered frame of a live session is leased (speech, and
 * the idle frames of models without shared idle looks); the shared idle frames of `idle-frames.ts` never are.
 */
import type { I420Frame } from './types.ts';

/**
 * Buffers a pool makes at most, lent and free together; past it frames are rendered into fresh buffers again.
 * A dozen live sessions hold ~100 (each ~6–8: 2 rendered ahead, ~3 held for the video delay, the filter's last
 * one). A buffer, once made, is kept for the next frame rather than dropped: shared memory is invisible to V8's
 * heap accounting, so a dropped one lingers until some unrelated full collection (measured: +41 MiB of RSS over
 * `test/leak.cycles.test.ts`'s 200 cycles with a free list of 16, −8 MiB keeping them all). So a pool holds its
 * high-water mark of concurrent frames, at most this many (96 MiB at 512²).
 */
export const MAX_FRAME_BUFFERS = 256;

/** A pooled frame's reference count and the buffer it returns. */
export class FrameLease {
  private refs = 1;

  constructor(
    private readonly pool: FrameBufferPool,
    private readonly buffer: SharedArrayBuffer,
  ) {}

  retain(): void {
    // A frame already given back must not be revived: its buffer may hold another frame by now.
    if (this.refs <= 0) throw new Error('retained a frame buffer that was already released');
    this.refs++;
  }

  release(): void {
    if (this.refs <= 0) {
      // A holder released twice, or someone who held nothing: harmless only because the count stopped at zero.
      this.pool.overReleases++;
      return;
    }
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
  private freeTotal = 0;
  /** Buffers handed out that came from the free list, and ones newly allocated (metrics, tests). */
  reused = 0;
  allocated = 0;
  /**
   * Buffers taken and not given back: frames being rendered or read. Returning to 0 when sessions close is how
   * the tests and `avatar_frame_buffers_outstanding` show that no holder forgets one.
   */
  outstanding = 0;
  /** Releases of a frame already given back: each one is a holder's bug (`avatar_frame_buffers_over_released_total`). */
  overReleases = 0;

  constructor(private readonly maxBuffers = MAX_FRAME_BUFFERS) {}

  /**
   * Whether a buffer can be lent: a free one (of the size asked for, or of another size to drop for it when an
   * avatar of another size took over), or room to make one (`MAX_FRAME_BUFFERS`).
   */
  canLend(): boolean {
    return this.freeTotal > 0 || this.outstanding < this.maxBuffers;
  }

  take(bytes: number): SharedArrayBuffer {
    this.outstanding++;
    const buffer = this.free.get(bytes)?.pop();
    if (buffer) {
      this.freeTotal--;
      this.reused++;
      return buffer;
    }
    if (this.outstanding - 1 + this.freeTotal >= this.maxBuffers) this.dropOneOfAnotherSize(bytes);
    this.allocated++;
    return new SharedArrayBuffer(bytes);
  }

  private dropOneOfAnotherSize(bytes: number): void {
    for (const [size, list] of this.free) {
      if (size === bytes || list.length === 0) continue;
      list.pop();
      this.freeTotal--;
      return;
    }
  }

  give(buffer: SharedArrayBuffer): void {
    this.outstanding--;
    let list = this.free.get(buffer.byteLength);
    if (!list) this.free.set(buffer.byteLength, (list = []));
    list.push(buffer);
    this.freeTotal++;
  }

  /** A buffer that will never come back (its render failed or was abandoned; a worker may still write into it). */
  abandon(_buffer: SharedArrayBuffer): void {
    this.outstanding--;
  }

  /** A frame rendered into `buffer`, holding the one reference its receiver owns. */
  lease(frame: I420Frame, buffer: SharedArrayBuffer): PooledFrame {
    return Object.assign(frame, { lease: new FrameLease(this, buffer) });
  }

  get freeCount(): number {
    return this.freeTotal;
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
