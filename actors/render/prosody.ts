/**
 * Speech prosody envelopes from the per-frame audio level. Kept outside the renderers so the caller
 * owns the state; renderers stay pure per request.
 *
 * A session's prosody belongs to its media timeline (`actors/media/timeline.ts`), which steps it frame by
 * frame from the last frame that actually left and puts it on every request. `ProsodyTracker` is for
 * callers without a timeline (ad-hoc renders, the render pool for requests that carry no prosody).
 */
import type { FrameRequest, Prosody } from './types.ts';

/** Syllable-rate envelope (~100 ms) and phrase-rate envelope (~1 s) time constants. */
const FAST_SECONDS = 0.1;
const SLOW_SECONDS = 1.0;

export const SILENT_PROSODY: Prosody = Object.freeze({ fast: 0, slow: 0 });

/**
 * How stressed the syllable under a frame is, 0..1: the syllable envelope rising above the phrase envelope (a nod
 * on emphasis, the same for every renderer that moves a head).
 */
export function speechEmphasis(prosody: Prosody): number {
  return Math.min(1, Math.max(0, prosody.fast - prosody.slow) * 2.5);
}

/** Clamps a frame's audio level to 0..1 (non-finite → 0). */
export function prosodyLevel(level: number): number {
  return Number.isFinite(level) ? Math.min(1, Math.max(0, level)) : 0;
}

/** The envelopes one step of `frames` frames later, the level over that step being `level`. Pure. */
export function stepProsody(previous: Prosody, level: number, frames: number, fps: number): Prosody {
  const safeLevel = prosodyLevel(level);
  const dt = frames / fps;
  return {
    fast: previous.fast + (safeLevel - previous.fast) * (1 - Math.exp(-dt / FAST_SECONDS)),
    slow: previous.slow + (safeLevel - previous.slow) * (1 - Math.exp(-dt / SLOW_SECONDS)),
  };
}

export class ProsodyTracker {
  private state: Prosody = SILENT_PROSODY;
  private lastFrameIdx = -1;

  constructor(private readonly fps: number) {}

  push(frameIdx: number, level: number): Prosody {
    // A backwards jump means a new sequence (e.g. re-render from the start): forget the past.
    if (frameIdx <= this.lastFrameIdx) this.reset();
    const steps = this.lastFrameIdx < 0 ? 1 : Math.min(frameIdx - this.lastFrameIdx, this.fps * 10);
    this.lastFrameIdx = frameIdx;
    this.state = stepProsody(this.state, level, steps, this.fps);
    return this.state;
  }

  /** Returns the requests with `prosody` filled in where the caller did not set it. */
  annotate(requests: FrameRequest[]): FrameRequest[] {
    return requests.map((request) =>
      request.prosody ? request : { ...request, prosody: this.push(request.frameIdx, request.level) },
    );
  }

  reset(): void {
    this.state = SILENT_PROSODY;
    this.lastFrameIdx = -1;
  }
}
