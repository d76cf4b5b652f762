/**
 * A video avatar's mouth without harvested mouths: each speaking frame warps the loop frame it shows along that
 * frame's own tracked lips (`face_track.json`), in I420, rather than laying one pose made on the loop's first frame
 * over every frame (that pose's lips, teeth and jaw edge sat where the first frame had them: a split upper lip, a
 * second row of teeth, and dotted seams along the jaw where its change-thresholded alpha met the other frame).
 *
 * The geometry follows the person: the upper lip and everything above the frame's own lower inner lip (its upper teeth,
 * if the frame shows them) lift a little; the lower lip and the chin drop
 * with the jaw, the drop fading smoothly to nothing at the cheeks and the neck, so the warp's edge adds no step; the
 * gap the two open between them is painted as the inside of a mouth (throat shading, and upper teeth only where
 * the frame shows none of its own: one row of teeth, ever). Outside the warp box the frame is untouched.
 */
import { planes } from './i420.ts';
import { smoothstep } from './idle-motion.ts';
import type { I420Frame, MouthAnimation, MouthPose, Point } from './types.ts';

/** Maximum jaw drop as a fraction of mouth width (a wide-open "ah" at conversational effort). */
const MAX_JAW_DROP = 0.3;
/** The upper lip rises by this fraction of the jaw drop (the upper jaw does not move; the lip lifts off the teeth). */
const UPPER_LIFT = 0.18;
/** The opening's half width is at least this (mouth widths), whatever the tracked inner corners say. */
const MIN_OPENING_HALF_WIDTH = 0.36;
/** How much `wide` spreads and `round` narrows the lips horizontally (fraction of their width). */
const WIDE_SPREAD = 0.14;
const ROUND_NARROWING = 0.22;
/** Extent (squared, mouth widths) of the horizontal spread around the mouth centre. */
const LIP_ZONE_WIDTH = 0.36;
const LIP_ZONE_HEIGHT = 0.12;
/**
 * The warped region around the mouth centre, mouth widths: every displacement has faded to zero before its edge
 * (the jaw at |u| 1.25, the upper lip 0.55 above the midline, the chin's drop 1.6 below it).
 */
const REGION = { left: -1.35, right: 1.35, top: -0.75, bottom: 1.75 };
/** The upper lip's lift fades out over its own height (outer edge to inner), within these bounds (mouth widths; the most without outer points). */
const MIN_LIFT_REACH = 0.06;
const MAX_LIFT_REACH = 0.4;
/** …and is gone this far up that height: the outline's own anti-aliased pixels and a tracked outline a pixel off stay put. */
const LIFT_FADE = 0.7;
/** The jaw's drop is full within `flat` mouth widths of the mouth centre and gone at `end`. */
const JAW_WINDOW = { flat: 0.25, end: 0.9 };
/** Columns of the own-lip table per pixel. */
const COLUMNS_PER_PX = 4;
/** Mouth widths above the jaws' parting beyond which nothing moves (the lift's reach at most, plus the lift itself). */
const UNMOVED_ABOVE = MAX_LIFT_REACH + 0.12;
/** Where the jaw parts within the frame's own lip gap: this fraction of the gap above its lower lip. */
const SPLIT_ABOVE_LOWER_LIP = 0;
/** How far (px) the gap's shading reaches over the lower lip's inner edge. */
const LOWER_EDGE_SHADOW_PX = 2;
/** Visible height of painted upper teeth at the widest opening, mouth widths. */
const UPPER_TEETH_MAX = 0.09;
/** Inside of a mouth (Y, U, V): lit near the lips, dark towards the throat; teeth. */
const MOUTH_EDGE = yuv(92, 34, 38);
const MOUTH_DEEP = yuv(24, 8, 10);
const TEETH = yuv(226, 216, 200);

/** The frame's own lips in the mouth's upright frame: piecewise-linear edges over u (pixels from the mouth centre). */
export interface OwnLips {
  /** Inner-lip points (u, v) of the upper edge, left corner to right corner, and of the lower edge. */
  upper: Point[];
  lower: Point[];
}

/** Everything one speaking frame's warp needs, fixed for the frame. */
interface WarpGeometry {
  cx: number;
  cy: number;
  cos: number;
  sin: number;
  mw: number;
  /** The own lips per column of u (every 1/`COLUMNS_PER_PX` px from `from`): upper inner edge, and where the jaws part. */
  columns: { from: number; upper: Float64Array; mid: Float64Array; lipHeight: Float64Array };
  halfWidth: number;
  jawDrop: number;
  upperLift: number;
  spread: number;
  teeth: number;
}

/** A pose's opening as the warp adds it, pixels: jaw drop at the mouth centre. */
export function jawDropOf(pose: MouthPose, mouthWidth: number): number {
  return pose.open * MAX_JAW_DROP * mouthWidth * (1 + 0.3 * pose.round - 0.25 * pose.wide);
}

/**
 * Warps `frame` (a copy of `source`, the loop frame it shows) in place to `pose` along `face`, the frame's tracked
 * face. A closed pose leaves the frame as it is.
 */
export function warpLoopFrame(frame: I420Frame, source: I420Frame, face: MouthAnimation, pose: MouthPose): void {
  const geometry = geometryOf(face, pose);
  if (!geometry) return;
  const dst = planes(frame);
  const src = planes(source);
  warpPlane(dst.y, src.y, frame.width, frame.height, 1, 0, geometry);
  warpPlane(dst.u, src.u, dst.cw, dst.ch, 2, 1, geometry);
  warpPlane(dst.v, src.v, dst.cw, dst.ch, 2, 2, geometry);
}

/**
 * A closed lip contour (upright: u right, v down) as its upper and lower edges, each from the leftmost point to the
 * rightmost sorted by u: iBUG order (48–59, 60–67) or any other order around the contour.
 */
export function lipEdges(contour: Point[]): OwnLips {
  let left = 0;
  let right = 0;
  contour.forEach((p, i) => {
    if (p.x < contour[left].x) left = i;
    if (p.x > contour[right].x) right = i;
  });
  const path = (from: number, to: number): Point[] => {
    const out: Point[] = [];
    for (let i = from; ; i = (i + 1) % contour.length) {
      out.push(contour[i]);
      if (i === to) return out;
    }
  };
  const meanV = (points: Point[]) => points.reduce((sum, p) => sum + p.y, 0) / points.length;
  const byU = (points: Point[]) => [...points].sort((a, b) => a.x - b.x);
  const one = path(left, right);
  const other = path(right, left);
  return meanV(one) <= meanV(other) ? { upper: byU(one), lower: byU(other) } : { upper: byU(other), lower: byU(one) };
}

/** The mouth's roll: the angle of the line through its outer corners (leftmost and rightmost outer-lip points), radians. */
export function lipRoll(face: MouthAnimation): number {
  const lip = face.outer_lip?.length >= 3 ? face.outer_lip : face.inner_lip;
  const left = lip.reduce((a, b) => (b.x < a.x ? b : a));
  const right = lip.reduce((a, b) => (b.x > a.x ? b : a));
  return Math.atan2(right.y - left.y, right.x - left.x);
}

/** The mouth's upright frame: centred on `centre`, turned by `roll`; `toUpright` maps a frame point into it. */
export function uprightAt(centre: Point, roll: number): { cx: number; cy: number; cos: number; sin: number; toUpright: (p: Point) => Point } {
  const cos = Math.cos(roll);
  const sin = Math.sin(roll);
  const { x: cx, y: cy } = centre;
  return { cx, cy, cos, sin, toUpright: (p) => ({ x: (p.x - cx) * cos + (p.y - cy) * sin, y: -(p.x - cx) * sin + (p.y - cy) * cos }) };
}

function geometryOf(face: MouthAnimation, pose: MouthPose): WarpGeometry | null {
  const mw = face.mouth_width;
  if (!(mw > 4) || !face.inner_lip || face.inner_lip.length < 8 || pose.open <= 0) return null;
  const { toUpright, ...upright } = uprightAt(face.mouth_center, lipRoll(face));
  const { upper, lower } = lipEdges(face.inner_lip.map(toUpright));
  const spread = WIDE_SPREAD * pose.wide - ROUND_NARROWING * pose.round;
  const jawDrop = jawDropOf(pose, mw);
  return {
    ...upright,
    mw,
    columns: columnsOf({ upper, lower }, outerTopOf(face, toUpright), mw),
    halfWidth: Math.max(MIN_OPENING_HALF_WIDTH * mw, (upper[upper.length - 1].x - upper[0].x) / 2) * (1 + spread),
    jawDrop,
    upperLift: UPPER_LIFT * jawDrop * (1 + 0.5 * pose.round),
    spread,
    teeth: UPPER_TEETH_MAX * mw * smoothstep(0.05, 0.5, pose.open) * (1 - 0.4 * pose.round),
  };
}

/**
 * The own lips per column. The jaws part just above the frame's own lower inner lip, so what its opening shows (upper
 * teeth, mostly) stays with the upper lip as one row, and only the lower lip and what hangs below goes down.
 */
/** The outer upper lip's edge (upright), sorted by u; null without outer-lip points. */
function outerTopOf(face: MouthAnimation, toUpright: (p: Point) => Point): Point[] | null {
  return face.outer_lip && face.outer_lip.length >= 6 ? lipEdges(face.outer_lip.map(toUpright)).upper : null;
}

function columnsOf(own: OwnLips, outerTop: Point[] | null, mw: number): WarpGeometry['columns'] {
  const from = REGION.left * mw - 1;
  const count = Math.ceil((REGION.right - REGION.left) * mw * COLUMNS_PER_PX) + 2 * COLUMNS_PER_PX + 1;
  const upper = new Float64Array(count);
  const mid = new Float64Array(count);
  const lipHeight = new Float64Array(count);
  for (let i = 0; i < count; i++) {
    const u = from + i / COLUMNS_PER_PX;
    upper[i] = edgeAt(own.upper, u);
    const lower = edgeAt(own.lower, u);
    mid[i] = lower - SPLIT_ABOVE_LOWER_LIP * Math.max(0, lower - upper[i]);
    lipHeight[i] = Math.min(MAX_LIFT_REACH, Math.max(MIN_LIFT_REACH, outerTop ? (mid[i] - edgeAt(outerTop, u)) / mw : MAX_LIFT_REACH)) * mw;
  }
  return { from, upper, mid, lipHeight };
}

/** A lip edge's v at `u` (linear between points sorted by u, held beyond the corners). */
export function edgeAt(edge: Point[], u: number): number {
  if (u <= edge[0].x) return edge[0].y;
  for (let i = 1; i < edge.length; i++) {
    const a = edge[i - 1];
    const b = edge[i];
    if (u <= b.x) return b.x > a.x ? a.y + ((b.y - a.y) * (u - a.x)) / (b.x - a.x) : b.y;
  }
  return edge[edge.length - 1].y;
}

/**
 * The opening's profile over its half width: 1 at the middle, 0 at the corners. The lower lip drops by it as the gap
 * opens by it, so lip and gap stay together; its slope stays finite at the corner (a pointed lens's is not), so
 * neighbouring columns of lip there do not shear apart into a red streak under the corner.
 */
function lensProfile(lateral: number): number {
  return lateral < 1 ? LENS_PROFILE[Math.round(lateral * LENS_PROFILE_STEPS)] : 0;
}
const LENS_PROFILE_STEPS = 512;
const LENS_PROFILE = Float64Array.from({ length: LENS_PROFILE_STEPS + 1 }, (_, i) => Math.pow(1 - (i / LENS_PROFILE_STEPS) ** 3, 1.3));

/**
 * The plane pixels (`scale` frame pixels each) covering an upright box (pixels from the mouth centre `cx, cy`, turned
 * by the roll `cos, sin`), clipped to the plane.
 */
export function planeBoxOf(
  at: { cx: number; cy: number; cos: number; sin: number },
  box: { left: number; right: number; top: number; bottom: number },
  scale: number,
  width: number,
  height: number,
): { x0: number; x1: number; y0: number; y1: number } {
  let left = Infinity, right = -Infinity, top = Infinity, bottom = -Infinity;
  for (const u of [box.left, box.right]) {
    for (const v of [box.top, box.bottom]) {
      const x = at.cx + u * at.cos - v * at.sin;
      const y = at.cy + u * at.sin + v * at.cos;
      [left, right, top, bottom] = [Math.min(left, x), Math.max(right, x), Math.min(top, y), Math.max(bottom, y)];
    }
  }
  return {
    x0: Math.max(0, Math.floor(left / scale) - 1),
    x1: Math.min(width - 1, Math.ceil(right / scale) + 1),
    y0: Math.max(0, Math.floor(top / scale) - 1),
    y1: Math.min(height - 1, Math.ceil(bottom / scale) + 1),
  };
}

/**
 * One plane (`scale` frame pixels per plane pixel; `channel` 0 Y, 1 U, 2 V): every pixel of the region maps back
 * to the source plane (bilinear), except the opening's gap, painted.
 */
function warpPlane(dst: Uint8Array, src: Uint8Array, width: number, height: number, scale: number, channel: 0 | 1 | 2, g: WarpGeometry): void {
  const { cx, cy, cos, sin, mw } = g;
  const { x0, x1, y0, y1 } = planeBoxOf(g, { left: REGION.left * mw, right: REGION.right * mw, top: REGION.top * mw, bottom: REGION.bottom * mw }, scale, width, height);
  // Plane pixel centre → frame coordinates: chroma sample k covers frame pixels 2k and 2k+1.
  const offset = scale === 1 ? 0 : 0.5;
  const edge = channel === 0 ? MOUTH_EDGE.y : channel === 1 ? MOUTH_EDGE.u : MOUTH_EDGE.v;
  const deep = channel === 0 ? MOUTH_DEEP.y : channel === 1 ? MOUTH_DEEP.u : MOUTH_DEEP.v;
  const teeth = channel === 0 ? TEETH.y : channel === 1 ? TEETH.u : TEETH.v;
  const shade = channel === 0;
  for (let py = y0; py <= y1; py++) {
    for (let px = x0; px <= x1; px++) {
      const fx = px * scale + offset - cx;
      const fy = py * scale + offset - cy;
      const u = fx * cos + fy * sin;
      const v = -fx * sin + fy * cos;
      if (u < REGION.left * mw || u > REGION.right * mw || v < REGION.top * mw || v > REGION.bottom * mw) continue;
      const an = u / mw;
      const column = Math.round((u - g.columns.from) * COLUMNS_PER_PX);
      const upper = g.columns.upper[column];
      const mid = g.columns.mid[column];
      const lipHeight = g.columns.lipHeight[column];
      // Nothing moves this far above the lips (the upper lip's lift has faded out).
      if ((mid - v) / mw > UNMOVED_ABOVE) continue;
      const lipZone = g.spread === 0 ? 0 : Math.exp(-(an * an) / LIP_ZONE_WIDTH - ((v - mid) / mw) ** 2 / LIP_ZONE_HEIGHT) * (1 - smoothstep(1.0, 1.3, Math.abs(an)));
      const us = u - u * (1 - 1 / (1 + g.spread)) * lipZone;
      const profile = lensProfile(Math.abs(us) / g.halfWidth);
      const drop = g.jawDrop * profile;
      const lift = g.upperLift * profile;
      // The jaw drops under the mouth and not at the face's sides: there its outline meets hair or background.
      const jawWindow = g.jawDrop * (1 - smoothstep(JAW_WINDOW.flat, JAW_WINDOW.end, Math.abs(an)));
      // Below the midline: lower lip, lower teeth and chin drop (fixed point: the drop depends on where the pixel comes from).
      let vs = v - drop;
      for (let k = 0; k < 3; k++) {
        const below = (vs - mid) / mw;
        vs = v - (drop + (jawWindow - drop) * smoothstep(0.05, 0.6, below)) * (1 - smoothstep(1.0, 1.6, below));
      }
      const gapTop = mid - lift;
      const gapBottom = mid + drop;
      if (vs < mid) {
        // Above the midline: the upper lip (and upper teeth) lift, fading out towards the nose.
        let up = v + lift;
        // The lift fades out within the upper lip itself: its outline against the skin above stays where it is (an
        // edge moved against smooth skin is a step where the warp ends).
        for (let k = 0; k < 2; k++) up = v + lift * (1 - smoothstep(0, LIFT_FADE * lipHeight, mid - up));
        vs = up < mid ? up : v < mid ? mid - 0.5 : mid + 0.5;
      }
      // The gap's lower edge reaches a little onto the lower lip, as the lip's own shadow: a tracked inner lip a pixel
      // off leaves no sliver of the frame's own teeth riding on it.
      const paint = drop > 0.3 && v > gapTop - 0.5 && v < gapBottom + LOWER_EDGE_SHADOW_PX ? Math.min(1, v - gapTop + 0.5, (gapBottom + LOWER_EDGE_SHADOW_PX - v) / LOWER_EDGE_SHADOW_PX) : 0;
      const sx = (cx + us * cos - vs * sin - offset) / scale;
      const sy = (cy + us * sin + vs * cos - offset) / scale;
      let value = bilinear(src, width, height, sx, sy);
      if (paint > 0) {
        const depthPx = Math.min(v - gapTop, gapBottom - v);
        const depth = smoothstep(0, 1, depthPx / Math.max(1.5, 0.5 * (drop + lift)));
        let inside = edge + (deep - edge) * depth;
        // Upper teeth hang from the lifted lip where the frame shows none of its own above its midline.
        const ownUpperInterior = Math.max(0, mid - upper);
        const teethHeight = Math.max(0, g.teeth * Math.pow(profile, 0.35) - ownUpperInterior);
        const teethCover = Math.min(1, Math.max(0, gapTop + teethHeight - v + 0.5)) * (1 - smoothstep(0.6, 0.8, Math.abs(us) / g.halfWidth));
        if (teethCover > 0 && teethHeight > 0.5) {
          const lit = shade ? 0.8 + 0.2 * Math.min(1, Math.max(0, (v - gapTop) / 1.5)) : 1;
          inside += ((shade ? (teeth - 16) * lit + 16 : teeth) - inside) * teethCover;
        }
        value += (inside - value) * paint;
      }
      dst[py * width + px] = value < 0 ? 0 : value > 255 ? 255 : (value + 0.5) | 0;
    }
  }
}

function bilinear(plane: Uint8Array, width: number, height: number, x: number, y: number): number {
  const cx = Math.min(width - 1, Math.max(0, x));
  const cy = Math.min(height - 1, Math.max(0, y));
  const x0 = Math.floor(cx);
  const y0 = Math.floor(cy);
  const x1 = Math.min(width - 1, x0 + 1);
  const y1 = Math.min(height - 1, y0 + 1);
  const fx = cx - x0;
  const fy = cy - y0;
  const top = plane[y0 * width + x0] * (1 - fx) + plane[y0 * width + x1] * fx;
  const bottom = plane[y1 * width + x0] * (1 - fx) + plane[y1 * width + x1] * fx;
  return top + (bottom - top) * fy;
}

function yuv(r: number, g: number, b: number): { y: number; u: number; v: number } {
  return { y: 16 + 0.2568 * r + 0.5041 * g + 0.0979 * b, u: 128 - 0.1482 * r - 0.291 * g + 0.4392 * b, v: 128 + 0.4392 * r - 0.3678 * g - 0.0714 * b };
}
