import type { I420Frame } from '../render/types.ts';
import { releaseFrame, retainFrame } from '../render/frame-buffers.ts';

/**
 * Outside a turn, a frame identical to the last one sent is not sent again unless this long has passed. An idle
 * avatar changes only ~3 times a second (a breathing step, a blink), and VP8-encoding and packetising the same
 * picture 25 times a second was most of an idle session's CPU (`rt` idle 55–59 → 90–96 ms per session-second,
 * docs/performance.md, "Frames sent"). Viewers keep showing the last frame; the repeat is the floor that still
 * reaches a viewer whose picture got lost (a keyframe request needs a frame to answer with): 4 fps, far above any
 * timeout of a receiver's video jitter buffer, and a fresh peer gets the next frame at once.
 */
export const IDLE_REPEAT_MS = 250;

/**
 * After a turn ends, every frame is still sent for this long. Within a turn every frame goes, repeats too: Chromium
 * plays a stream that comes at a steady rate with the audio captured with it (A/V sync, which the video hold
 * `SERVICE_VIDEO_DELAY_MS` is set for), and one with gaps (a photo's held mouth, idle repeats skipped) as each frame
 * arrives, ~100 ms earlier (docs/performance.md, "Every frame sent"). The tail covers the video hold behind the turn's
 * last audio and keeps a conversation's next turn, which usually follows within seconds, on a steady stream.
 */
export const STEADY_TAIL_MS = 5_000;

/**
 * The one owner of which frames the WebRTC output sends (`WebRtcOutput.pushVideo`): every frame while a turn runs
 * (`steady`) and for `STEADY_TAIL_MS` after it (`settle`); otherwise a frame only when its pixels differ from the last
 * one sent or `IDLE_REPEAT_MS` passed. Comparing 384 KiB (a 512² I420 frame) costs ~30 µs; the encode it saves costs
 * ~2 ms. The last frame sent is held (a reference on a live frame's reused buffer, `frame-buffers.ts`) until the next
 * one replaces it or `reset`.
 */
export class FrameSendPolicy {
  private last: I420Frame | null = null;
  private lastAt = 0;
  /** Turns running (a turn may start before the one before it settled). */
  private turns = 0;
  private steadyUntil = -Infinity;
  /** Frames not sent because they repeated the last one. */
  skipped = 0;

  constructor(
    private readonly repeatMs = IDLE_REPEAT_MS,
    private readonly tailMs = STEADY_TAIL_MS,
  ) {}

  /** A turn started: every frame is sent until it settles (and `tailMs` after). */
  steady(): void {
    this.turns++;
  }

  /** A turn ended: every frame is still sent for `tailMs`, then idle repeats are skipped again. */
  settle(now = performance.now()): void {
    if (this.turns === 0) return;
    this.turns--;
    this.steadyUntil = Math.max(this.steadyUntil, now + this.tailMs);
  }

  /** True when the frame should be sent (and is then remembered as the last one sent). */
  admit(frame: I420Frame, now = performance.now()): boolean {
    const last = this.last?.data;
    const data = frame.data;
    if (
      this.turns === 0 &&
      now >= this.steadyUntil &&
      last &&
      now - this.lastAt < this.repeatMs &&
      (last === data || (last.length === data.length && Buffer.compare(last, data) === 0))
    ) {
      this.skipped++;
      return false;
    }
    retainFrame(frame);
    releaseFrame(this.last);
    this.last = frame;
    this.lastAt = now;
    return true;
  }

  /** The next frame goes out whatever it shows (a new peer, a connection that just came up). */
  reset(): void {
    releaseFrame(this.last);
    this.last = null;
  }
}
