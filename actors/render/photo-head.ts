/**
 * Head motion of a photo avatar: the head (face box grown to take in hair and neck) turns a little about the neck
 * and moves a few pixels, feathered to nothing at the edge of an ellipse around it, so the background and
 * shoulders stay put. While silent it drifts slowly; while speaking it bobs and tilts with the phrase's loudness
 * and nods on emphasis, as `rt_head` does (`renderers/rt_head.ts`), only smaller: a photo has no back of the
 * head to show, and a larger turn bends the feathered ring visibly.
 *
 * While the user speaks it listens (`request.attention`, `actors/attention.ts`): the drift is held and the head nods at
 * the user's pauses; while an answer is awaited it glances aside or up with a slight tilt. Everything here is scaled by
 * the session's `motion` (`request.motion`): at 0 the head stays where the photo has it, and only blinks and the mouth
 * move.
 *
 * The motion is a pure function of the frame index, the request's prosody and attention and its `motion` (never of the
 * mouth pose), so the
 * same request with closed lips is the frame's own moved rest face: what a speaking frame is compared with when
 * its mouth is judged (the artefact measures compare outside the mouth–jaw region against that frame, not against
 * the unmoved photo). Every oscillation starts at zero, so frame 0 of silence is the photo as it is.
 *
 * Applied per frame to the finished I420 frame (mouth and eyelids already laid), in place: one resampling of the
 * head ellipse, luma with a Catmull-Rom kernel (bilinear softened the face on every half-pixel offset and made
 * its texture shimmer as the head moved), chroma bilinear.
 */
import { SILENT_PROSODY, speechEmphasis } from './prosody.ts';
import { LISTEN_GAZE_HOLD, NO_ATTENTION, attentionMovesHead, type AttentionPose } from '../attention.ts';
import { motionScale } from './motion.ts';
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
/**
 * Attention, in the same units: a listener's nod at the user's pause (4 px on the astronaut, a little more than a
 * stressed syllable's), and thinking's glance aside (3 px) or up (2.5 px) with a tilt of 2°: enough to read as a turn
 * of the head at a viewer, whose decoded frames alone move a still face's landmarks by ~1 px.
 */
const LISTEN_NOD = 0.04;
const THINK_LOOK_X = 0.03;
const THINK_LOOK_UP = 0.025;
const THINK_TILT_DEG = 2;
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

/**
 * The head's pose at this frame: idle drift (held while listening), speech motion from the request's prosody, a nod or a
 * glance from its attention; all of it scaled by the request's `motion`.
 */
export function photoHeadPose(request: FrameRequest, fps: number, faceHeight: number): HeadPose {
  const { frameIdx } = request;
  const prosody = request.prosody ?? SILENT_PROSODY;
  const attention = request.attention ?? NO_ATTENTION;
  const emphasis = speechEmphasis(prosody);
  const scale = faceHeight * motionScale(request.motion);
  const hold = 1 - LISTEN_GAZE_HOLD * attention.listening;
  const dx =
    scale *
    (hold * IDLE_DRIFT_X * oscillate(frameIdx, fps, 5.3) +
      SPEECH_DRIFT_X * prosody.slow * oscillate(frameIdx, fps, 3.1) +
      THINK_LOOK_X * attention.lookX);
  const dy =
    scale *
    (hold * IDLE_DRIFT_Y * oscillate(frameIdx, fps, 7.1) +
      SPEECH_BOB * prosody.slow * oscillate(frameIdx, fps, 1.1) +
      EMPHASIS_NOD * emphasis +
      LISTEN_NOD * attention.nod +
      THINK_LOOK_UP * attention.lookY);
  // No tilt at rest: silence's drift is a pure shift, so its few positions are cached (`PhotoHead.applyResting`).
  const tilt =
    DEG *
    motionScale(request.motion) *
    (SPEECH_TILT_DEG * prosody.slow * oscillate(frameIdx, fps, 2.3) + THINK_TILT_DEG * attention.tilt);
  return { dx, dy, tilt };
}

/**
 * A nod or a glance alone, without the idle drift: what a video avatar's head does on top of its loop (the loop moves
 * the head by itself), scaled by the request's `motion`.
 */
export function attentionHeadPose(
  attention: AttentionPose | undefined,
  motion: number | undefined,
  faceHeight: number,
): HeadPose {
  const a = attention ?? NO_ATTENTION;
  const scale = faceHeight * motionScale(motion);
  return {
    dx: scale * THINK_LOOK_X * a.lookX,
    dy: scale * (LISTEN_NOD * a.nod + THINK_LOOK_UP * a.lookY),
    tilt: DEG * motionScale(motion) * THINK_TILT_DEG * a.tilt,
  };
}

interface PlaneRegion {
  x: number;
  y: number;
  width: number;
  height: number;
  /** How rigidly each pixel of the region moves with the head, 0..1, row-major. */
  weight: Float32Array;
  /** Per row, the first and one past the last column of nonzero weight (the ellipse is convex: one run per row). */
  rowStart: Int32Array;
  rowEnd: Int32Array;
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
    return (
      !request.speaking &&
      prosody.fast < RESTING_PROSODY &&
      prosody.slow < RESTING_PROSODY &&
      !attentionMovesHead(request.attention)
    );
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

  /** Moves the head of `frame` to `pose`, in place (a video avatar's nod on top of its loop). */
  applyPose(frame: I420Frame, pose: HeadPose): void {
    if (frame.width !== this.width || frame.height !== this.height) return;
    this.warp(frame, pose);
  }

  /** The face height poses are measured in (`attentionHeadPose`). */
  get faceSize(): number {
    return this.faceHeight;
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
  for (let j = 0; j < r.height; j++)
    out.set(plane.subarray((r.y + j) * stride + r.x, (r.y + j) * stride + r.x + r.width), j * r.width);
  return out;
}

function paste(plane: Uint8Array, stride: number, r: PlaneRegion, pixels: Uint8Array): void {
  for (let j = 0; j < r.height; j++)
    plane.set(pixels.subarray(j * r.width, (j + 1) * r.width), (r.y + j) * stride + r.x);
}

function region(
  centreX: number,
  centreY: number,
  radiusX: number,
  radiusY: number,
  planeWidth: number,
  planeHeight: number,
  scale: number,
): PlaneRegion {
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
  const rowStart = new Int32Array(height);
  const rowEnd = new Int32Array(height);
  for (let j = 0; j < height; j++) {
    let first = 0;
    let last = width;
    while (first < width && weight[j * width + first] <= 0) first++;
    while (last > first && weight[j * width + last - 1] <= 0) last--;
    rowStart[j] = first;
    rowEnd[j] = last;
  }
  return { x: x0, y: y0, width, height, weight, rowStart, rowEnd, scratch: new Uint8Array(width * height) };
}

/**
 * Sub-pixel phases of the resampling kernels: a position is rounded to 1/`PHASES` px (0.016 px, far below what
 * a viewer sees) so the kernel weights come from a table instead of a cubic polynomial per pixel.
 */
const PHASES = 64;
/** Fixed-point scale of one kernel's weights (each phase's four Catmull-Rom taps sum to exactly this). */
const KERNEL_BITS = 7;
const KERNEL_ONE = 1 << KERNEL_BITS;
/** Rounding of the two-pass (x then y) fixed-point sum back to a pixel value. */
const CUBIC_SHIFT = 2 * KERNEL_BITS;
const CUBIC_HALF = 1 << (CUBIC_SHIFT - 1);
/** Rounding of the two-pass bilinear sum (weights in 1/`PHASES`) back to a pixel value. */
const BILINEAR_SHIFT = 2 * Math.log2(PHASES);
const BILINEAR_HALF = 1 << (BILINEAR_SHIFT - 1);
/** Added before `| 0` so a position a few px left of / above the region truncates like `Math.floor`. */
const FLOOR_BIAS = 16;

/** Catmull-Rom taps per phase, four Int32 per phase (PHASES + 1 phases: a fraction that rounds up to 1). */
const CUBIC_TAPS = (() => {
  const taps = new Int32Array((PHASES + 1) * 4);
  for (let p = 0; p <= PHASES; p++) {
    const f = p / PHASES;
    const f2 = f * f;
    const f3 = f2 * f;
    const a = Math.round(KERNEL_ONE * 0.5 * (-f3 + 2 * f2 - f));
    const c = Math.round(KERNEL_ONE * 0.5 * (-3 * f3 + 4 * f2 + f));
    const d = Math.round(KERNEL_ONE * 0.5 * (f3 - f2));
    taps.set([a, KERNEL_ONE - a - c - d, c, d], p * 4);
  }
  return taps;
})();

/**
 * Backward mapping: a pixel at p shows the pre-warp pixel at p − w(p)·(R(θ)(p − c) + c − p + t), c the neck.
 * The weight is taken at the destination (the motion is small, so it differs from the exact inverse by a
 * fraction of a pixel in the feather ring only). Luma is sampled with Catmull-Rom, chroma bilinearly, both in
 * fixed point from per-phase weight tables; only each row's run of nonzero weight is visited, and the loop is
 * written out (a sampler passed as a function cost ~15× more per pixel).
 */
function warpPlane(
  plane: Uint8Array,
  stride: number,
  r: PlaneRegion,
  pose: HeadPose,
  pivotX: number,
  pivotY: number,
  scale: number,
  cubic: boolean,
): void {
  const { scratch, weight, width, height, rowStart, rowEnd } = r;
  for (let j = 0; j < height; j++)
    scratch.set(plane.subarray((r.y + j) * stride + r.x, (r.y + j) * stride + r.x + width), j * width);
  const cosMinus1 = Math.cos(pose.tilt) - 1;
  const sin = Math.sin(pose.tilt);
  const cx = pivotX * scale;
  const cy = pivotY * scale;
  const tx = pose.dx * scale;
  const ty = pose.dy * scale;
  const maxX = width - 1;
  const maxY = height - 1;
  const taps = CUBIC_TAPS;
  for (let j = 0; j < height; j++) {
    const py = r.y + j + 0.5 - cy;
    const row = (r.y + j) * stride + r.x;
    const rowMoveX = -sin * py + tx;
    const rowMoveY = cosMinus1 * py + ty;
    const end = rowEnd[j];
    for (let i = rowStart[j]; i < end; i++) {
      const w = weight[j * width + i];
      const px = r.x + i + 0.5 - cx;
      const x = i - w * (cosMinus1 * px + rowMoveX) + FLOOR_BIAS;
      const y = j - w * (sin * px + rowMoveY) + FLOOR_BIAS;
      const xi = x | 0;
      const yi = y | 0;
      const x0 = xi - FLOOR_BIAS;
      const y0 = yi - FLOOR_BIAS;
      const phaseX = ((x - xi) * PHASES + 0.5) | 0;
      const phaseY = ((y - yi) * PHASES + 0.5) | 0;
      let value: number;
      if (cubic && x0 >= 1 && y0 >= 1 && x0 + 2 <= maxX && y0 + 2 <= maxY) {
        const tx4 = phaseX << 2;
        const ty4 = phaseY << 2;
        const ax = taps[tx4];
        const bx = taps[tx4 + 1];
        const cxw = taps[tx4 + 2];
        const dxw = taps[tx4 + 3];
        // `| 0` on every sum: integer-only arithmetic (a product of 0 and a negative is -0 to V8, which deoptimised).
        let o = (y0 - 1) * width + x0 - 1;
        const h0 = (ax * scratch[o] + bx * scratch[o + 1] + cxw * scratch[o + 2] + dxw * scratch[o + 3]) | 0;
        o += width;
        const h1 = (ax * scratch[o] + bx * scratch[o + 1] + cxw * scratch[o + 2] + dxw * scratch[o + 3]) | 0;
        o += width;
        const h2 = (ax * scratch[o] + bx * scratch[o + 1] + cxw * scratch[o + 2] + dxw * scratch[o + 3]) | 0;
        o += width;
        const h3 = (ax * scratch[o] + bx * scratch[o + 1] + cxw * scratch[o + 2] + dxw * scratch[o + 3]) | 0;
        const sum = (taps[ty4] * h0 + taps[ty4 + 1] * h1 + taps[ty4 + 2] * h2 + taps[ty4 + 3] * h3) | 0;
        // The cubic kernel overshoots at edges: clamp (a Uint8Array store wraps).
        value = (sum + CUBIC_HALF) >> CUBIC_SHIFT;
        plane[row + i] = value < 0 ? 0 : value > 255 ? 255 : value;
      } else {
        // Bilinear (chroma, and luma at the region's edge where the cubic kernel would reach outside it).
        const sx = x0 < 0 ? 0 : x0 > maxX ? maxX : x0;
        const sy = y0 < 0 ? 0 : y0 > maxY ? maxY : y0;
        const sx1 = sx < maxX ? sx + 1 : maxX;
        const sy1 = sy < maxY ? sy + 1 : maxY;
        const gx = x0 < 0 || x0 >= maxX ? 0 : phaseX;
        const gy = y0 < 0 || y0 >= maxY ? 0 : phaseY;
        const top = (scratch[sy * width + sx] * (PHASES - gx) + scratch[sy * width + sx1] * gx) | 0;
        const bottom = (scratch[sy1 * width + sx] * (PHASES - gx) + scratch[sy1 * width + sx1] * gx) | 0;
        plane[row + i] = (top * (PHASES - gy) + bottom * gy + BILINEAR_HALF) >> BILINEAR_SHIFT;
      }
    }
  }
}
