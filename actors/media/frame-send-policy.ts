import type { I420Frame } from '../render/types.ts';
import { releaseFrame, retainFrame } from '../render/frame-buffers.ts';

/**
 * While nothing is said, a frame identical to the last one sent is not sent again unless this long has passed. An
 * idle avatar changes only ~3 times a second (a breathing step, a blink), and VP8-encoding and packetising the same
 * picture 25 times a second was most of an idle session's CPU (`rt` idle 55–59 → 90–96 ms per session-second,
 * docs/performance.md, "Which frames are sent"). Viewers keep showing the last frame; the repeat is the floor that
 * still reaches a viewer whose picture got lost (a keyframe request needs a frame to answer with): 4 fps, far above
 * any timeout of a receiver's video jitter buffer, and a fresh peer gets the next frame at once.
 */
export const IDLE_REPEAT_MS = 250;

/**
 * Every frame is sent, repeats too, for this long after a peer connects. A stream that began at the idle floor
 * (`IDLE_REPEAT_MS`) reached its first turn with the receiver's video delay still moving, and Chromium's picture
 * drifted against the sound through that turn (r 0.23–0.38 at a Chromium page, with a 10 fps floor too); one that began
 * at 25 fps kept a settled delay through later idle stretches at the floor (first turns after ~5 s of them and turns
 * after 10 s: r 0.56–0.69, the mouth 0–120 ms ahead; docs/performance.md, "Which frames are sent"). A likely reason:
 * libwebrtc's receiver ignores a stream's jitter below 5 fps, scales it in up to 10 fps, and settles its estimates over
 * a stream's first 30 frames.
 */
export const STEADY_START_MS = 4_000;

/**
 * After a turn ends, every frame is still sent for this long. Within a turn every frame goes, repeats too: Chromium
 * plays a stream that comes at a steady rate with the audio captured with it (A/V sync, which the video hold
 * `SERVICE_VIDEO_DELAY_MS` is set for), and one with gaps (a photo's held mouth) as each frame arrives, ~100 ms earlier
 * (docs/performance.md, "Every frame sent"). The tail covers the frames held for the wire behind the turn's last audio
 * and a conversation's next turn, which often follows within seconds.
 */
export const STEADY_TAIL_MS = 5_000;

/**
 * The one owner of which frames the WebRTC output sends (`WebRtcOutput.pushVideo`): every frame for
 * `STEADY_START_MS` after a peer connects (`viewerStarted`), while a turn runs (`turnStarted`) and for
 * `STEADY_TAIL_MS` after it (`turnEnded`); otherwise a frame only when its pixels differ from the last one sent or
 * `IDLE_REPEAT_MS` passed.
 * Comparing 384 KiB (a 512² I420 frame) costs ~30 µs; the encode it saves costs ~2 ms. The last frame sent is held (a
 * reference on a live frame's reused buffer, `frame-buffers.ts`) until the next one replaces it or `close`.
 */
export class FrameSendPolicy {
  private last: I420Frame | null = null;
  private lastAt = 0;
  /** Turns running (a turn may start before the one before it settled). */
  private turns = 0;
  /** Until when every frame is sent although no turn runs (a peer's start, a turn's tail). */
  private steadyUntil = -Infinity;
  /** Frames not sent because they repeated the last one. */
  skipped = 0;

  constructor(
    private readonly timing = { repeatMs: IDLE_REPEAT_MS, startMs: STEADY_START_MS, tailMs: STEADY_TAIL_MS },
  ) {}

  /** A turn started: every frame is sent until it ends (and `tailMs` after). */
  turnStarted(): void {
    this.turns++;
  }

  /** A turn ended: every frame is still sent for `tailMs`, then idle repeats are skipped again. */
  turnEnded(now = performance.now()): void {
    if (this.turns === 0) return;
    this.turns--;
    this.keepSteady(now + this.timing.tailMs);
  }

  /** True when the frame should be sent (and is then remembered as the last one sent). */
  admit(frame: I420Frame, now = performance.now()): boolean {
    const last = this.last?.data;
    const data = frame.data;
    if (
      this.turns === 0 &&
      now >= this.steadyUntil &&
      last &&
      now - this.lastAt < this.timing.repeatMs &&
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

  /**
   * A peer (or a viewer's feed) is new or just connected: the next frame goes out whatever it shows, and every frame
   * for `startMs`.
   */
  viewerStarted(now = performance.now()): void {
    // Forgetting the last frame sent makes the next one differ from it, whatever it shows.
    this.forgetLastFrame();
    this.keepSteady(now + this.timing.startMs);
  }

  /** The output closed: lets go of the last frame sent. */
  close(): void {
    this.forgetLastFrame();
  }

  private forgetLastFrame(): void {
    releaseFrame(this.last);
    this.last = null;
  }

  private keepSteady(until: number): void {
    this.steadyUntil = Math.max(this.steadyUntil, until);
  }
}
