/**
 * Artefact measures of a rendered speaking frame (issue 44, point 1): what a person sees when zoomed on the mouth —
 * a seam where a composite ends, a halo or a moved face outside the mouth–jaw region, a split or notched upper lip,
 * dark mouth interior outside the lips, two rows of teeth. Pure functions of I420 frames and lip landmarks, shared by
 * the suite (`test/render.artefacts*.test.ts`) and the bench (`npm run bench -- mouth_sheet`), so both report the
 * same figures. They need nothing from the renderer but its output and what it already knows: the base frame (a
 * photo's rest face, a clip's loop frame under this frame), optionally its composite mask, and lip landmarks of the
 * RENDERED frame (the face detector run on it, `MouthAnimation` as `actors/faces/landmarks.ts` builds it: iBUG
 * 48–59 as `outer_lip`, 60–67 as `inner_lip`; in contour order, either way round from any point, they are split into
 * upper and lower chains here).
 *
 * API (all luma in 8-bit levels of the I420 Y plane):
 * - `measureArtefacts(base, frame, lips, mask?)` → `ArtefactReport`: every measure below at once.
 * - `seamStep(base, frame, mask?)`: for each pair of 4-neighbours across the composite's boundary (`p` inside the
 *   mask, `q` outside), the step the composite adds over the largest step the base shows there with its picture at `p`
 *   moved along the pair by at most `MOVED_EDGE_REACH_PX`: `max(0, |f(p) − f(q)| − max |b(p') − b(q)|)`, `p'` on the
 *   pair's line within that reach of `p` where the base has an edge there (spans ≥ `MOVED_EDGE_MIN_LEVELS`), `p` alone
 *   on plain skin; `.p98` is the headline (`SEAM_MAX_LEVELS`). Without a mask the composite is every pixel the frame
 *   changed by ≥ `COMPOSITE_MIN_DIFF` and the holes they enclose (`compositeMask`).
 *
 *   Why the moved-edge allowance: a mouth warp ends where its displacement fades out, and beside a strong edge (a lip
 *   line, a crease, the chin's outline against a collar, the jaw against hair) a displacement of a tenth of a pixel
 *   already changes the edge's pixels by `COMPOSITE_MIN_DIFF`, while the plain skin beyond, moved as much or more,
 *   does not change at all: the reconstructed composite ends ON the edge, and the moved edge steps against its
 *   unmoved neighbour by up to its whole contrast (10–98 levels on the astronaut). Drawn on 6× crops of the astronaut
 *   and a `sun.mp4` portrait, the worst 2 % of pairs counted without it were such edges: lip outlines, the jaw against
 *   hair or collar, the mouth's corners; a person sees each edge a little moved, not a pasted picture. What a person
 *   does see, no move of the base towards or away from the boundary explains, and it still counts in full: a patch
 *   pasted a few levels off (on plain skin nothing is forgiven), a copy laid a few pixels off on texture, an edge
 *   broken where it crosses the boundary (a kink: moved along the boundary, not across it), a blend cut short into a
 *   1-px ramp (`test/render.artefact-measures.test.ts` builds each, and moved edges and smooth fades that must pass).
 *   What the allowance cannot tell: an edge moved more than `MOVED_EDGE_REACH_PX` right where the composite ends
 *   (counted: on the astronaut, the chin's outline sheared where a chin dropped over its collar met the held jaw).
 * - `outsideDifference(base, frame, lips)`: mean |frame − base| in a ring around the mouth–jaw region
 *   (`mouthJawRegion`; ring out to `OUTSIDE_RING_SCALE` times it), `.mean` (`OUTSIDE_MAX_LEVELS`), and how smoothly
 *   the difference fades there (`.fadeP99`: 99th percentile of the difference's 1-px gradient).
 * - `teethAboveUpperLip(base, frame, lips)` / `teethBelowLowerLip(base, frame, lips)`: teeth-bright pixels
 *   (`isTeethBright`) the render put in the upper lip and the skin above it (down to `LIP_EDGE_MARGIN` px above the
 *   inner edge), or in the lower lip and the skin below it: a split or notched lip, teeth riding on a lip. A pixel
 *   counts unless the base is teeth-bright at it or within `MOVED_EDGE_REACH_PX` of it (either way, as for seams): a
 *   pale patch of skin or a lip highlight the base already shows, unchanged or moved ≤ 2 px by the warp, is the
 *   person's own (on `sun.mp4` every pixel counted without this was its pale skin above the lip, identical in the loop
 *   frame; on the swaying clip the photo's own lip highlight, some of it moved 1–2 px by "spread"). What it cannot
 *   tell: a notch within 2 px of teeth or a highlight the base already shows there. Headline: 0 above.
 *   Teeth-bright (`isTeethBright`) is bright and nearly neutral, or, against the face's own tone (`faceTone` of the
 *   base: its skin's chroma, the brightest of its skin and lips around the mouth), brighter than all of that and no more
 *   coloured than its skin: teeth under a portrait's warm cast, which the neutral test takes for skin.
 * - `thinLinesUnderLips(base, frame, lips)`: pixels under the lips darker than both pixels 2 px above and below them
 *   by `THIN_LINE_MIN_LEVELS` more than the base shows nearby in that column: a shade pressed into a thin line (a chin
 *   squeezed onto its held collar). Headline: `MAX_THIN_LINE_PIXELS`.
 * - `darkOutsideLips(base, frame, lips)`: pixels the composite made dark (`DARK_LUMA`, and ≥ `DARK_ADDED` darker
 *   than the base) in a band just outside the outer lip contour: mouth interior leaking past the lips.
 * - `teethRows(frame, lips, tone?)`: separate bands of teeth-bright pixels down the central columns of the mouth (median
 *   over columns that show teeth): 1 is one row of upper teeth, 2 a second row (a photo's own teeth riding down).
 * - `mouthCrop(frame, lips, scale)`: the RGBA crop of the mouth–jaw region the contact sheets show.
 */
import type { I420Frame, MouthAnimation, Point } from '../../actors/render/types.ts';
import { i420ToRgba } from '../../actors/render/i420.ts';

/** Done-when thresholds of issue 44. */
export const SEAM_MAX_LEVELS = 3;
export const OUTSIDE_MAX_LEVELS = 1;
export const MAX_TEETH_ABOVE_UPPER_LIP = 0;
export const MAX_TEETH_ROWS = 1;

/** A pixel belongs to the composite when the frame changed its luma by at least this (1 is rounding of a blend). */
export const COMPOSITE_MIN_DIFF = 2;
/**
 * A composite that moves the face (a lip lifted, a chin dropped, a jaw line bent) ends, as a frame shows it, where its
 * displacement no longer changes a pixel by `COMPOSITE_MIN_DIFF`: beside a strong edge that is a fraction of a pixel,
 * and at an edge whose plain surroundings moved with it (a lip lifted 2 px, the skin above it lifted too but unchanged)
 * it is the edge itself. A seam is a step that the base, moved towards or away from the boundary by at most this many
 * px, cannot show.
 */
export const MOVED_EDGE_REACH_PX = 2;
/**
 * Where the base spans fewer levels than this within `MOVED_EDGE_REACH_PX` along the pair, it is plain (skin, a
 * collar's weave): moving it explains nothing and a step there is measured against the base's own step alone.
 */
export const MOVED_EDGE_MIN_LEVELS = 8;
/**
 * Teeth are bright and nearly neutral: skin and lips are red (V well above 128), a tooth is white or ivory. The
 * astronaut's painted teeth sit at Y≈210, V≈135, U≈118; its skin and lips at V ≥ 141 (test/helpers/mouth-metrics.ts).
 */
export const TEETH_MIN_LUMA = 150;
export const TEETH_MAX_RED = 10;
export const TEETH_MAX_BLUE_SHIFT = 16;
/** Below this luma a pixel is the dark inside of a mouth; `DARK_ADDED`: the composite darkened it by this much. */
export const DARK_LUMA = 70;
export const DARK_ADDED = 25;
/** Pixels this close to a lip edge landmark line are the edge's own anti-aliasing, not a notch. */
export const LIP_EDGE_MARGIN = 1.5;
/** How far above the upper lip (and below the lower lip) teeth are looked for, in mouth widths: halo and notch. */
export const LIP_SKIN_REACH = 0.25;
/** Band outside the outer lip contour where dark interior must not be, in mouth widths. */
export const DARK_BAND = 0.15;
/** The ring where a speaking frame must equal its base: the mouth–jaw ellipse grown this many times. */
export const OUTSIDE_RING_SCALE = 2;
/** Teeth bands closer than this (px) are one band; thinner bands than `MIN_TEETH_BAND` px are speckle. */
const TEETH_BAND_GAP = 2;
const MIN_TEETH_BAND = 2;

export type LipGeometry = Pick<MouthAnimation, 'mouth_center' | 'mouth_width' | 'outer_lip' | 'inner_lip'>;

export interface SeamStep {
  /** 98th percentile of the added step over the boundary pairs: the headline figure. */
  p98: number;
  max: number;
  mean: number;
  /** Boundary pairs measured. */
  pairs: number;
}

export interface OutsideDifference {
  /** Mean |frame − base| luma in the ring around the mouth–jaw region. */
  mean: number;
  /** 99th percentile of the difference's 1-px gradient in that ring: how smoothly it fades (0: not at all there). */
  fadeP99: number;
  pixels: number;
}

export interface ArtefactReport {
  seam: SeamStep;
  outside: OutsideDifference;
  teethAboveUpperLip: number;
  teethBelowLowerLip: number;
  darkOutsideLips: number;
  teethRows: number;
}

/** Ellipse of the mouth–jaw region: where speech may change the face (mouth, lips, chin, jaw line beside them). */
export interface Ellipse {
  cx: number;
  cy: number;
  rx: number;
  ry: number;
}

export function mouthJawRegion(lips: LipGeometry): Ellipse {
  const { x, y } = lips.mouth_center;
  const mw = lips.mouth_width;
  // From 0.8 mouth widths above the mouth centre (under the nose) to 1.9 below (under the chin), 1.5 to each side.
  return { cx: x, cy: y + 0.55 * mw, rx: 1.5 * mw, ry: 1.35 * mw };
}

function insideEllipse(e: Ellipse, x: number, y: number, scale = 1): boolean {
  const nx = (x - e.cx) / (e.rx * scale);
  const ny = (y - e.cy) / (e.ry * scale);
  return nx * nx + ny * ny <= 1;
}

function luma(frame: I420Frame, x: number, y: number): number {
  return frame.data[y * frame.width + x];
}

function chroma(frame: I420Frame, x: number, y: number): { u: number; v: number } {
  const cw = (frame.width + 1) >> 1;
  const uOffset = frame.width * frame.height;
  const vOffset = uOffset + cw * ((frame.height + 1) >> 1);
  const i = (y >> 1) * cw + (x >> 1);
  return { u: frame.data[uOffset + i], v: frame.data[vOffset + i] };
}

/**
 * The face around a mouth as its base shows it (`faceTone`): what "bright" and "coloured" mean on this face. Teeth in a
 * warm-lit portrait carry the light's cast (painted on the `sun` portrait: Y≈175–200 at V≈+16, U≈−5, over skin at
 * Y≈156, V≈+15): not neutral, so the absolute test (`TEETH_MAX_RED`) does not see them, yet a person sees teeth.
 */
export interface FaceTone {
  /** Median chroma magnitude (distance of U, V from neutral) of the skin around the mouth. */
  chroma: number;
  /**
   * The brightest pixel of the face's own around the mouth: its skin, and its lips with their highlights (a lip's
   * specular highlight is pale and less coloured than skin, as a tooth; the base's own is not the render's).
   */
  brightestLuma: number;
}

/**
 * The skin around the mouth: a box from `SKIN_RING_ABOVE` mouth widths above the outer lips to `SKIN_RING_BELOW` below,
 * `SKIN_RING_SIDE` to each side of the centre, without the lips' box grown by `SKIN_RING_LIP_GAP`; of it only the pixels
 * whose chroma lies within `SKIN_CHROMA_SPREAD` of the median (hair, collar, background and nostrils are not skin).
 */
const SKIN_RING_ABOVE = 0.3;
const SKIN_RING_BELOW = 0.35;
const SKIN_RING_SIDE = 0.9;
const SKIN_RING_LIP_GAP = 0.1;
const SKIN_CHROMA_SPREAD = 6;
/** Fewer skin pixels than this (a mouth at the frame's edge, a tiny face): no tone, the absolute test alone. */
const MIN_SKIN_PIXELS = 50;
/**
 * Relative to the face (`FaceTone`), a pixel is a tooth when it is brighter than anything of the face's own around the
 * mouth by `TEETH_OVER_FACE` levels (more than a warp's fade lifts skin; the `sun` portrait's painted teeth stand
 * 3–28 levels over its brightest skin) and no more coloured than its skin (+`TEETH_CAST_SLACK`: 4:2:0 chroma shared with
 * a lip pixel beside it): a tooth under the same light as the face. Skin and its highlights are never brighter than
 * the brightest of them; lips are darker and more coloured than the skin.
 */
export const TEETH_OVER_FACE = 10;
export const TEETH_CAST_SLACK = 4;

/** The face's tone around the mouth of `base` (its rest face or loop frame); null when too little skin is seen there. */
export function faceTone(base: I420Frame, lips: LipGeometry): FaceTone | null {
  const mw = lips.mouth_width;
  const cx = lips.mouth_center.x;
  const xs = lips.outer_lip.map((p) => p.x);
  const ys = lips.outer_lip.map((p) => p.y);
  const [left, right, top, bottom] = [Math.min(...xs), Math.max(...xs), Math.min(...ys), Math.max(...ys)];
  const gap = SKIN_RING_LIP_GAP * mw;
  const samples: Array<{ y: number; u: number; v: number }> = [];
  let brightestLip = 0;
  const y0 = Math.max(0, Math.round(top - SKIN_RING_ABOVE * mw));
  const y1 = Math.min(base.height - 1, bottom + SKIN_RING_BELOW * mw);
  const x0 = Math.max(0, Math.round(cx - SKIN_RING_SIDE * mw));
  const x1 = Math.min(base.width - 1, cx + SKIN_RING_SIDE * mw);
  for (let y = y0; y <= y1; y++) {
    for (let x = x0; x <= x1; x++) {
      const l = luma(base, x, y);
      if (x >= left && x <= right && y >= top && y <= bottom) brightestLip = Math.max(brightestLip, l);
      if (x > left - gap && x < right + gap && y > top - gap && y < bottom + gap) continue;
      const { u, v } = chroma(base, x, y);
      samples.push({ y: l, u: u - 128, v: v - 128 });
    }
  }
  const u = percentile(
    samples.map((p) => p.u),
    0.5,
  );
  const v = percentile(
    samples.map((p) => p.v),
    0.5,
  );
  const skin = samples.filter(
    (p) => Math.abs(p.u - u) <= SKIN_CHROMA_SPREAD && Math.abs(p.v - v) <= SKIN_CHROMA_SPREAD,
  );
  if (skin.length < MIN_SKIN_PIXELS) return null;
  return {
    chroma: percentile(
      skin.map((p) => Math.hypot(p.u, p.v)),
      0.5,
    ),
    brightestLuma: skin.reduce((m, p) => Math.max(m, p.y), brightestLip),
  };
}

/**
 * A tooth, not skin or lip nor a shadow: bright and nearly neutral (the absolute test), or, given the face's `tone`,
 * brighter than the face's own and no more coloured than its skin (`TEETH_OVER_FACE`): teeth under a warm cast.
 */
export function isTeethBright(frame: I420Frame, x: number, y: number, tone?: FaceTone | null): boolean {
  const l = luma(frame, x, y);
  const { u, v } = chroma(frame, x, y);
  if (l >= TEETH_MIN_LUMA && v - 128 <= TEETH_MAX_RED && Math.abs(u - 128) <= TEETH_MAX_BLUE_SHIFT) return true;
  return (
    !!tone &&
    l >= tone.brightestLuma + TEETH_OVER_FACE &&
    Math.hypot(u - 128, v - 128) <= tone.chroma + TEETH_CAST_SLACK
  );
}

function percentile(values: number[], p: number): number {
  if (values.length === 0) return 0;
  const sorted = Float64Array.from(values).sort();
  return sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))];
}

/**
 * 1 where the frame's luma differs from the base's by at least `COMPOSITE_MIN_DIFF`, and in every hole such pixels
 * enclose (lips that moved onto lips stay unchanged inside an open mouth: they are inside the composite, not its edge).
 * `claimed`: what the renderer says it moved or painted (non-zero), added to what changed — a warp's plain skin moved
 * with a lip shows no change, so without it the composite ends on the moved lip; whatever changed outside the claim
 * still counts.
 */
export function compositeMask(base: I420Frame, frame: I420Frame, claimed?: Uint8Array): Uint8Array {
  const { width, height } = frame;
  const n = width * height;
  const changed = new Uint8Array(n);
  for (let i = 0; i < n; i++)
    changed[i] = Math.abs(frame.data[i] - base.data[i]) >= COMPOSITE_MIN_DIFF || claimed?.[i] ? 1 : 0;
  // Unchanged pixels reachable from the frame's border are outside; everything else is the composite.
  const outside = new Uint8Array(n);
  const stack: number[] = [];
  const visit = (i: number): void => {
    if (changed[i] || outside[i]) return;
    outside[i] = 1;
    stack.push(i);
  };
  for (let x = 0; x < width; x++) {
    visit(x);
    visit((height - 1) * width + x);
  }
  for (let y = 0; y < height; y++) {
    visit(y * width);
    visit(y * width + width - 1);
  }
  while (stack.length > 0) {
    const i = stack.pop()!;
    const x = i % width;
    if (x > 0) visit(i - 1);
    if (x + 1 < width) visit(i + 1);
    if (i >= width) visit(i - width);
    if (i + width < n) visit(i + width);
  }
  const mask = new Uint8Array(n);
  for (let i = 0; i < n; i++) mask[i] = outside[i] ? 0 : 1;
  return mask;
}

/**
 * What the base may look like at `p` once its picture moved by at most `MOVED_EDGE_REACH_PX` px along the pair's axis
 * (`step`: 1 across a vertical boundary, the width across a horizontal one): the lowest and highest base luma on that
 * line through `p`. An edge moved towards or away from the boundary is explained; an edge broken where it crosses the
 * boundary (displaced along the boundary, a kink) is not. On plain skin (the line spans less than
 * `MOVED_EDGE_MIN_LEVELS`) nothing is forgiven: the base's own value.
 */
function movedBaseRange(base: I420Frame, p: number, step: number): { lo: number; hi: number } {
  const { width, data } = base;
  const n = width * base.height;
  const x = p % width;
  let lo = data[p];
  let hi = data[p];
  for (let k = -MOVED_EDGE_REACH_PX; k <= MOVED_EDGE_REACH_PX; k++) {
    const i = p + k * step;
    // Along a row, stay on it; along a column, inside the frame.
    if (i < 0 || i >= n || (step === 1 && Math.abs((i % width) - x) !== Math.abs(k))) continue;
    if (data[i] < lo) lo = data[i];
    if (data[i] > hi) hi = data[i];
  }
  return hi - lo < MOVED_EDGE_MIN_LEVELS ? { lo: data[p], hi: data[p] } : { lo, hi };
}

/**
 * The step the composite adds across every boundary of `mask` (non-zero = composite): for a pair of 4-neighbours `p`
 * inside and `q` outside, `|f(p) − f(q)|` less the largest step the base shows there with its picture at `p` moved by
 * at most `MOVED_EDGE_REACH_PX` along the pair (`movedBaseRange`; on plain skin, the base's own step `|b(p) − b(q)|`).
 */
export function seamStep(base: I420Frame, frame: I420Frame, mask: Uint8Array = compositeMask(base, frame)): SeamStep {
  const { width, height } = frame;
  const steps: number[] = [];
  const added = (inside: number, outside: number, step: number): number => {
    const { lo, hi } = movedBaseRange(base, inside, step);
    const own = Math.max(Math.abs(hi - base.data[outside]), Math.abs(lo - base.data[outside]));
    return Math.max(0, Math.abs(frame.data[inside] - frame.data[outside]) - own);
  };
  const pair = (p: number, q: number, step: number): void => {
    const pIn = mask[p] !== 0;
    if (pIn === (mask[q] !== 0)) return;
    steps.push(pIn ? added(p, q, step) : added(q, p, step));
  };
  for (let y = 0; y < height; y++) {
    for (let x = 0; x < width; x++) {
      const p = y * width + x;
      if (x + 1 < width) pair(p, p + 1, 1);
      if (y + 1 < height) pair(p, p + width, width);
    }
  }
  const sum = steps.reduce((s, v) => s + v, 0);
  return {
    p98: percentile(steps, 0.98),
    max: steps.reduce((m, v) => Math.max(m, v), 0),
    mean: steps.length ? sum / steps.length : 0,
    pairs: steps.length,
  };
}

/** Mean difference from the base in the ring around the mouth–jaw region, and its gradient there. */
export function outsideDifference(base: I420Frame, frame: I420Frame, lips: LipGeometry): OutsideDifference {
  const region = mouthJawRegion(lips);
  const { width, height } = frame;
  const x0 = Math.max(0, Math.floor(region.cx - OUTSIDE_RING_SCALE * region.rx));
  const x1 = Math.min(width - 1, Math.ceil(region.cx + OUTSIDE_RING_SCALE * region.rx));
  const y0 = Math.max(0, Math.floor(region.cy - OUTSIDE_RING_SCALE * region.ry));
  const y1 = Math.min(height - 1, Math.ceil(region.cy + OUTSIDE_RING_SCALE * region.ry));
  const diff = (x: number, y: number): number => frame.data[y * width + x] - base.data[y * width + x];
  let sum = 0;
  let pixels = 0;
  const gradients: number[] = [];
  for (let y = y0; y < y1; y++) {
    for (let x = x0; x < x1; x++) {
      if (insideEllipse(region, x, y) || !insideEllipse(region, x, y, OUTSIDE_RING_SCALE)) continue;
      const d = diff(x, y);
      sum += Math.abs(d);
      pixels++;
      gradients.push(Math.max(Math.abs(diff(x + 1, y) - d), Math.abs(diff(x, y + 1) - d)));
    }
  }
  return { mean: pixels ? sum / pixels : 0, fadeP99: percentile(gradients, 0.99), pixels };
}

/** A lip contour split into its upper and lower chains, each a polyline sorted by x. */
interface LipChains {
  upper: Point[];
  lower: Point[];
}

/**
 * The contour walked from its leftmost point to its rightmost both ways round: the walk lying higher is the upper chain.
 * (Not split by the chord between the corners: on a smile the inner upper lip sags below that chord, and its points
 * went to the lower chain, which then zigzagged through the teeth — the astronaut's painted teeth read as "below the
 * lower lip".)
 */
function chains(contour: Point[]): LipChains {
  const n = contour.length;
  const leftAt = contour.reduce((a, p, i) => (p.x < contour[a].x ? i : a), 0);
  const rightAt = contour.reduce((a, p, i) => (p.x > contour[a].x ? i : a), 0);
  const walk = (from: number, to: number): Point[] => {
    const path: Point[] = [];
    for (let i = (from + 1) % n; i !== to; i = (i + 1) % n) path.push(contour[i]);
    return path;
  };
  const one = walk(leftAt, rightAt);
  const other = walk(rightAt, leftAt);
  const meanY = (path: Point[]): number => path.reduce((sum, p) => sum + p.y, 0) / Math.max(1, path.length);
  const [upperRest, lowerRest] = meanY(one) <= meanY(other) ? [one, other] : [other, one];
  const byX = (a: Point, b: Point): number => a.x - b.x;
  const left = contour[leftAt];
  const right = contour[rightAt];
  return { upper: [left, ...upperRest, right].sort(byX), lower: [left, ...lowerRest, right].sort(byX) };
}

/** y of a polyline (sorted by x) at column x, or null outside its span. */
function chainAt(chain: Point[], x: number): number | null {
  if (chain.length === 0 || x < chain[0].x || x > chain[chain.length - 1].x) return null;
  for (let i = 1; i < chain.length; i++) {
    const a = chain[i - 1];
    const b = chain[i];
    if (x <= b.x) return b.x === a.x ? Math.min(a.y, b.y) : a.y + ((x - a.x) * (b.y - a.y)) / (b.x - a.x);
  }
  return chain[chain.length - 1].y;
}

interface LipColumns {
  x0: number;
  x1: number;
  outerTop: (x: number) => number | null;
  outerBottom: (x: number) => number | null;
  innerTop: (x: number) => number | null;
  innerBottom: (x: number) => number | null;
}

function lipColumns(lips: LipGeometry): LipColumns {
  const outer = chains(lips.outer_lip);
  const inner = chains(lips.inner_lip);
  return {
    x0: Math.ceil(outer.upper[0].x),
    x1: Math.floor(outer.upper[outer.upper.length - 1].x),
    outerTop: (x) => chainAt(outer.upper, x),
    outerBottom: (x) => chainAt(outer.lower, x),
    innerTop: (x) => chainAt(inner.upper, x),
    innerBottom: (x) => chainAt(inner.lower, x),
  };
}

/** The base shows a teeth-bright pixel at (x, y) or within `MOVED_EDGE_REACH_PX` of it (either way). */
function baseTeethNear(base: I420Frame, x: number, y: number, tone: FaceTone | null): boolean {
  const r = MOVED_EDGE_REACH_PX;
  for (let by = Math.max(0, y - r); by <= Math.min(base.height - 1, y + r); by++)
    for (let bx = Math.max(0, x - r); bx <= Math.min(base.width - 1, x + r); bx++)
      if (isTeethBright(base, bx, by, tone)) return true;
  return false;
}

/** Teeth-bright pixels of `frame` in column x from `from` to `to` that the base does not show there (`baseTeethNear`). */
function countAddedTeeth(
  base: I420Frame,
  frame: I420Frame,
  tone: FaceTone | null,
  x: number,
  from: number,
  to: number,
): number {
  let count = 0;
  for (let y = Math.max(0, Math.ceil(from)); y <= Math.min(frame.height - 1, Math.floor(to)); y++)
    if (isTeethBright(frame, x, y, tone) && !baseTeethNear(base, x, y, tone)) count++;
  return count;
}

/**
 * Teeth-bright pixels the render put in one lip and the skin beyond it, within the lips' span: from `LIP_EDGE_MARGIN`
 * px past the lip's inner edge, through the lip, to `LIP_SKIN_REACH` mouth widths past its outer edge.
 */
function teethInLipBand(
  base: I420Frame,
  frame: I420Frame,
  lips: LipGeometry,
  lip: 'upper' | 'lower',
  tone: FaceTone | null,
): number {
  const c = lipColumns(lips);
  const reach = LIP_SKIN_REACH * lips.mouth_width;
  let count = 0;
  for (let x = c.x0; x <= c.x1; x++) {
    const inner = lip === 'upper' ? c.innerTop(x) : c.innerBottom(x);
    const outer = lip === 'upper' ? c.outerTop(x) : c.outerBottom(x);
    if (inner === null || outer === null) continue;
    if (lip === 'upper')
      count += countAddedTeeth(base, frame, tone, x, Math.min(outer, inner) - reach, inner - LIP_EDGE_MARGIN);
    else count += countAddedTeeth(base, frame, tone, x, inner + LIP_EDGE_MARGIN, Math.max(outer, inner) + reach);
  }
  return count;
}

/**
 * Teeth-bright pixels the render put in the upper lip and the skin above it: a split or notched lip, a halo. `tone`:
 * one for the base and the frame, the face's skin as the base shows it (`faceTone`).
 */
export function teethAboveUpperLip(
  base: I420Frame,
  frame: I420Frame,
  lips: LipGeometry,
  tone = faceTone(base, lips),
): number {
  return teethInLipBand(base, frame, lips, 'upper', tone);
}

/** Teeth-bright pixels the render put in the lower lip and the skin below it: teeth riding on the lip. */
export function teethBelowLowerLip(
  base: I420Frame,
  frame: I420Frame,
  lips: LipGeometry,
  tone = faceTone(base, lips),
): number {
  return teethInLipBand(base, frame, lips, 'lower', tone);
}

/**
 * Below the lower lip, a shade the warp pressed into a thin line: a chin dropped onto a held outline (a collar)
 * squeezes the shadow under it, a few pixels of soft shade, into a line one or two pixels thin. A pixel's thinness is
 * how much darker it is than both pixels `THIN_LINE_PX` above and below it: a shade broader than that has no such
 * pixel, a line has. For each pixel of the mouth–jaw region from `THIN_LINE_BELOW_LIP` mouth widths under the
 * outer lower lip, its thinness less the largest the base shows in that column within `THIN_LINE_REACH` mouth widths up
 * or down (a line of the face's own, moved with the chin, is no new line).
 */
export const THIN_LINE_PX = 2;
export const THIN_LINE_BELOW_LIP = 0.15;
export const THIN_LINE_REACH = 0.5;
/** A pixel is on a line the render drew when it is thinner than the base's nearby by this many levels. */
export const THIN_LINE_MIN_LEVELS = 10;
/**
 * At most this many such pixels under the lips of a speaking frame. The astronaut's chin squeezed onto its held collar
 * drew 30–38 on the open poses (a stepped dark line, 2 px thin, across the chin) and 15–16 on spread and rounded; its
 * chin faded whole into the collar shows 0 on the open poses and 3–5 on the smaller drops (the shadow a little narrower
 * over the neck, looked at 6×: soft).
 */
export const MAX_THIN_LINE_PIXELS = 8;

export interface ThinLines {
  /** Pixels at least `THIN_LINE_MIN_LEVELS` thinner than the base's nearby. */
  pixels: number;
  /** The largest excess, levels. */
  max: number;
}

function thinness(f: I420Frame, x: number, y: number): number {
  const above = luma(f, x, y - THIN_LINE_PX);
  const below = luma(f, x, y + THIN_LINE_PX);
  return Math.min(above, below) - luma(f, x, y);
}

/** Lines the render drew under the lips that the base does not show nearby (`THIN_LINE_MIN_LEVELS`). */
export function thinLinesUnderLips(base: I420Frame, frame: I420Frame, lips: LipGeometry): ThinLines {
  const region = mouthJawRegion(lips);
  const c = lipColumns(lips);
  const reach = Math.round(THIN_LINE_REACH * lips.mouth_width);
  const { width, height } = frame;
  let pixels = 0;
  let max = 0;
  for (let x = Math.max(0, Math.ceil(region.cx - region.rx)); x < Math.min(width, region.cx + region.rx); x++) {
    const lip = c.outerBottom(Math.min(c.x1, Math.max(c.x0, x)))!;
    const from = Math.max(THIN_LINE_PX, Math.ceil(lip + THIN_LINE_BELOW_LIP * lips.mouth_width));
    for (let y = from; y + THIN_LINE_PX < Math.min(height, region.cy + region.ry); y++) {
      if (!insideEllipse(region, x, y)) continue;
      let own = 0;
      for (let by = Math.max(THIN_LINE_PX, y - reach); by <= Math.min(height - 1 - THIN_LINE_PX, y + reach); by++)
        own = Math.max(own, thinness(base, x, by));
      const excess = thinness(frame, x, y) - own;
      if (excess >= THIN_LINE_MIN_LEVELS) pixels++;
      if (excess > max) max = excess;
    }
  }
  return { pixels, max };
}

/** Pixels the composite made dark in a band just outside the outer lip contour. */
export function darkOutsideLips(base: I420Frame, frame: I420Frame, lips: LipGeometry): number {
  const c = lipColumns(lips);
  const band = DARK_BAND * lips.mouth_width;
  let count = 0;
  const dark = (x: number, y: number): boolean =>
    luma(frame, x, y) < DARK_LUMA && luma(base, x, y) - luma(frame, x, y) >= DARK_ADDED;
  for (let x = Math.max(0, Math.floor(c.x0 - band)); x <= Math.min(frame.width - 1, Math.ceil(c.x1 + band)); x++) {
    const top = c.outerTop(Math.min(c.x1, Math.max(c.x0, x)))!;
    const bottom = c.outerBottom(Math.min(c.x1, Math.max(c.x0, x)))!;
    const beside = x < c.x0 || x > c.x1;
    for (let y = Math.max(0, Math.floor(top - band)); y <= Math.min(frame.height - 1, Math.ceil(bottom + band)); y++) {
      const outside = beside || y < top - LIP_EDGE_MARGIN || y > bottom + LIP_EDGE_MARGIN;
      if (outside && dark(x, y)) count++;
    }
  }
  return count;
}

/**
 * Bands of teeth-bright pixels down the central columns of the mouth (median over the columns showing teeth); with the
 * face's `tone` (of its base, `faceTone`), teeth under a cast count too.
 */
export function teethRows(frame: I420Frame, lips: LipGeometry, tone?: FaceTone | null): number {
  const c = lipColumns(lips);
  const mw = lips.mouth_width;
  const cx = lips.mouth_center.x;
  const bandsPerColumn: number[] = [];
  for (let x = Math.max(c.x0, Math.round(cx - 0.25 * mw)); x <= Math.min(c.x1, Math.round(cx + 0.25 * mw)); x++) {
    const top = c.outerTop(x);
    const bottom = c.outerBottom(x);
    if (top === null || bottom === null) continue;
    let bands = 0;
    let run = 0;
    let gap = TEETH_BAND_GAP;
    for (
      let y = Math.max(0, Math.floor(top - 0.1 * mw));
      y <= Math.min(frame.height - 1, Math.ceil(bottom + 0.1 * mw));
      y++
    ) {
      if (isTeethBright(frame, x, y, tone)) {
        if (gap >= TEETH_BAND_GAP) run = 0;
        run++;
        gap = 0;
        if (run === MIN_TEETH_BAND) bands++;
      } else {
        gap++;
      }
    }
    if (bands > 0) bandsPerColumn.push(bands);
  }
  return bandsPerColumn.length === 0 ? 0 : percentile(bandsPerColumn, 0.5);
}

export function measureArtefacts(
  base: I420Frame,
  frame: I420Frame,
  lips: LipGeometry,
  mask?: Uint8Array,
): ArtefactReport {
  // The face's tone around the mouth, read once off the base for the three teeth measures.
  const tone = faceTone(base, lips);
  return {
    seam: seamStep(base, frame, mask),
    outside: outsideDifference(base, frame, lips),
    teethAboveUpperLip: teethAboveUpperLip(base, frame, lips, tone),
    teethBelowLowerLip: teethBelowLowerLip(base, frame, lips, tone),
    darkOutsideLips: darkOutsideLips(base, frame, lips),
    teethRows: teethRows(frame, lips, tone),
  };
}

/** Which Done-when thresholds a report breaks, as readable lines (empty: it holds them all). */
export function brokenThresholds(report: ArtefactReport, seamMaxLevels = SEAM_MAX_LEVELS): string[] {
  const broken: string[] = [];
  if (report.seam.p98 > seamMaxLevels) broken.push(`seam step ${report.seam.p98} > ${seamMaxLevels} levels`);
  if (report.outside.mean > OUTSIDE_MAX_LEVELS)
    broken.push(`outside the mouth–jaw region ${report.outside.mean.toFixed(2)} > ${OUTSIDE_MAX_LEVELS} level`);
  if (report.teethAboveUpperLip > MAX_TEETH_ABOVE_UPPER_LIP)
    broken.push(`${report.teethAboveUpperLip} teeth-bright px above the upper lip's inner edge`);
  if (report.teethRows > MAX_TEETH_ROWS) broken.push(`${report.teethRows} rows of teeth`);
  return broken;
}

/** The mouth–jaw region's bounding box as an RGBA crop, scaled up `scale` times (nearest neighbour). */
export function mouthCrop(
  frame: I420Frame,
  lips: LipGeometry,
  scale = 3,
): { rgba: Uint8Array; width: number; height: number } {
  const region = mouthJawRegion(lips);
  const x0 = Math.max(0, Math.floor(region.cx - region.rx));
  const y0 = Math.max(0, Math.floor(region.cy - region.ry));
  const x1 = Math.min(frame.width, Math.ceil(region.cx + region.rx));
  const y1 = Math.min(frame.height, Math.ceil(region.cy + region.ry));
  const rgba = i420ToRgba(frame);
  const width = (x1 - x0) * scale;
  const height = (y1 - y0) * scale;
  const out = new Uint8Array(width * height * 4);
  for (let y = 0; y < height; y++) {
    for (let x = 0; x < width; x++) {
      const from = ((y0 + Math.floor(y / scale)) * frame.width + x0 + Math.floor(x / scale)) * 4;
      out.set(rgba.subarray(from, from + 4), (y * width + x) * 4);
    }
  }
  return { rgba: out, width, height };
}

/**
 * The inside of an open mouth and the lower lip's edge below it, down the mouth's central columns (within
 * `INSIDE_COLUMNS` mouth widths of its centre, where the lips show an opening: a pixel darker than `DARK_LUMA` between
 * the outer lips). Each column is read from its darkest pixel (the throat) down to its brightest within
 * `LOWER_LIP_REACH` mouth widths below the outer lower lip (the lower lip, or the chin below it):
 * - `edgeStep`: the largest rise of luma from one pixel to the next on the way: the opening's lower edge meeting the
 *   lower lip. Painted as one flat maroon ending against a pale lip it is a hard line (59–74 levels on the project's
 *   swaying clip before its inside was painted as a photo's, 14–34 after); a real mouth's lower lip rises over a few
 *   pixels (`sun.mp4`, `yongen.mp4`: 21–42).
 * - `shading`: how much the inside brightens from the throat before the lower lip begins (where luma passes halfway
 *   from the throat to the lip; `INSIDE_EDGE_PX` above it): a tongue, the lit lower lip rolling in. That flat maroon
 *   read 28–33 (its edges lit, dark between); painted as a photo's, half open or wider, 55–69. A real mouth that shows
 *   only its dark throat reads low too (`sun.mp4` 33–59): bound it where the renderer paints a tongue.
 * Medians over the columns that show an opening; `columns`: how many did (0: no opening, both 0).
 */
export interface InsideAndLowerEdge {
  columns: number;
  edgeStep: number;
  shading: number;
}

/**
 * Bounds on a synthesised opening (`insideAndLowerEdge`): the lower edge rises at most this much from one pixel to the
 * next (a real mouth's: 19–42 on `sun.mp4` and `yongen.mp4`), and an opening of half the widest or more brightens
 * at least this much from its throat before its lower lip.
 */
export const LOWER_EDGE_MAX_STEP = 40;
export const INSIDE_MIN_SHADING = 40;
/** Half width (mouth widths) of the central columns `insideAndLowerEdge` reads. */
export const INSIDE_COLUMNS = 0.15;
/** The inside ends this many px above where the lower lip begins (its edge's own blur is not the inside's shading). */
const INSIDE_EDGE_PX = 2;
/** How far below the outer lower lip (mouth widths) a column is read for the lower lip's brightest. */
export const LOWER_LIP_REACH = 0.25;

export function insideAndLowerEdge(frame: I420Frame, lips: LipGeometry): InsideAndLowerEdge {
  const c = lipColumns(lips);
  const mw = lips.mouth_width;
  const cx = lips.mouth_center.x;
  const steps: number[] = [];
  const shadings: number[] = [];
  const x0 = Math.max(c.x0, 0, Math.round(cx - INSIDE_COLUMNS * mw));
  const x1 = Math.min(c.x1, frame.width - 1, Math.round(cx + INSIDE_COLUMNS * mw));
  for (let x = x0; x <= x1; x++) {
    const top = c.outerTop(x);
    const bottom = c.outerBottom(x);
    if (top === null || bottom === null) continue;
    const from = Math.max(0, Math.round(top));
    const lipEnd = Math.min(frame.height - 1, Math.round(bottom));
    let throat = from;
    for (let y = from; y <= lipEnd; y++) if (luma(frame, x, y) < luma(frame, x, throat)) throat = y;
    if (luma(frame, x, throat) >= DARK_LUMA) continue;
    const end = Math.min(frame.height - 1, Math.round(bottom + LOWER_LIP_REACH * mw));
    let brightest = throat;
    for (let y = throat; y <= end; y++) if (luma(frame, x, y) > luma(frame, x, brightest)) brightest = y;
    let step = 0;
    for (let y = throat; y < brightest; y++) step = Math.max(step, luma(frame, x, y + 1) - luma(frame, x, y));
    // The lower lip begins where luma passes halfway from the throat to it; the inside ends `INSIDE_EDGE_PX` above.
    const half = (luma(frame, x, throat) + luma(frame, x, brightest)) / 2;
    let lipStart = throat;
    while (lipStart < brightest && luma(frame, x, lipStart) < half) lipStart++;
    let lit = luma(frame, x, throat);
    for (let y = throat; y <= lipStart - INSIDE_EDGE_PX; y++) lit = Math.max(lit, luma(frame, x, y));
    steps.push(step);
    shadings.push(lit - luma(frame, x, throat));
  }
  return { columns: steps.length, edgeStep: percentile(steps, 0.5), shading: percentile(shadings, 0.5) };
}
