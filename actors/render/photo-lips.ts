/**
 * The rest face of a photo avatar: lips closed. Portraits often smile with teeth showing; the lipsync
 * renderer must start from closed lips (m/b/p and silence show no gap), and an opening jaw must not drag the
 * photo's lower teeth down with the lower lip. Run once at prepare time.
 *
 * The gap between the lips is found per column inside the detected inner lip (± a little, since landmarks
 * are off by a pixel or two): pixels that are much darker than the lips (shadow in the mouth) or clearly
 * less red than them (teeth). Each column is then remapped vertically so the upper lip's lower edge and
 * the lower lip's upper edge meet on a seam line; the lips and the skin next to them stretch a little to
 * cover the gap. The seam is what the renderer later opens the mouth along (it follows a smile's curve).
 */
import type { MouthAnimation, Point } from './types.ts';
import type { RgbaImage } from './image.ts';

/** Skin this far (mouth widths) above / below the gap stretches to cover it: spread thin enough not to show. */
const UPPER_STRETCH = 0.2;
const LOWER_STRETCH = 0.3;
/** The lips meet this far down the gap: the jaw closes more than the upper lip comes down. */
const SEAM_POSITION = 0.45;
/** Landmarks of the inner lip are searched this far (px) beyond their own extent for gap pixels. */
const GAP_SEARCH_MARGIN = 2;
/** ... and this far (mouth widths) beyond the lip corners, for shadow only (skin there can be as pale as teeth). */
const CORNER_SEARCH = 0.08;
/**
 * A gap pixel is darker than this fraction of the lips' luma (shadow in the mouth, the dark gaps between
 * teeth), or less red than halfway between lips and mouth inside when they differ by at least this much (V).
 */
const GAP_DARK_FRACTION = 0.65;
const TEETH_MIN_REDNESS_CONTRAST = 6;
/** What lies inside the inner lip is judged by this quantile of its redness (V). */
const TEETH_QUANTILE = 0.25;
/** Rows of lip colour inside a column's gap that still count as gap (a grey gap between two teeth, a shine). */
const MAX_GAP_HOLE_PX = 1;
/** The pixel rows bordering the gap are part lip, part tooth: this much of them is dropped with the gap. */
const MIXED_EDGE_PX = 0.6;
/** Where the lips meet, a faint shadow line (fraction of brightness removed). */
const SEAM_SHADE = 0.22;

export interface ClosedLips {
  /** The photo with the lips closed; the same object as the input when there was no gap. */
  image: RgbaImage;
  /** Seam between the lips, y in pixel-centre coordinates, for any column (constant beyond the corners). */
  seamAt(x: number): number;
  /** Columns in which a gap was closed. */
  closedColumns: number;
}

interface Span {
  top: number;
  bottom: number;
}

/** Vertical extent of a closed polygon at column centre x + 0.5 (edge coordinates), or null. */
function polygonSpan(polygon: readonly Point[], x: number): Span | null {
  const cx = x + 0.5;
  let top = Infinity;
  let bottom = -Infinity;
  for (let i = 0; i < polygon.length; i++) {
    const a = polygon[i];
    const b = polygon[(i + 1) % polygon.length];
    if ((a.x <= cx && b.x > cx) || (b.x <= cx && a.x > cx)) {
      const y = a.y + ((cx - a.x) / (b.x - a.x)) * (b.y - a.y);
      top = Math.min(top, y);
      bottom = Math.max(bottom, y);
    }
  }
  return top <= bottom ? { top, bottom } : null;
}

function luma(data: Uint8Array, o: number): number {
  return 0.2568 * data[o] + 0.5041 * data[o + 1] + 0.0979 * data[o + 2];
}

function redness(data: Uint8Array, o: number): number {
  return 0.4392 * data[o] - 0.3678 * data[o + 1] - 0.0714 * data[o + 2];
}

function quantile(values: number[], q: number): number {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
}

function median(values: number[]): number {
  return quantile(values, 0.5);
}

export function closeLips(source: RgbaImage, animation: MouthAnimation): ClosedLips {
  const { x: cx, y: cy } = animation.mouth_center;
  const mw = animation.mouth_width;
  const x0 = Math.max(0, Math.floor(cx - 1.5 * mw));
  const x1 = Math.min(source.width, Math.ceil(cx + 1.5 * mw));
  const inner = animation.inner_lip ?? [];
  const outer = animation.outer_lip ?? [];
  const gaps: Array<Span | null> = new Array(x1 - x0).fill(null);
  /** Midpoints of the inner lip (weak evidence) and of the found gap: the seam is a parabola through them. */
  const midline: WeightedPoint[] = [];
  let left = cx - 0.5 * mw;
  let right = cx + 0.5 * mw;
  const { data, width } = source;

  if (inner.length >= 3) {
    const innerSpans = Array.from({ length: x1 - x0 }, (_, i) => polygonSpan(inner, x0 + i));
    // Reference colours: the lips (between outer and inner contour) and what lies between them.
    const lipLuma: number[] = [];
    const lipRedness: number[] = [];
    const insideRedness: number[] = [];
    for (let i = 0; i < x1 - x0; i++) {
      const span = innerSpans[i];
      const ring = outer.length >= 3 ? polygonSpan(outer, x0 + i) : null;
      if (span)
        for (let y = Math.ceil(span.top); y < span.bottom; y++)
          insideRedness.push(redness(data, (y * width + x0 + i) * 4));
      if (!ring) continue;
      for (let y = Math.ceil(ring.top); y < ring.bottom; y++) {
        if (span && y + 0.5 >= span.top - 1 && y + 0.5 <= span.bottom + 1) continue;
        const o = (y * width + x0 + i) * 4;
        lipLuma.push(luma(data, o));
        lipRedness.push(redness(data, o));
      }
    }
    const lipY = median(lipLuma);
    const lipV = median(lipRedness);
    // The least red part of what lies inside the inner lip: its teeth, when it shows any. Not its median: landmarks
    // that put the inner lip a few pixels into the lips (a small face) fill half of it with lip, and the teeth went
    // unseen, so they stayed in the rest face and rode down on the lower lip (two rows of teeth).
    const insideV = quantile(insideRedness, TEETH_QUANTILE);
    const teethVisible = lipV - insideV >= TEETH_MIN_REDNESS_CONTRAST;
    const rednessLimit = (lipV + insideV) / 2;
    const isShadow = (o: number): boolean => Number.isFinite(lipY) && luma(data, o) < GAP_DARK_FRACTION * lipY;
    const isTeeth = (o: number): boolean => teethVisible && redness(data, o) < rednessLimit;

    const innerLeft = Math.min(...inner.map((p) => p.x));
    const innerRight = Math.max(...inner.map((p) => p.x));
    // Corners: as far as either contour reaches, plus a little (landmarks often stop short of a smile's corner).
    const cornerLeft = Math.min(innerLeft, ...outer.map((p) => p.x)) - CORNER_SEARCH * mw;
    const cornerRight = Math.max(innerRight, ...outer.map((p) => p.x)) + CORNER_SEARCH * mw;
    for (let i = 0; i < x1 - x0; i++) {
      const x = x0 + i;
      let span = innerSpans[i];
      // Beyond the inner contour a smile often leaves dark corners: search the lips' height there, for shadow only.
      const beyondCorner = !span && x + 0.5 > cornerLeft && x + 0.5 < cornerRight;
      if (beyondCorner) {
        const nearestInner = polygonSpan(
          inner,
          Math.min(Math.max(x, Math.ceil(innerLeft)), Math.floor(innerRight) - 1),
        );
        const lips = outer.length >= 3 ? polygonSpan(outer, x) : null;
        span =
          nearestInner && lips
            ? { top: Math.min(nearestInner.top, lips.top), bottom: Math.max(nearestInner.bottom, lips.bottom) }
            : (nearestInner ?? lips);
      }
      if (!span) continue;
      if (!beyondCorner) midline.push({ x, y: (span.top + span.bottom) / 2, weight: 0.2 });
      const from = Math.max(0, Math.floor(span.top - GAP_SEARCH_MARGIN));
      const to = Math.min(source.height - 1, Math.ceil(span.bottom + GAP_SEARCH_MARGIN));
      const run = gapRun(from, to, (span.top + span.bottom) / 2, (y) => {
        const o = (y * width + x) * 4;
        return beyondCorner ? isShadow(o) : isShadow(o) || isTeeth(o);
      });
      if (run) gaps[i] = { top: run.top - MIXED_EDGE_PX, bottom: run.bottom + MIXED_EDGE_PX };
    }
    left = innerLeft;
    right = innerRight;
  }

  // A column between two gap columns is part of the gap even where nothing stood out (a grey gap between teeth).
  for (let i = 1; i < gaps.length - 1; i++) {
    const before = gaps[i - 1];
    const after = gaps[i + 1] ?? gaps[i + 2];
    if (!gaps[i] && before && after)
      gaps[i] = { top: (before.top + after.top) / 2, bottom: (before.bottom + after.bottom) / 2 };
  }
  // Smooth the gap edges along x so the closed lips do not carry a one-pixel staircase.
  const smoothed = gaps.map((gap, i) => {
    if (!gap) return null;
    let top = 0;
    let bottom = 0;
    let weight = 0;
    for (let k = -1; k <= 1; k++) {
      const neighbour = gaps[i + k];
      if (!neighbour) continue;
      const w = k === 0 ? 2 : 1;
      top += w * neighbour.top;
      bottom += w * neighbour.bottom;
      weight += w;
    }
    return { top: top / weight, bottom: bottom / weight };
  });

  for (let i = 0; i < smoothed.length; i++) {
    const gap = smoothed[i];
    if (gap)
      midline.push({ x: x0 + i, y: gap.top + SEAM_POSITION * (gap.bottom - gap.top), weight: gap.bottom - gap.top });
  }
  const fit = fitParabola(midline, cx, mw);
  const seam = new Float32Array(x1 - x0);
  for (let i = 0; i < seam.length; i++) {
    const x = Math.min(right, Math.max(left, x0 + i + 0.5));
    seam[i] = fit ? fit(x) : cy;
  }

  let closedColumns = 0;
  let image = source;
  for (let i = 0; i < smoothed.length; i++) {
    const gap = smoothed[i];
    if (!gap || gap.bottom - gap.top < 0.5) continue;
    if (image === source) image = { width: source.width, height: source.height, data: source.data.slice() };
    const height = gap.bottom - gap.top;
    seam[i] = Math.min(gap.bottom - 0.2 * height, Math.max(gap.top + 0.2 * height, seam[i]));
    closeColumn(source, image, x0 + i, gap, seam[i], mw);
    closedColumns++;
  }

  // Pixel-centre coordinates from here on; a light smoothing hides where clamping bent the line.
  const seamLine = smooth(seam.map((y) => y - 0.5));
  return {
    image,
    closedColumns,
    seamAt(x: number): number {
      const position = Math.min(seamLine.length - 1, Math.max(0, x - x0));
      const lower = Math.floor(position);
      const upper = Math.min(seamLine.length - 1, lower + 1);
      return seamLine[lower] + (seamLine[upper] - seamLine[lower]) * (position - lower);
    },
  };
}

/**
 * The run of gap rows in [from, to] nearest the inner lip's middle, holes of up to `MAX_GAP_HOLE_PX` bridged
 * (a grey gap between two teeth), in edge coordinates; null without gap rows. Only the run: a highlight on the
 * lip (lipstick shines less red than the lip around it) lies apart from the gap and must not widen it — taking
 * the first and last gap row of the column pulled skin down through a red upper lip and split it in two.
 */
function gapRun(from: number, to: number, middle: number, isGap: (y: number) => boolean): Span | null {
  const runs: Span[] = [];
  let start = -1;
  let lastGap = -1;
  for (let y = from; y <= to; y++) {
    if (!isGap(y)) continue;
    if (start < 0 || y - lastGap - 1 > MAX_GAP_HOLE_PX) {
      if (start >= 0) runs.push({ top: start, bottom: lastGap + 1 });
      start = y;
    }
    lastGap = y;
  }
  if (start >= 0) runs.push({ top: start, bottom: lastGap + 1 });
  let best: Span | null = null;
  let bestDistance = Infinity;
  for (const run of runs) {
    const distance = Math.max(0, run.top - middle, middle - run.bottom);
    if (distance < bestDistance) {
      best = run;
      bestDistance = distance;
    }
  }
  return best;
}

/**
 * Column x: the upper stretch [gap.top − A, gap.top] fills [gap.top − A, seam] and the lower stretch
 * [gap.bottom, gap.bottom + B] fills [seam, gap.bottom + B] (edge coordinates). Samples never cross into the gap.
 */
function closeColumn(source: RgbaImage, out: RgbaImage, x: number, gap: Span, seam: number, mw: number): void {
  const above = UPPER_STRETCH * mw;
  const below = LOWER_STRETCH * mw;
  const from = Math.max(0, Math.floor(gap.top - above));
  const to = Math.min(source.height, Math.ceil(gap.bottom + below));
  for (let y = from; y < to; y++) {
    const centre = y + 0.5;
    let sourceRow: number;
    if (centre < seam) {
      const start = gap.top - above;
      sourceRow = Math.min(start + (centre - start) * (above / (seam - start)) - 0.5, gap.top - 1);
    } else {
      sourceRow = Math.max(gap.bottom + (centre - seam) * (below / (gap.bottom + below - seam)) - 0.5, gap.bottom);
    }
    const shade = 1 - SEAM_SHADE * Math.max(0, 1 - Math.abs(centre - seam) / 1.2);
    sampleColumn(source, x, sourceRow, shade, out, (y * out.width + x) * 4);
  }
}

function sampleColumn(image: RgbaImage, x: number, row: number, shade: number, out: RgbaImage, o: number): void {
  const clamped = Math.min(image.height - 1, Math.max(0, row));
  const r0 = Math.floor(clamped);
  const r1 = Math.min(image.height - 1, r0 + 1);
  const f = clamped - r0;
  const a = (r0 * image.width + x) * 4;
  const b = (r1 * image.width + x) * 4;
  for (let c = 0; c < 3; c++) out.data[o + c] = (image.data[a + c] * (1 - f) + image.data[b + c] * f) * shade;
}

interface WeightedPoint {
  x: number;
  y: number;
  weight: number;
}

/** Weighted least-squares parabola y = a + b·t + c·t², t = (x − cx) / mw; null without enough points. */
function fitParabola(points: readonly WeightedPoint[], cx: number, mw: number): ((x: number) => number) | null {
  if (points.length < 3) return null;
  // Normal equations of the 3×3 system, solved by Cramer's rule (well conditioned: t stays within ±1).
  const m = [0, 0, 0, 0, 0];
  const r = [0, 0, 0];
  for (const p of points) {
    const t = (p.x + 0.5 - cx) / mw;
    let power = p.weight;
    for (let k = 0; k < 5; k++) {
      m[k] += power;
      if (k < 3) r[k] += power * p.y;
      power *= t;
    }
  }
  const det3 = (a: number[]) =>
    a[0] * (a[4] * a[8] - a[5] * a[7]) - a[1] * (a[3] * a[8] - a[5] * a[6]) + a[2] * (a[3] * a[7] - a[4] * a[6]);
  const matrix = [m[0], m[1], m[2], m[1], m[2], m[3], m[2], m[3], m[4]];
  const det = det3(matrix);
  if (Math.abs(det) < 1e-9) return null;
  const solve = (column: number) =>
    det3(matrix.map((value, i) => (i % 3 === column ? r[Math.floor(i / 3)] : value))) / det;
  const [a, b, c] = [solve(0), solve(1), solve(2)];
  return (x: number) => {
    const t = (x - cx) / mw;
    return a + b * t + c * t * t;
  };
}

/** 5-tap box filter along the line. */
function smooth(line: Float32Array): Float32Array {
  const out = new Float32Array(line.length);
  for (let i = 0; i < line.length; i++) {
    let sum = 0;
    let count = 0;
    for (let k = -2; k <= 2; k++) {
      if (i + k < 0 || i + k >= line.length) continue;
      sum += line[i + k];
      count++;
    }
    out[i] = sum / count;
  }
  return out;
}
