import type { FrameRequest } from '../types.ts';
import { RtRenderer } from './rt.ts';

/** Prosody memory: how quickly head motion follows speech energy (frames of exponential smoothing). */
const PROSODY_SMOOTHING = 0.25;

/**
 * `rt_head`: the drawn face with head motion driven by speech prosody — louder speech nods and tilts
 * the head more — on top of breathing. Motion is a pure function of recent levels, so frames rendered
 * in order are deterministic.
 */
export class RtHeadRenderer extends RtRenderer {
  private energy = 0;
  private lastFrame = -1;

  protected override headOffset(request: FrameRequest): { dx: number; dy: number } {
    const base = super.headOffset(request);
    if (request.frameIdx !== this.lastFrame) {
      this.energy += ((request.speaking ? request.level : 0) - this.energy) * PROSODY_SMOOTHING;
      this.lastFrame = request.frameIdx;
    }
    const t = request.ptsMs / 1000;
    const scale = this.height / 512;
    const nod = Math.sin(2 * Math.PI * 2.1 * t) * 10 * this.energy * scale;
    const sway = Math.sin(2 * Math.PI * 0.7 * t) * 6 * this.energy * scale + Math.sin(2 * Math.PI * 0.13 * t) * 1.5 * scale;
    return { dx: base.dx + sway, dy: base.dy + nod };
  }
}
