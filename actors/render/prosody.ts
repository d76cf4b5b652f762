/**
 * Speech prosody envelopes from the per-frame audio level. Kept outside the renderers so the caller
 * (one sequence of frames per session) owns the state; renderers stay pure per request.
 */
import type { FrameRequest, Prosody } from './types.ts';

/** Syllable-rate envelope (~100 ms) and phrase-rate envelope (~1 s) time constants. */
const FAST_SECONDS = 0.1;
const SLOW_SECONDS = 1.0;

export class ProsodyTracker {
  private fast = 0;
  private slow = 0;
  private lastFrameIdx = -1;

  constructor(private readonly fps: number) {}

  push(frameIdx: number, level: number): Prosody {
    const safeLevel = Number.isFinite(level) ? Math.min(1, Math.max(0, level)) : 0;
    // A backwards jump means a new sequence (e.g. re-render from the start): forget the past.
    if (frameIdx <= this.lastFrameIdx) this.reset();
    const steps = this.lastFrameIdx < 0 ? 1 : Math.min(frameIdx - this.lastFrameIdx, this.fps * 10);
    this.lastFrameIdx = frameIdx;
    const dt = steps / this.fps;
    this.fast += (safeLevel - this.fast) * (1 - Math.exp(-dt / FAST_SECONDS));
    this.slow += (safeLevel - this.slow) * (1 - Math.exp(-dt / SLOW_SECONDS));
    return { fast: this.fast, slow: this.slow };
  }

  /** Returns the requests with `prosody` filled in where the caller did not set it. */
  annotate(requests: FrameRequest[]): FrameRequest[] {
    return requests.map((request) => (request.prosody ? request : { ...request, prosody: this.push(request.frameIdx, request.level) }));
  }

  reset(): void {
    this.fast = 0;
    this.slow = 0;
    this.lastFrameIdx = -1;
  }
}
