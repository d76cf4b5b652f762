/**
 * A video avatar's mouth without harvested mouths: each speaking frame warps the loop frame it shows along that
 * frame's own tracked lips (`face_track.json`), in I420, rather than laying one pose made on the loop's first frame
 * over every frame (that pose's lips, teeth and jaw edge sat where the first frame had them: a split upper lip, a
 * second row of teeth, and dotted seams along the jaw where its change-thresholded alpha met the other frame).
 *
 * The geometry follows the person: the upper lip and everything above the frame's own lower inner lip (its upper teeth,
 * if the frame shows them) lift a little; the lower lip and the chin drop
 * with the jaw, the drop fading smoothly to nothing at the cheeks and the neck, so the warp's edge adds no step; the
 * gap the two open between them is painted as the inside of a mouth by the photo's painter (`photo-mouth.ts`: colours
 * read off the frame's own lips and teeth, throat shading, a tongue, and upper teeth only where the frame shows none
 * of its own: one row of teeth, ever), and the lower lip's wet inner edge fades into the lip below it. The upper lip's lift fades out within the lip, and strong
 * edges outside the lips (the face's outline against hair, a chin against a collar) and what lies below them stay put
 * (`clip-freedom.ts`): moved by a fraction of a pixel, such an edge steps by tens of levels against the unmoved pixels
 * beside it. Outside the warp box the frame is untouched.
 */
import { i420Size, i420ToRgba, planes, rgbToYuv } from './i420.ts';
import { freedomAt, freedomOf, type FreedomGrid } from './clip-freedom.ts';
import { smoothstep } from './idle-motion.ts';
import {
  lowerLipEdge,
  mouthPalette,
  paintInside,
  tongueShown,
  teethReachOf,
  type MouthPalette,
  type OpeningColumn,
  type Rgb,
} from './photo-mouth.ts';
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
/**
 * The upper lip's lift (with what the frame's own opening shows under it) fades out within the lip, and is gone this
 * far up its height (inner edge to outline): the outline stays where it is, since an outline moved against unmoved
 * skin is a step of tens of levels where the warp ends (`sun`'s 37 px mouth has a 4 px upper lip). So that the lip is
 * compressed and not folded over that height, the lift is at most `MAX_LIFT_OF_LIP` of it.
 */
const LIFT_FADE = 0.5;
const MAX_LIFT_OF_LIP = 0.2;
/** The upper lip's height (inner edge to outline) where the outline is not tracked, and the most assumed, mouth widths. */
const MIN_LIFT_REACH = 0.06;
const MAX_LIFT_REACH = 0.4;
/** The jaw's drop is full within `flat` mouth widths of the mouth centre and gone at `end`. */
const JAW_WINDOW = { flat: 0.25, end: 0.9 };
/** How far (mouth widths) below the tracked lower inner lip the frame's own teeth part with the upper jaw, and the
 * smoothing of that parting along the mouth (mouth widths to either side, about a tooth): `partBelowOwnTeeth`. */
const OWN_TEETH_BELOW = 0.1;
const OWN_TEETH_SMOOTH = 0.06;
/** A tooth in the frame: bright and nearly neutral (lips and skin are red: V well above 128). */
const OWN_TOOTH = { minLuma: 150, maxRed: 10, maxBlue: 16 };
/** Columns of the own-lip table per pixel. */
const COLUMNS_PER_PX = 4;
/** Mouth widths above the upper inner lip beyond which nothing moves (the lip, the lift's reach, a margin). */
const UNMOVED_ABOVE = MAX_LIFT_REACH + 0.05;
/** Where the jaw parts within the frame's own lip gap: this fraction of the gap above its lower lip. */
const SPLIT_ABOVE_LOWER_LIP = 0;
/**
 * How far (mouth widths, at least `MIN_LIP_EDGE_PX`) the lower lip's wet inner edge (`lowerLipEdge`) reaches down the
 * lip from the opening, fading into the lip's own pixels.
 */
const LIP_EDGE = 0.045;
const MIN_LIP_EDGE_PX = 2;
/** The lip's edge band is kept as thick across a steep edge as across a level one, up to this slant. */
const MAX_EDGE_SLANT = 3;
/** The inside and the lip's edge blend over this many px to either side of the opening's lower edge. */
const LIP_EDGE_BLEND_PX = 1.25;
/**
 * The map's fixed-point iterations (the jaw's drop, the lip's lift: each depends on where the point comes from) stop
 * once a step moves the source by less than this (px): under the lips and in the opening the first step settles.
 */
const FIXED_POINT_PX = 0.01;
/** Where the gap is opened by less than this (px, towards the corners) its paint fades out with it. */
const CORNER_FADE_PX = 3;
/** Visible height of painted upper teeth at the widest opening, mouth widths. */
const UPPER_TEETH_MAX = 0.09;
/**
 * The loop frame's lip and tooth colours are read (`mouthPalette`) on a crop this far (mouth widths) around its inner
 * lips: the lip samples reach 0.1 mouth widths past them, the teeth lie between them.
 */
const PALETTE_MARGIN = 0.3;

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
  /** Beyond this |u| (pixels) the opening and its lips' parting are gone. */
  nearHalfWidth: number;

  jawDrop: number;
  upperLift: number;
  spread: number;
  teeth: number;
  /**
   * The opening's column as `paintInside` takes it: what is fixed for the frame (the tongue shown, how far the upper
   * teeth reach sideways, the lip's lift, the mouth's width) set here, the point's own (its edges, where it lies
   * across, its teeth) filled in per painted point.
   */
  inside: OpeningColumn;
  /** The lower lip's wet inner edge (`lowerLipEdge` of the palette): one colour for the frame. */
  lipEdgeColour: Rgb;
  /** How far the lower lip's inner edge is painted down the lip (px), across the edge; and per column of the own-lip
   * table, how much longer that is down the column where the opening's lower edge runs steeply (`MAX_EDGE_SLANT`). */
  lipEdgePx: number;
  bottomSlant: Float64Array;
  /** The loop frame's own lip and tooth colours, the inside is painted from (`paintInside`, as on a photo). */
  palette: MouthPalette;
  /** How freely each point may move (strong edges outside the lips stay put): `clip-freedom.ts`. */
  freedom: FreedomGrid;
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
  const geometry = geometryOf(face, pose, source);
  if (!geometry) return;
  const dst = planes(frame);
  const src = planes(source);
  warpPlanes([{ dst: dst.y, src: src.y, channel: 'y' }], frame.width, frame.height, 1, geometry);
  const chroma: PlaneInk[] = [
    { dst: dst.u, src: src.u, channel: 'u' },
    { dst: dst.v, src: src.v, channel: 'v' },
  ];
  warpPlanes(chroma, dst.cw, dst.ch, 2, geometry);
}

/**
 * A pixel the warp moves by more than this (px) belongs to what it changed (`warpMaskOf`): below it, a pixel's luma
 * moves by under 2 levels on any but the hardest edge, and the measure forgives an edge moved that little.
 */
const MASK_MOVED_PX = 0.02;

/**
 * What `warpLoopFrame(frame, source, face, pose)` changes, as the renderer knows it: 1 at every luma pixel its map moves
 * by more than `MASK_MOVED_PX` or paints (the opening), 0 elsewhere; null when the pose leaves the frame as it is. The
 * artefact measures take it as the composite (test/helpers/artefacts.ts): read off the frame alone, the composite of a
 * lip dropped 4 px over plain skin that moved with it unchanged ends on the moved lip's outline, and the outline steps
 * against the unmoved skin beside it by its whole contrast where the warp goes on fading for many pixels more.
 * The map as the frame gets it (on its grid, `warpPlanes`); for measuring, not for every frame.
 */
export function warpMaskOf(source: I420Frame, face: MouthAnimation, pose: MouthPose): Uint8Array | null {
  const geometry = geometryOf(face, pose, source);
  if (!geometry) return null;
  const { width, height } = source;
  const claim = new Uint8Array(width * height);
  const y = planes(source).y;
  const ink: PlaneInk = { dst: y.slice(), src: y, channel: 'y' };
  warpPlanes([ink], width, height, 1, geometry, claim);
  return claim;
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
export function uprightAt(
  centre: Point,
  roll: number,
): { cx: number; cy: number; cos: number; sin: number; toUpright: (p: Point) => Point } {
  const cos = Math.cos(roll);
  const sin = Math.sin(roll);
  const { x: cx, y: cy } = centre;
  return {
    cx,
    cy,
    cos,
    sin,
    toUpright: (p) => ({ x: (p.x - cx) * cos + (p.y - cy) * sin, y: -(p.x - cx) * sin + (p.y - cy) * cos }),
  };
}

function geometryOf(face: MouthAnimation, pose: MouthPose, source: I420Frame): WarpGeometry | null {
  const mw = face.mouth_width;
  if (!(mw > 4) || !face.inner_lip || face.inner_lip.length < 8 || pose.open <= 0) return null;
  const { toUpright, ...upright } = uprightAt(face.mouth_center, lipRoll(face));
  const { upper, lower } = lipEdges(face.inner_lip.map(toUpright));
  const spread = WIDE_SPREAD * pose.wide - ROUND_NARROWING * pose.round;
  const jawDrop = jawDropOf(pose, mw);
  const halfWidth = Math.max(MIN_OPENING_HALF_WIDTH * mw, (upper[upper.length - 1].x - upper[0].x) / 2) * (1 + spread);
  const columns = columnsOf({ upper, lower }, outerTopOf(face, toUpright), mw);
  partBelowOwnTeeth(columns, source, upright, mw, { from: lower[0].x, to: lower[lower.length - 1].x });
  const region = { left: REGION.left * mw, right: REGION.right * mw, top: REGION.top * mw, bottom: REGION.bottom * mw };
  const freedom = freedomOf(source, face, {
    ...upright,
    mw,
    box: planeBoxOf(upright, region, 1, source.width, source.height),
    partAt: (u) =>
      columns.mid[Math.min(columns.mid.length - 1, Math.max(0, Math.round((u - columns.from) * COLUMNS_PER_PX)))],
  });
  const upperLift = UPPER_LIFT * jawDrop * (1 + 0.5 * pose.round);
  const palette = paletteOf(source, face, upright, { upper, lower });
  const lipEdgeColour: Rgb = { r: 0, g: 0, b: 0 };
  lowerLipEdge(palette, lipEdgeColour);
  return {
    ...upright,
    mw,
    columns,
    freedom,
    halfWidth,
    // The lips' spread moves a column by at most this factor of its u (`lipZone` at 1).
    nearHalfWidth: halfWidth * Math.max(1, 1 / (1 - Math.abs(spread) / (1 + spread))) + 2 * MAP_CELL_PX.chroma,

    jawDrop,
    upperLift,
    spread,
    teeth: UPPER_TEETH_MAX * mw * smoothstep(0.05, 0.5, pose.open) * (1 - 0.4 * pose.round),
    inside: {
      top: 0,
      bottom: 0,
      lateral: 0,
      dx: 0,
      teeth: 0,
      tongue: tongueShown(pose.open),
      teethReach: teethReachOf(pose.round),
      upperLift,
      mouthWidth: mw,
    },
    lipEdgeColour,
    lipEdgePx: Math.max(MIN_LIP_EDGE_PX, LIP_EDGE * mw),
    bottomSlant: bottomSlantOf(columns, mw, jawDrop, halfWidth, spread),
    palette,
  };
}

/**
 * The loop frame's own lip and tooth colours, read as a photo's are (`mouthPalette`) on an RGBA crop around its lips:
 * the lips on either side of its lower inner lip (`seamAt`; where the frame shows an opening of its own, the samples
 * above it fall in that opening and the lower lip's decide), its teeth between its inner lips.
 */
function paletteOf(
  source: I420Frame,
  face: MouthAnimation,
  upright: { cx: number; cy: number; cos: number; sin: number },
  own: OwnLips,
): MouthPalette {
  // A loop frame's tracked face is one object for as long as its loop is held: its palette is read once.
  const cached = palettes.get(face);
  if (cached && cached.buffer === source.data.buffer && cached.offset === source.data.byteOffset) return cached.palette;
  const palette = paletteRead(source, face, upright, own);
  palettes.set(face, { buffer: source.data.buffer, offset: source.data.byteOffset, palette });
  return palette;
}

/** Palettes read, by the tracked face they were read along (and the frame pixels they were read on). */
const palettes = new WeakMap<MouthAnimation, { buffer: ArrayBufferLike; offset: number; palette: MouthPalette }>();

function paletteRead(
  source: I420Frame,
  face: MouthAnimation,
  upright: { cx: number; cy: number; cos: number; sin: number },
  { upper, lower }: OwnLips,
): MouthPalette {
  const mw = face.mouth_width;
  const xs = face.inner_lip.map((p) => p.x);
  const ys = face.inner_lip.map((p) => p.y);
  const margin = PALETTE_MARGIN * mw;
  // Even corners: the crop's chroma samples are the frame's.
  const x0 = Math.max(0, Math.floor((Math.min(...xs) - margin) / 2) * 2);
  const y0 = Math.max(0, Math.floor((Math.min(...ys) - margin) / 2) * 2);
  const x1 = Math.min(source.width, Math.ceil(Math.max(...xs) + margin));
  const y1 = Math.min(source.height, Math.ceil(Math.max(...ys) + margin));
  const crop = cropOf(source, x0, y0, x1 - x0, y1 - y0);
  const image = { width: crop.width, height: crop.height, data: i420ToRgba(crop) };
  const { cx, cy, cos, sin } = upright;
  // An inner lip edge's row (crop pixels) in crop column x.
  const rowOf = (edge: Point[], x: number): number => {
    const u = (x + x0 - cx) / cos;
    return cy + u * sin + edgeAt(edge, u) * cos - y0;
  };
  // The lips closed as a photo's rest face has them (`closeLips`): above the lower inner lip each column shows what
  // lies its own opening higher, so the samples above the seam fall on the upper lip, not on the frame's teeth.
  const rest = { width: image.width, height: image.height, data: image.data.slice() };
  for (let x = 0; x < image.width; x++) {
    const seam = rowOf(lower, x);
    const gap = Math.max(0, Math.round(seam - rowOf(upper, x)));
    if (gap === 0) continue;
    for (let y = Math.min(image.height, Math.floor(seam)) - 1; y >= 0; y--) {
      const from = Math.max(0, y - gap);
      rest.data.copyWithin((y * image.width + x) * 4, (from * image.width + x) * 4, (from * image.width + x) * 4 + 4);
    }
  }
  const shift = (p: Point): Point => ({ x: p.x - x0, y: p.y - y0 });
  const local = { ...face, mouth_center: shift(face.mouth_center), inner_lip: face.inner_lip.map(shift) };
  return mouthPalette(image, rest, local, (x) => rowOf(lower, x));
}

/** A copy of the frame's rectangle at (x0, y0) (even), `width` × `height`. */
function cropOf(frame: I420Frame, x0: number, y0: number, width: number, height: number): I420Frame {
  const src = planes(frame);
  const data = new Uint8Array(i420Size(width, height));
  const out: I420Frame = { width, height, data };
  const dst = planes(out);
  for (let y = 0; y < height; y++)
    dst.y.set(src.y.subarray((y0 + y) * frame.width + x0, (y0 + y) * frame.width + x0 + width), y * width);
  for (let y = 0; y < dst.ch; y++) {
    const from = (y0 / 2 + y) * src.cw + x0 / 2;
    dst.u.set(src.u.subarray(from, from + dst.cw), y * dst.cw);
    dst.v.set(src.v.subarray(from, from + dst.cw), y * dst.cw);
  }
  return out;
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
    // The upper lip's own height: from its inner edge (the frame's own opening, if any, lifts whole) to its outline.
    lipHeight[i] =
      Math.min(
        MAX_LIFT_REACH,
        Math.max(MIN_LIFT_REACH, outerTop ? (upper[i] - edgeAt(outerTop, u)) / mw : MAX_LIFT_REACH),
      ) * mw;
  }
  return { from, upper, mid, lipHeight };
}

/**
 * Where the frame's own upper teeth reach below its tracked lower inner lip (a smile's side teeth, under the straight
 * line the landmarks draw from the lip's middle to its corner), the jaws part below them: dropped with the lower lip,
 * they rode on it as a pale sliver under the opening. Each column's parting moves down past the teeth-bright pixels
 * (bright, nearly neutral: not lip) that start within a pixel of it, by at most `OWN_TEETH_BELOW` mouth widths, and the
 * moves are smoothed over about a tooth's width (`OWN_TEETH_SMOOTH`) so the parting stays a line.
 */
function partBelowOwnTeeth(
  columns: WarpGeometry['columns'],
  source: I420Frame,
  at: { cx: number; cy: number; cos: number; sin: number },
  mw: number,
  corners: { from: number; to: number },
): void {
  const { y: luma, u: cb, v: cr, cw } = planes(source);
  const reach = OWN_TEETH_BELOW * mw;
  const toothAt = (u: number, v: number): boolean | null => {
    const x = Math.round(at.cx + u * at.cos - v * at.sin);
    const y = Math.round(at.cy + u * at.sin + v * at.cos);
    if (x < 0 || y < 0 || x >= source.width || y >= source.height) return null;
    const c = (y >> 1) * cw + (x >> 1);
    return (
      luma[y * source.width + x] >= OWN_TOOTH.minLuma &&
      cr[c] - 128 <= OWN_TOOTH.maxRed &&
      Math.abs(cb[c] - 128) <= OWN_TOOTH.maxBlue
    );
  };
  const count = columns.mid.length;
  const moves = new Float64Array(count);
  // Teeth show between the lip's corners only.
  const first = Math.max(0, Math.floor((corners.from - columns.from) * COLUMNS_PER_PX));
  const end = Math.min(count - 1, Math.ceil((corners.to - columns.from) * COLUMNS_PER_PX));
  for (let i = first; i <= end; i++) {
    const u = columns.from + i / COLUMNS_PER_PX;
    let last = -1;
    for (let dv = 0; dv <= reach; dv++) {
      const tooth = toothAt(u, columns.mid[i] + dv);
      if (tooth === null) break;
      if (tooth) last = dv;
      else if (dv > last + 1) break;
    }
    moves[i] = last >= 0 ? last + 1 : 0;
  }
  // A running mean over the window (clipped at the table's ends).
  const half = Math.round(OWN_TEETH_SMOOTH * mw * COLUMNS_PER_PX);
  let sum = 0;
  for (let k = 0; k < Math.min(count, half); k++) sum += moves[k];
  for (let i = 0; i < count; i++) {
    if (i + half < count) sum += moves[i + half];
    if (i - half - 1 >= 0) sum -= moves[i - half - 1];
    columns.mid[i] += sum / (Math.min(count - 1, i + half) - Math.max(0, i - half) + 1);
  }
}

/**
 * Per column of the own-lip table, 1 / cos of the slope of the opening's lower edge (the parting dropped by the jaw, the
 * lips' spread taken at the parting), at most `MAX_EDGE_SLANT`.
 */
function bottomSlantOf(
  columns: WarpGeometry['columns'],
  mw: number,
  jawDrop: number,
  halfWidth: number,
  spread: number,
): Float64Array {
  const count = columns.mid.length;
  const bottom = new Float64Array(count);
  for (let i = 0; i < count; i++) {
    const u = columns.from + i / COLUMNS_PER_PX;
    const an = u / mw;
    const lipZone = spread === 0 ? 0 : Math.exp(-(an * an) / LIP_ZONE_WIDTH) * (1 - smoothstep(1.0, 1.3, Math.abs(an)));
    const us = u - u * (1 - 1 / (1 + spread)) * lipZone;
    bottom[i] = columns.mid[i] + jawDrop * lensProfile(Math.abs(us) / halfWidth);
  }
  const slant = new Float64Array(count);
  const half = COLUMNS_PER_PX / 2;
  for (let i = 0; i < count; i++) {
    const slope = bottom[Math.min(count - 1, i + half)] - bottom[Math.max(0, i - half)];
    slant[i] = Math.min(MAX_EDGE_SLANT, Math.hypot(1, slope));
  }
  return slant;
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
const LENS_PROFILE = Float64Array.from({ length: LENS_PROFILE_STEPS + 1 }, (_, i) =>
  Math.pow(1 - (i / LENS_PROFILE_STEPS) ** 3, 1.3),
);

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
  let left = Infinity,
    right = -Infinity,
    top = Infinity,
    bottom = -Infinity;
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
 * The warp's map is evaluated exactly on a grid every `MAP_CELL_PX` frame pixels and bilinearly between (it is smooth
 * there: the map costs a few hundred operations a pixel, and a 125 px mouth covers ~10⁵ of them, ~18 ms a frame);
 * cells at the opening (its painted gap, and where the map folds at the lips) and cells whose centre the corners miss
 * by more than `MAP_TOLERANCE_PX` are evaluated per pixel.
 */
const MAP_CELL_PX = { luma: 8, chroma: 8 };
const MAP_TOLERANCE_PX = 0.2;
/** A cell whose corners move less than this in all (frame pixels, summed) is left as the frame has it. */
const STILL_PX = 0.02;

/**
 * One evaluation of the map (module scratch: no allocation per pixel): where a frame point samples from, and its paint
 * (how much of it, and its colour).
 */
const at = { sx: 0, sy: 0, paint: 0, y: 0, u: 0, v: 0, side: 0 };
/** `paintInside`'s answer (module scratch). */
const insideRgb: Rgb = { r: 0, g: 0, b: 0 };
/**
 * A cell is exact unless all its corners lie on one side of the opening's band, this far from it (frame pixels): the
 * band's edges are nearly straight over a cell.
 */
const BAND_SLACK_PX = 1.5;
const IN_BAND = 0;
const ABOVE_BAND = 1;
const BELOW_BAND = 2;
const UNTOUCHED = 0;
const MOVED = 1;
const AT_OPENING = 2;
/** Within the opening's columns (the lens profile's corner bends the map): the cell's centre is checked. */
const IN_LENS = 4;

/** The map at frame point (x, y) into `at`: UNTOUCHED (outside the warp), MOVED, or AT_OPENING (near the painted gap). */
function mapAt(g: WarpGeometry, x: number, y: number): number {
  const { cos, sin, mw } = g;
  const fx = x - g.cx;
  const fy = y - g.cy;
  const u = fx * cos + fy * sin;
  const v = -fx * sin + fy * cos;
  if (u < REGION.left * mw || u > REGION.right * mw || v < REGION.top * mw || v > REGION.bottom * mw) return UNTOUCHED;
  const an = u / mw;
  const column = Math.round((u - g.columns.from) * COLUMNS_PER_PX);
  const upper = g.columns.upper[column];
  const mid = g.columns.mid[column];
  const lipHeight = g.columns.lipHeight[column];
  // Nothing moves this far above the lips (the upper lip's lift has faded out).
  if ((upper - v) / mw > UNMOVED_ABOVE) return UNTOUCHED;
  const lipZone =
    g.spread === 0
      ? 0
      : Math.exp(-(an * an) / LIP_ZONE_WIDTH - ((v - mid) / mw) ** 2 / LIP_ZONE_HEIGHT) *
        (1 - smoothstep(1.0, 1.3, Math.abs(an)));
  const us = u - u * (1 - 1 / (1 + g.spread)) * lipZone;
  const profile = lensProfile(Math.abs(us) / g.halfWidth);
  const drop = g.jawDrop * profile;
  // At most `MAX_LIFT_OF_LIP` of the upper lip's height: the lift fades out within the lip (`LIFT_FADE`).
  const lift = Math.min(g.upperLift * profile, MAX_LIFT_OF_LIP * lipHeight);
  // The jaw drops under the mouth and not at the face's sides: there its outline meets hair or background.
  const jawWindow = g.jawDrop * (1 - smoothstep(JAW_WINDOW.flat, JAW_WINDOW.end, Math.abs(an)));
  // Below the midline: lower lip, lower teeth and chin drop (fixed point: the drop depends on where the pixel comes from).
  // (Above the midline the source lies above it too: no iteration needed to tell.)
  let vs = v - drop;
  if (v >= mid) {
    for (let k = 0; k < 3; k++) {
      const below = (vs - mid) / mw;
      const next = v - (drop + (jawWindow - drop) * smoothstep(0.05, 0.6, below)) * (1 - smoothstep(1.0, 1.6, below));
      const settled = Math.abs(next - vs) < FIXED_POINT_PX;
      vs = next;
      if (settled) break;
    }
  }
  const gapTop = mid - lift;
  const gapBottom = mid + drop;
  if (vs < mid) {
    // Above the midline: the upper lip (and upper teeth) lift, fading out towards the nose.
    let up = v + lift;
    for (let k = 0; k < 2; k++) {
      const next = v + lift * (1 - smoothstep(0, LIFT_FADE * lipHeight, upper - up));
      const settled = Math.abs(next - up) < FIXED_POINT_PX;
      up = next;
      if (settled) break;
    }
    vs = up < mid ? up : v < mid ? mid - 0.5 : mid + 0.5;
  }
  // Strong edges outside the lips, and what lies beyond them, stay put (`clip-freedom.ts`).
  const free = freedomAt(g.freedom, x, y);
  at.sx = x + (g.cx + us * cos - vs * sin - x) * free;
  at.sy = y + (g.cy + us * sin + vs * cos - y) * free;
  // Below the gap the lower lip's wet inner edge is painted over the lip, fading into it: the lip reads as a lip against
  // the inside, and a tracked inner lip a pixel off leaves no sliver of the frame's own teeth riding on it.
  // Towards the corners, where the gap closes, its paint fades with it: cut off where the drop passed 0.3 px, a
  // 2.5 px tall band of throat ended in a dark notch short of the corner (`yongen`: steps of 20–47 levels there).
  // Down a column the lip's edge band is as thick as across the edge: where the edge runs steeply (towards the
  // corners) a column crosses it at a slant, and measured down the column the band thinned into a red line.
  const slant = g.bottomSlant[column];
  const lipEdge = Math.min(g.lipEdgePx * slant, drop);
  const paint =
    drop > 0.3 && v > gapTop - 0.5 && v < gapBottom + lipEdge
      ? free *
        smoothstep(0.3, CORNER_FADE_PX, drop) *
        Math.min(1, v - gapTop + 0.5, 1 - smoothstep(0, lipEdge, v - gapBottom))
      : 0;
  at.paint = paint;
  if (paint > 0) {
    // Upper teeth hang from the lifted lip where the frame shows none of its own above its midline.
    const ownUpperInterior = Math.max(0, mid - upper);
    const teethHeight = Math.max(0, g.teeth * Math.pow(profile, 0.35) - ownUpperInterior);
    const column = g.inside;
    column.top = gapTop;
    column.bottom = gapBottom;
    column.lateral = Math.min(1, Math.abs(us) / g.halfWidth);
    column.dx = u;
    column.teeth = teethHeight > 0.5 ? teethHeight : 0;
    paintInside(column, v, g.palette, insideRgb);
    // The inside meets the lip's edge over `LIP_EDGE_BLEND_PX`: no hard line where the shading ends.
    const onLip = smoothstep(-LIP_EDGE_BLEND_PX * slant, LIP_EDGE_BLEND_PX * slant, v - gapBottom);
    if (onLip > 0) {
      const lip = g.lipEdgeColour;
      insideRgb.r += (lip.r - insideRgb.r) * onLip;
      insideRgb.g += (lip.g - insideRgb.g) * onLip;
      insideRgb.b += (lip.b - insideRgb.b) * onLip;
    }
    const yuv = rgbToYuv(insideRgb.r, insideRgb.g, insideRgb.b);
    at.y = yuv.y;
    at.u = yuv.u;
    at.v = yuv.v;
  }
  // Near the opening the map is not smooth (the painted gap, the lips' parting): no interpolation there.
  if (Math.abs(u) >= g.nearHalfWidth) return MOVED;
  // Which side of the opening's band (its painted gap and the lips' parting) the point is on, with a pixel to spare.
  at.side =
    v < mid - lift - BAND_SLACK_PX ? ABOVE_BAND : v > mid + drop + lipEdge + BAND_SLACK_PX ? BELOW_BAND : IN_BAND;
  return at.side === IN_BAND ? AT_OPENING | IN_LENS : MOVED | IN_LENS;
}

/** A plane warped from `src` into `dst`; `channel`: which of the opening's colour it is painted with. */
interface PlaneInk {
  dst: Uint8Array;
  src: Uint8Array;
  channel: 'y' | 'u' | 'v';
}

/** Grid scratch, grown as needed and reused frame to frame: source x and y (plane pixels) and state per grid point. */
let gridX = new Float64Array(0);
let gridY = new Float64Array(0);
let gridState = new Uint8Array(0);
let gridSide = new Uint8Array(0);

/**
 * Planes of one size (`scale` frame pixels per plane pixel: 1 luma, 2 chroma, U and V together): every pixel of the
 * region maps back to the source plane (bilinear), except the opening's gap, painted.
 */
function warpPlanes(
  inks: PlaneInk[],
  width: number,
  height: number,
  scale: number,
  g: WarpGeometry,
  claim?: Uint8Array,
): void {
  const { mw } = g;
  const { x0, x1, y0, y1 } = planeBoxOf(
    g,
    { left: REGION.left * mw, right: REGION.right * mw, top: REGION.top * mw, bottom: REGION.bottom * mw },
    scale,
    width,
    height,
  );
  // Plane pixel centre → frame coordinates: chroma sample k covers frame pixels 2k and 2k+1.
  const offset = scale === 1 ? 0 : 0.5;
  const cellPx = scale === 1 ? MAP_CELL_PX.luma : MAP_CELL_PX.chroma;
  const cell = cellPx / scale;

  const nx = Math.ceil((x1 - x0) / cell) + 1;
  const ny = Math.ceil((y1 - y0) / cell) + 1;
  if (gridState.length < nx * ny) {
    gridX = new Float64Array(nx * ny);
    gridY = new Float64Array(nx * ny);
    gridState = new Uint8Array(nx * ny);
    gridSide = new Uint8Array(nx * ny);
  }
  for (let j = 0; j < ny; j++) {
    for (let i = 0; i < nx; i++) {
      const px = x0 + i * cell;
      const py = y0 + j * cell;
      const k = j * nx + i;
      gridState[k] = mapAt(g, px * scale + offset, py * scale + offset);
      gridSide[k] = at.side;
      gridX[k] = gridState[k] === UNTOUCHED ? px : (at.sx - offset) / scale;
      gridY[k] = gridState[k] === UNTOUCHED ? py : (at.sy - offset) / scale;
    }
  }
  const tolerance = MAP_TOLERANCE_PX / scale;
  for (let j = 0; j < ny - 1; j++) {
    for (let i = 0; i < nx - 1; i++) {
      const k = j * nx + i;
      const s00 = gridState[k],
        s10 = gridState[k + 1],
        s01 = gridState[k + nx],
        s11 = gridState[k + nx + 1];
      if ((s00 | s10 | s01 | s11) === UNTOUCHED) continue;
      const cx0 = x0 + i * cell;
      const cy0 = y0 + j * cell;
      const cx1 = Math.min(x1 + 1, cx0 + cell);
      const cy1 = Math.min(y1 + 1, cy0 + cell);
      // Corners in the lens columns all above the band or all below it: no opening inside.
      const sides =
        (s00 & IN_LENS ? 1 << gridSide[k] : 0) |
        (s10 & IN_LENS ? 1 << gridSide[k + 1] : 0) |
        (s01 & IN_LENS ? 1 << gridSide[k + nx] : 0) |
        (s11 & IN_LENS ? 1 << gridSide[k + nx + 1] : 0);
      let exact = sides !== 0 && sides !== 1 << ABOVE_BAND && sides !== 1 << BELOW_BAND ? 1 : 0;
      if (!exact && (s00 | s10 | s01 | s11) & IN_LENS) {
        // The cell's centre as the corners put it, against the map there.
        const centre = mapAt(g, (cx0 + cell / 2) * scale + offset, (cy0 + cell / 2) * scale + offset);
        const ex = centre === UNTOUCHED ? cx0 + cell / 2 : (at.sx - offset) / scale;
        const ey = centre === UNTOUCHED ? cy0 + cell / 2 : (at.sy - offset) / scale;
        const mx = (gridX[k] + gridX[k + 1] + gridX[k + nx] + gridX[k + nx + 1]) / 4;
        const my = (gridY[k] + gridY[k + 1] + gridY[k + nx] + gridY[k + nx + 1]) / 4;
        exact = centre & AT_OPENING || Math.abs(ex - mx) > tolerance || Math.abs(ey - my) > tolerance ? 1 : 0;
      }
      if (exact) {
        for (let py = cy0; py < cy1; py++) {
          for (let px = cx0; px < cx1; px++) {
            if (mapAt(g, px * scale + offset, py * scale + offset) === UNTOUCHED) continue;
            const sx = (at.sx - offset) / scale;
            const sy = (at.sy - offset) / scale;
            if (claim && (at.paint > 0 || Math.hypot(sx - px, sy - py) > MASK_MOVED_PX)) claim[py * width + px] = 1;
            for (const ink of inks) {
              let value = bilinear(ink.src, width, height, sx, sy);
              if (at.paint > 0) value += (at[ink.channel] - value) * at.paint;
              ink.dst[py * width + px] = value < 0 ? 0 : value > 255 ? 255 : (value + 0.5) | 0;
            }
          }
        }
        continue;
      }
      // Bilinear between the corners, stepping along each row; a cell the map leaves in place stays as it is.
      const ax = gridX[k],
        bx = gridX[k + 1],
        cxL = gridX[k + nx],
        dx = gridX[k + nx + 1];
      const ay = gridY[k],
        by = gridY[k + 1],
        cyL = gridY[k + nx],
        dy = gridY[k + nx + 1];
      const moved =
        Math.abs(ax - cx0) +
        Math.abs(ay - cy0) +
        Math.abs(bx - cx0 - cell) +
        Math.abs(by - cy0) +
        Math.abs(cxL - cx0) +
        Math.abs(cyL - cy0 - cell) +
        Math.abs(dx - cx0 - cell) +
        Math.abs(dy - cy0 - cell);
      if (moved < STILL_PX / scale) continue;
      for (let py = cy0; py < cy1; py++) {
        const t = (py - cy0) / cell;
        const leftX = ax + (cxL - ax) * t;
        const leftY = ay + (cyL - ay) * t;
        const stepX = (bx + (dx - bx) * t - leftX) / cell;
        const stepY = (by + (dy - by) * t - leftY) / cell;
        for (let n = 0; n < inks.length; n++)
          sampleRow(inks[n].dst, inks[n].src, width, height, py * width, cx0, cx1, leftX, leftY, stepX, stepY);
        if (claim) {
          for (let px = cx0; px < cx1; px++) {
            const moved = Math.hypot(leftX + stepX * (px - cx0) - px, leftY + stepY * (px - cx0) - py);
            if (moved > MASK_MOVED_PX) claim[py * width + px] = 1;
          }
        }
      }
    }
  }
}

/**
 * Plane pixels `from`…`to` − 1 of the row at `rowStart`, sampled (bilinear, 8-bit fixed point) from `src` at
 * (`x`, `y`) + k·(`stepX`, `stepY`).
 */
function sampleRow(
  dst: Uint8Array,
  src: Uint8Array,
  width: number,
  height: number,
  rowStart: number,
  from: number,
  to: number,
  x: number,
  y: number,
  stepX: number,
  stepY: number,
): void {
  let fx = Math.round(x * 256);
  let fy = Math.round(y * 256);
  const dx = Math.round(stepX * 256);
  const dy = Math.round(stepY * 256);
  const maxX = (width - 1) * 256 - 1;
  const maxY = (height - 1) * 256 - 1;
  const lastX = fx + dx * (to - 1 - from);
  const lastY = fy + dy * (to - 1 - from);
  // The row's samples lie on a segment: inside the plane at both ends, inside all along (no clamping per pixel).
  const inside =
    fx >= 0 && fy >= 0 && fx <= maxX && fy <= maxY && lastX >= 0 && lastY >= 0 && lastX <= maxX && lastY <= maxY;
  for (let px = from; px < to; px++, fx += dx, fy += dy) {
    const cx = inside ? fx : fx < 0 ? 0 : fx > maxX ? maxX : fx;
    const cy = inside ? fy : fy < 0 ? 0 : fy > maxY ? maxY : fy;
    const i = (cy >> 8) * width + (cx >> 8);
    const wx = cx & 255;
    const wy = cy & 255;
    const top = src[i] * (256 - wx) + src[i + 1] * wx;
    const bottom = src[i + width] * (256 - wx) + src[i + width + 1] * wx;
    dst[rowStart + px] = (top * (256 - wy) + bottom * wy + 32768) >> 16;
  }
}

function bilinear(plane: Uint8Array, width: number, height: number, x: number, y: number): number {
  const cx = x < 0 ? 0 : x > width - 1 ? width - 1 : x;
  const cy = y < 0 ? 0 : y > height - 1 ? height - 1 : y;
  const x0 = cx | 0;
  const y0 = cy | 0;
  const x1 = x0 + 1 < width ? x0 + 1 : x0;
  const y1 = y0 + 1 < height ? y0 + 1 : y0;
  const fx = cx - x0;
  const fy = cy - y0;
  const top = plane[y0 * width + x0] * (1 - fx) + plane[y0 * width + x1] * fx;
  const bottom = plane[y1 * width + x0] * (1 - fx) + plane[y1 * width + x1] * fx;
  return top + (bottom - top) * fy;
}
