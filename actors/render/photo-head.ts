/**
 * Head motion of a photo avatar: the head (face box grown to take in hair and neck) turns a little about the neck
 * and moves a few pixels, feathered to nothing at the edge of an ellipse around it, so the background and
 * shoulders stay put. While silent it drifts slowly; while speaking it bobs and tilts with the phrase's loudness
 * and nods on emphasis, as `rt_head` does (`renderers/rt_head.ts`), only smaller: a photo has no back of the
 * head to show, and a larger turn bends the feathered ring visibly.
 *
 * The motion is a pure function of the frame index and the request's prosody (never of the mouth pose), so the
 * same request with closed lips is the frame's own moved rest face: what a speaking frame is compared with when
 * its mouth is judged (the artefact measures compare outside the mouth–jaw region against that frame, not against
 * the unmoved photo). Every oscillation starts at zero, so frame 0 of silence is the photo as it is.
 *
 * Applied per frame to the finished I420 frame (mouth and eyelids already laid), in place: one resampling of the
 * head ellipse, luma with a Catmull-Rom kernel (bilinear softened the face on every half-pixel offset and made
 * its texture shimmer as the head moved), chroma bilinear.
 */
import { SILENT_PROSODY } from './prosody.ts';
import { oscillate, smoothstep } from './idle-motion.ts';
import { chromaHeight, chromaWidth, planes } from './i420.ts';
import type { FrameRequest, I420Frame, MouthAnimation } from './types.ts';

const DEG = Math.PI / 180;
/**
 * Amplitudes in face-box heights (a 100 px face: 0.01 = 1 px) and degrees. Idle: the photo's old sway (0.6 px on
 * the astronaut). Speech: a bob and a sideways drift of a pixel or two, a tilt of about a degree, and a nod of
 * 2.5 px on a stressed syllable — a third of rt_head's, which the warp carries without bending the hair line.
 */
const IDLE_DRIFT_X = 0.006;
const IDLE_DRIFT_Y = 0.004;
const SPEECH_DRIFT_X = 0.012;
const SPEECH_BOB = 0.012;
const SPEECH_TILT_DEG = 1.2;
const EMPHASIS_NOD = 0.025;
/** Head ellipse around the face box (radii in face widths / heights), its centre this far down the box. */
const HEAD_RADIUS = 0.95;
const HEAD_CENTRE_DOWN = 0.4;
/** The head moves rigidly inside this fraction of the ellipse and fades out towards its edge. */
const RIGID_FRACTION = 0.6;
/** Below this much motion (px at the farthest moved pixel) the frame is left as it is: nothing would change. */
const STILL_PX = 0.02;
/**
 * A frame at rest (not speaking, lips closed, prosody below `RESTING_PROSODY`) shows the silent drift quantised to
 * this step, from a cache of moved head regions: warping every idle frame cost ten times a frame's copy and blend,
 * for a drift that visits a few dozen positions (±0.6 / ±0.4 px on the astronaut: 7 × 5). Below the prosody bound the
 * speech motion adds under 0.1 px, so leaving speech for rest does not jump.
 */
const RESTING_STEP_PX = 0.2;
const RESTING_PROSODY = 0.02;

export interface HeadPose {
  /** Translation in px. */
  dx: number;
  dy: number;
  /** Rotation in radians about the neck (the bottom centre of the face box), positive clockwise on screen. */
  tilt: number;
}

/** The head's pose at this frame: idle drift always, speech motion from the request's prosody. */
export function photoHeadPose(request: FrameRequest, fps: number, faceHeight: number): HeadPose {
  const { frameIdx } = request;
  const prosody = request.prosody ?? SILENT_PROSODY;
  const emphasis = Math.min(1, Math.max(0, prosody.fast - prosody.slow) * 2.5);
  const dx = faceHeight * (IDLE_DRIFT_X * oscillate(frameIdx, fps, 5.3) + SPEECH_DRIFT_X * prosody.slow * oscillate(frameIdx, fps, 3.1));
  const dy =
    faceHeight *
    (IDLE_DRIFT_Y * oscillate(frameIdx, fps, 7.1) + SPEECH_BOB * prosody.slow * oscillate(frameIdx, fps, 1.1) + EMPHASIS_NOD * emphasis);
  // No tilt at rest: silence's drift is a pure shift, so its few positions are cached (`PhotoHead.applyResting`).
  const tilt = DEG * SPEECH_TILT_DEG * prosody.slow * oscillate(frameIdx, fps, 2.3);
  return { dx, dy, tilt };
}

interface PlaneRegion {
  x: number;
  y: number;
  width: number;
  height: number;
  /** How rigidly each pixel of the region moves with the head, 0..1, row-major. */
  weight: Float32Array;
  /** The region's pixels before the warp (scratch, reused every frame). */
  scratch: Uint8Array;
}

/** The head region of one avatar, for luma and chroma, with its feather weights: made once at prepare. */
export class PhotoHead {
  private readonly luma: PlaneRegion;
  private readonly chroma: PlaneRegion;
  private readonly pivotX: number;
  private readonly pivotY: number;
  private readonly faceHeight: number;

  constructor(
    animation: MouthAnimation,
    private readonly width: number,
    private readonly height: number,
    private readonly fps: number,
  ) {
    const face = animation.face_box;
    const centreX = face.x + face.width / 2;
    const centreY = face.y + face.height * HEAD_CENTRE_DOWN;
    const radiusX = face.width * HEAD_RADIUS;
    const radiusY = face.height * HEAD_RADIUS;
    this.pivotX = centreX;
    this.pivotY = face.y + face.height;
    this.faceHeight = face.height;
    this.luma = region(centreX, centreY, radiusX, radiusY, width, height, 1);
    this.chroma = region(centreX, centreY, radiusX, radiusY, chromaWidth(width), chromaHeight(height), 0.5);
  }

  /** Moved head regions of the rest frame at quantised silent drifts, by position (see `RESTING_STEP_PX`). */
  private readonly resting = new Map<number, { luma: Uint8Array; u: Uint8Array; v: Uint8Array }>();

  /** Whether this request is at rest: its head shows the silent drift alone (`applyResting` serves it). */
  atRest(request: FrameRequest): boolean {
    const prosody = request.prosody ?? SILENT_PROSODY;
    return !request.speaking && prosody.fast < RESTING_PROSODY && prosody.slow < RESTING_PROSODY;
  }

  /**
   * `frame` is a copy of the rest frame `base` (nothing laid on it yet): its head region is replaced by the cached
   * moved one for this request's silent drift, made from `base` on first use.
   */
  applyResting(frame: I420Frame, base: I420Frame, request: FrameRequest): void {
    if (frame.width !== this.width || frame.height !== this.height) return;
    const pose = photoHeadPose({ ...request, prosody: SILENT_PROSODY }, this.fps, this.faceHeight);
    const stepX = Math.round(pose.dx / RESTING_STEP_PX);
    const stepY = Math.round(pose.dy / RESTING_STEP_PX);
    if (stepX === 0 && stepY === 0) return;
    const key = stepX * 1000 + stepY;
    let moved = this.resting.get(key);
    if (!moved) {
      const copy: I420Frame = { width: base.width, height: base.height, data: base.data.slice() };
      this.warp(copy, { dx: stepX * RESTING_STEP_PX, dy: stepY * RESTING_STEP_PX, tilt: 0 });
      const { y, u, v, cw } = planes(copy);
      moved = { luma: cut(y, this.width, this.luma), u: cut(u, cw, this.chroma), v: cut(v, cw, this.chroma) };
      this.resting.set(key, moved);
    }
    const { y, u, v, cw } = planes(frame);
    paste(y, this.width, this.luma, moved.luma);
    paste(u, cw, this.chroma, moved.u);
    paste(v, cw, this.chroma, moved.v);
  }

  /** The head pose this request shows (exposed for tests and the measures). */
  pose(request: FrameRequest): HeadPose {
    return photoHeadPose(request, this.fps, this.faceHeight);
  }

  /** Moves the head of `frame` (the finished frame, its size the avatar's) to this request's pose, in place. */
  apply(frame: I420Frame, request: FrameRequest): void {
    if (frame.width !== this.width || frame.height !== this.height) return;
    this.warp(frame, this.pose(request));
  }

  private warp(frame: I420Frame, pose: HeadPose): void {
    const reach = Math.hypot(this.luma.width, this.luma.height);
    if (Math.hypot(pose.dx, pose.dy) + Math.abs(pose.tilt) * reach < STILL_PX) return;
    const { y, u, v, cw } = planes(frame);
    warpPlane(y, this.width, this.luma, pose, this.pivotX, this.pivotY, 1, true);
    warpPlane(u, cw, this.chroma, pose, this.pivotX, this.pivotY, 0.5, false);
    warpPlane(v, cw, this.chroma, pose, this.pivotX, this.pivotY, 0.5, false);
  }
}

/** The region's pixels out of a plane (rows of `r.width` from `r.x`). */
function cut(plane: Uint8Array, stride: number, r: PlaneRegion): Uint8Array {
  const out = new Uint8Array(r.width * r.height);
  for (let j = 0; j < r.height; j++) out.set(plane.subarray((r.y + j) * stride + r.x, (r.y + j) * stride + r.x + r.width), j * r.width);
  return out;
}

function paste(plane: Uint8Array, stride: number, r: PlaneRegion, pixels: Uint8Array): void {
  for (let j = 0; j < r.height; j++) plane.set(pixels.subarray(j * r.width, (j + 1) * r.width), (r.y + j) * stride + r.x);
}

function region(centreX: number, centreY: number, radiusX: number, radiusY: number, planeWidth: number, planeHeight: number, scale: number): PlaneRegion {
  const x0 = Math.max(0, Math.floor((centreX - radiusX) * scale));
  const y0 = Math.max(0, Math.floor((centreY - radiusY) * scale));
  const x1 = Math.min(planeWidth, Math.ceil((centreX + radiusX) * scale));
  const y1 = Math.min(planeHeight, Math.ceil((centreY + radiusY) * scale));
  const width = Math.max(0, x1 - x0);
  const height = Math.max(0, y1 - y0);
  const weight = new Float32Array(width * height);
  for (let j = 0; j < height; j++) {
    for (let i = 0; i < width; i++) {
      // Pixel centres in full-resolution coordinates.
      const nx = ((x0 + i + 0.5) / scale - centreX) / radiusX;
      const ny = ((y0 + j + 0.5) / scale - centreY) / radiusY;
      weight[j * width + i] = 1 - smoothstep(RIGID_FRACTION, 1, Math.sqrt(nx * nx + ny * ny));
    }
  }
  return { x: x0, y: y0, width, height, weight, scratch: new Uint8Array(width * height) };
}

/**
 * Backward mapping: a pixel at p shows the pre-warp pixel at p − w(p)·(R(θ)(p − c) + c − p + t), c the neck.
 * The weight is taken at the destination (the motion is small, so it differs from the exact inverse by a
 * fraction of a pixel in the feather ring only). Luma is sampled with Catmull-Rom, chroma bilinearly; both loops
 * are written out (a sampler passed as a function cost ~15× more per pixel, 27 ms a frame on a close-up).
 */
function warpPlane(plane: Uint8Array, stride: number, r: PlaneRegion, pose: HeadPose, pivotX: number, pivotY: number, scale: number, cubic: boolean): void {
  const { scratch, weight, width, height } = r;
  for (let j = 0; j < height; j++) scratch.set(plane.subarray((r.y + j) * stride + r.x, (r.y + j) * stride + r.x + width), j * width);
  const cos = Math.cos(pose.tilt);
  const sin = Math.sin(pose.tilt);
  const cx = pivotX * scale;
  const cy = pivotY * scale;
  const tx = pose.dx * scale;
  const ty = pose.dy * scale;
  const maxX = width - 1;
  const maxY = height - 1;
  for (let j = 0; j < height; j++) {
    const py = r.y + j + 0.5 - cy;
    const row = (r.y + j) * stride + r.x;
    const rowMoveX = -sin * py + tx;
    const rowMoveY = cos * py - py + ty;
    for (let i = 0; i < width; i++) {
      const w = weight[j * width + i];
      if (w <= 0) continue;
      const px = r.x + i + 0.5 - cx;
      const x = i - w * (cos * px - px + rowMoveX);
      const y = j - w * (sin * px + rowMoveY);
      const x0 = Math.floor(x);
      const y0 = Math.floor(y);
      const fx = x - x0;
      const fy = y - y0;
      let value: number;
      if (cubic && x0 >= 1 && y0 >= 1 && x0 + 2 <= maxX && y0 + 2 <= maxY) {
        // Catmull-Rom weights of the four taps around the fractional position, in x and in y.
        const fx2 = fx * fx;
        const fx3 = fx2 * fx;
        const ax = 0.5 * (-fx3 + 2 * fx2 - fx);
        const bx = 0.5 * (3 * fx3 - 5 * fx2 + 2);
        const cxw = 0.5 * (-3 * fx3 + 4 * fx2 + fx);
        const dxw = 0.5 * (fx3 - fx2);
        const fy2 = fy * fy;
        const fy3 = fy2 * fy;
        const ay = 0.5 * (-fy3 + 2 * fy2 - fy);
        const by = 0.5 * (3 * fy3 - 5 * fy2 + 2);
        const cyw = 0.5 * (-3 * fy3 + 4 * fy2 + fy);
        const dyw = 0.5 * (fy3 - fy2);
        let o = (y0 - 1) * width + x0 - 1;
        let sum = ay * (ax * scratch[o] + bx * scratch[o + 1] + cxw * scratch[o + 2] + dxw * scratch[o + 3]);
        o += width;
        sum += by * (ax * scratch[o] + bx * scratch[o + 1] + cxw * scratch[o + 2] + dxw * scratch[o + 3]);
        o += width;
        sum += cyw * (ax * scratch[o] + bx * scratch[o + 1] + cxw * scratch[o + 2] + dxw * scratch[o + 3]);
        o += width;
        sum += dyw * (ax * scratch[o] + bx * scratch[o + 1] + cxw * scratch[o + 2] + dxw * scratch[o + 3]);
        value = sum;
      } else {
        // Bilinear (chroma, and luma at the region's edge where the cubic kernel would reach outside it).
        const sx = Math.min(maxX, Math.max(0, x0));
        const sy = Math.min(maxY, Math.max(0, y0));
        const sx1 = Math.min(maxX, sx + 1);
        const sy1 = Math.min(maxY, sy + 1);
        const gx = x0 < 0 || x0 >= maxX ? 0 : fx;
        const gy = y0 < 0 || y0 >= maxY ? 0 : fy;
        const top = scratch[sy * width + sx] * (1 - gx) + scratch[sy * width + sx1] * gx;
        const bottom = scratch[sy1 * width + sx] * (1 - gx) + scratch[sy1 * width + sx1] * gx;
        value = top + (bottom - top) * gy;
      }
      // The cubic kernel overshoots at edges: clamp (a Uint8Array store wraps), then round.
      plane[row + i] = value <= 0 ? 0 : value >= 255 ? 255 : value + 0.5;
    }
  }
}
