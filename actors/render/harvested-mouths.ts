/**
 * A video avatar's harvested mouths (`metadata.clip.mouths`, docs/avatars.md): the person's own lips, teeth and
 * tongue cut from the clip at creation (`actors/faces/mouth-harvest.ts`), stored as one PNG atlas of equal cells
 * plus a JSON index keyed by the mouth pose each cell shows. This module is the format both sides share and the
 * render side: a speaking frame first warps the loop frame along its own lips to the sample's opening (the chin
 * drops with the mouth, `clip-warp.ts`), then lays the sample nearest to the wanted pose aligned to that frame's lips
 * (a similarity transform: the mouth's centre, width and roll), its colour shifted to the frame's skin on the
 * feather, through a mask that follows the frame's lip contour. A harvest too thin to follow speech
 * (`MIN_USABLE_OPENINGS`) is not laid at all: the renderer warps.
 */
import sharp from 'sharp';
import { planes, rgbToYuv } from './i420.ts';
import type { RgbaImage } from './image.ts';
import { smoothstep } from './idle-motion.ts';
import { edgeAt, jawDropOf, lipEdges, planeBoxOf, uprightAt, warpLoopFrame, warpMaskOf } from './clip-warp.ts';
import type { I420Frame, MouthAnimation, MouthPose, Point } from './types.ts';

/**
 * Samples are stored scaled so the mouth (corner to corner) is this wide: detail enough for lips and teeth at the
 * sizes avatars show a mouth (40–130 px), and a fixed cell size whatever the clip's framing.
 */
export const MOUTH_SAMPLE_WIDTH_PX = 64;
/**
 * A cell around the mouth centre, in mouth widths: the lips, the teeth between them and the chin below an open
 * jaw; wide enough that the feathered edge lies on cheek skin.
 */
export const MOUTH_CELL_REGION = { left: -1.25, right: 1.25, top: -0.6, bottom: 1.4 };
export const MOUTH_CELL_WIDTH = Math.round((MOUTH_CELL_REGION.right - MOUTH_CELL_REGION.left) * MOUTH_SAMPLE_WIDTH_PX);
export const MOUTH_CELL_HEIGHT = Math.round((MOUTH_CELL_REGION.bottom - MOUTH_CELL_REGION.top) * MOUTH_SAMPLE_WIDTH_PX);
/** Where the mouth centre lies in a cell. */
export const MOUTH_CELL_CENTER: Point = {
  x: -MOUTH_CELL_REGION.left * MOUTH_SAMPLE_WIDTH_PX,
  y: -MOUTH_CELL_REGION.top * MOUTH_SAMPLE_WIDTH_PX,
};
/**
 * The laid sample is opaque over the frame's lips (its outer-lip contour, the lower lip lowered by the pose's jaw
 * drop, grown by this margin, mouth widths) and fades to the frame over this feather beyond it, on the skin right
 * around the lips: a seam cannot fall on the chin or cheeks, where the sample and the frame differ most.
 */
const LIP_MARGIN = 0.05;
const LIP_FEATHER = 0.22;
/** The colour shift towards the frame's skin is limited to this (levels): beyond, the sample is not the same face. */
const MAX_COLOUR_SHIFT = 48;
/**
 * Distinct opening steps (of `USABILITY_STEPS`, closed included) a harvest must cover for a session to lay it: fewer,
 * and most openings speech asks for would be laid as a neighbour far too open or too closed (one flat mouth for
 * every vowel), so the renderer warps the loop frame instead. A closed sample is required too (silence and m/b/p).
 */
export const MIN_USABLE_OPENINGS = 4;
const USABILITY_STEPS = 5;
/**
 * Samples a render worker prepares at most from a bundle's index (creation writes ≤ 18): a bundle made elsewhere
 * cannot make a worker hold more than 64 patches (~2 MB at a 512² avatar).
 */
const MAX_SAMPLES_PREPARED = 64;
/** A loop frame whose own lips are parted by more than this (mouth widths beyond the rest gap) gets the closed sample while silent. */
export const OWN_MOUTH_OPEN = 0.06;

/**
 * How much more a sample's opening counts than its shape when choosing the one nearest to a pose: how far the lips
 * part is what follows the voice, and a real clip's harvest holds few samples of each shape (one had 4 neutral ones
 * of 14). At 2, a wide or round sample 0.4 too closed beat a neutral one at the right opening, and a detector on the
 * rendered frames followed the wanted opening at r 0.68 and 0.79 on two real clips; at 8, 0.75 and 0.85 (32: no better).
 */
export const OPENING_WEIGHT = 8;

/** One harvested mouth: the pose it shows and where it lies in the atlas. */
export interface MouthSample extends MouthPose {
  /** Cell index, row-major in the atlas's `columns`. */
  cell: number;
  /** The clip frame it was cut from (25 fps from the clip's start), for anyone checking the harvest. */
  frame: number;
}

/** `mouths/index.json`. */
export interface MouthSampleIndex {
  version: 1;
  cell: { width: number; height: number; center: Point; mouth_width: number };
  columns: number;
  /** The lips' rest gap (inner lip, mouth widths) in this clip: what "closed" measures as for this face and detector. */
  rest_gap: number;
  samples: MouthSample[];
}

/** The harvested mouths as a session hands them to render workers (shared memory, like the loop frames). */
export interface MouthsSource {
  atlasPng: Uint8Array;
  indexJson: Uint8Array;
}

/** The vertical gap between the inner lips (iBUG 61–67, 62–66, 63–65), pixels; 0 without inner-lip points. */
export function innerLipGap(a: MouthAnimation): number {
  const lip = a.inner_lip;
  if (!lip || lip.length < 8) return 0;
  let sum = 0;
  for (const [upper, lower] of [
    [1, 7],
    [2, 6],
    [3, 5],
  ])
    sum += Math.hypot(lip[lower].x - lip[upper].x, lip[lower].y - lip[upper].y);
  return sum / 3;
}

/** The head's roll: the angle of the line through the eyes, radians. */
export function headRoll(a: MouthAnimation): number {
  return Math.atan2(a.right_eye.y - a.left_eye.y, a.right_eye.x - a.left_eye.x);
}

/** One sample ready to lay: its cell as Y, U, V planes (full cell resolution), upright, mouth at the cell centre. */
interface PreparedSample {
  pose: MouthPose;
  planes: [Float32Array, Float32Array, Float32Array];
}

/** The cell's geometry as the index gives it. */
type CellGeometry = MouthSampleIndex['cell'];

/** The harvested mouths of one avatar, ready to lay on loop frames. */
export class HarvestedMouths {
  /** The nearest sample per pose asked for (the renderer asks for quantised poses, so this stays small). */
  private readonly chosen = new Map<number, PreparedSample>();

  private constructor(
    private readonly samples: PreparedSample[],
    private readonly cell: CellGeometry,
    readonly restGap: number,
  ) {}

  /** Decodes the atlas into per-sample planes; null when the harvest cannot follow speech (`MIN_USABLE_OPENINGS`). */
  static async prepare(source: MouthsSource): Promise<HarvestedMouths | null> {
    const index = JSON.parse(Buffer.from(source.indexJson).toString('utf8')) as MouthSampleIndex;
    const { data, info } = await sharp(Buffer.from(source.atlasPng))
      .ensureAlpha()
      .raw()
      .toBuffer({ resolveWithObject: true });
    const atlas: RgbaImage = {
      width: info.width,
      height: info.height,
      data: new Uint8Array(data.buffer, data.byteOffset, data.length),
    };
    const { width: cellWidth, height: cellHeight } = index.cell;
    if (!(cellWidth > 1 && cellHeight > 1 && index.cell.mouth_width > 0)) return null;
    const fits = (sample: MouthSample) =>
      Number.isInteger(sample.cell) &&
      sample.cell >= 0 &&
      ((sample.cell % index.columns) + 1) * cellWidth <= atlas.width &&
      (Math.floor(sample.cell / index.columns) + 1) * cellHeight <= atlas.height;
    const kept = index.samples.filter(fits).slice(0, MAX_SAMPLES_PREPARED);
    if (!usableHarvest(kept)) return null;
    const samples = kept.map((sample) => ({
      pose: { open: sample.open, wide: sample.wide, round: sample.round },
      planes: cellPlanes(
        atlas,
        (sample.cell % index.columns) * cellWidth,
        Math.floor(sample.cell / index.columns) * cellHeight,
        cellWidth,
        cellHeight,
      ),
    }));
    return new HarvestedMouths(samples, index.cell, index.rest_gap);
  }

  get count(): number {
    return this.samples.length;
  }

  /** The sample nearest to `pose` (opening first, then shape). */
  nearest(pose: MouthPose): PreparedSample {
    const key =
      (Math.round(pose.open * 1000) * 1001 + Math.round(pose.wide * 1000)) * 1001 + Math.round(pose.round * 1000);
    let best = this.chosen.get(key);
    if (!best) {
      let bestDistance = Infinity;
      for (const sample of this.samples) {
        const d =
          OPENING_WEIGHT * (sample.pose.open - pose.open) ** 2 +
          (sample.pose.wide - pose.wide) ** 2 +
          (sample.pose.round - pose.round) ** 2;
        if (d < bestDistance) [best, bestDistance] = [sample, d];
      }
      this.chosen.set(key, best!);
    }
    return best!;
  }

  /** Whether a loop frame's own lips are parted (a clip of someone talking): silence then lays the closed sample over them. */
  ownMouthOpen(face: MouthAnimation): boolean {
    return face.mouth_width > 0 && innerLipGap(face) / face.mouth_width - this.restGap > OWN_MOUTH_OPEN;
  }

  /**
   * Lays the sample nearest to `pose` on `frame` (a copy of `source`, the loop frame it shows, whose tracked face is
   * `face`): the frame warped to the sample's opening, then the sample aligned to its lips and colour-matched.
   */
  lay(frame: I420Frame, source: I420Frame, pose: MouthPose, face: MouthAnimation): void {
    const sample = this.nearest(pose);
    warpLoopFrame(frame, source, face, sample.pose);
    layAligned(frame, sample, this.cell, face, sample.pose);
  }

  /**
   * What `lay` changes, as the renderer knows it (the artefact measures take it as the composite, `warpMaskOf`): what
   * the warp to the sample's opening moves or paints, and every pixel the sample's mask covers.
   */
  claimOf(source: I420Frame, pose: MouthPose, face: MouthAnimation): Uint8Array {
    const sample = this.nearest(pose);
    const claim = warpMaskOf(source, face, sample.pose) ?? new Uint8Array(source.width * source.height);
    const frame = { ...source, data: source.data.slice() };
    warpLoopFrame(frame, source, face, sample.pose);
    layAligned(frame, sample, this.cell, face, sample.pose, claim);
    return claim;
  }
}

/** Whether a harvest shows enough of speech to lay: a closed sample and `MIN_USABLE_OPENINGS` distinct opening steps. */
export function usableHarvest(samples: readonly MouthPose[]): boolean {
  const steps = new Set(samples.map((s) => Math.round(s.open * (USABILITY_STEPS - 1))));
  return steps.has(0) && steps.size >= MIN_USABLE_OPENINGS;
}

/**
 * Lays one harvest cell (upright RGBA as cut at creation, `MOUTH_CELL_WIDTH` × `MOUTH_CELL_HEIGHT`) on `frame` at
 * `reference`'s lips as a session lays a sample there (its mask grown to the widest opening, since the cell's is not
 * known yet): creation reads how each candidate looks once laid.
 */
export function layCell(frame: I420Frame, cell: Uint8Array, reference: MouthAnimation): void {
  const geometry: CellGeometry = {
    width: MOUTH_CELL_WIDTH,
    height: MOUTH_CELL_HEIGHT,
    center: MOUTH_CELL_CENTER,
    mouth_width: MOUTH_SAMPLE_WIDTH_PX,
  };
  const atlas: RgbaImage = { width: MOUTH_CELL_WIDTH, height: MOUTH_CELL_HEIGHT, data: cell };
  const pose = { open: 1, wide: 0, round: 0 };
  layAligned(
    frame,
    { pose, planes: cellPlanes(atlas, 0, 0, MOUTH_CELL_WIDTH, MOUTH_CELL_HEIGHT) },
    geometry,
    reference,
    pose,
  );
}

/** One atlas cell as Y, U, V float planes (BT.601 limited range, as `rgbaToI420`), each at the cell's resolution. */
function cellPlanes(
  atlas: RgbaImage,
  left: number,
  top: number,
  width: number,
  height: number,
): [Float32Array, Float32Array, Float32Array] {
  const y = new Float32Array(width * height);
  const u = new Float32Array(width * height);
  const v = new Float32Array(width * height);
  for (let row = 0; row < height; row++) {
    for (let col = 0; col < width; col++) {
      const o = ((top + row) * atlas.width + left + col) * 4;
      const colour = rgbToYuv(atlas.data[o], atlas.data[o + 1], atlas.data[o + 2]);
      const i = row * width + col;
      y[i] = colour.y;
      u[i] = colour.u;
      v[i] = colour.v;
    }
  }
  return [y, u, v];
}

/** The frame's lips in their upright frame (pixels from the mouth centre), for the mask. */
interface LipMask {
  cx: number;
  cy: number;
  cos: number;
  sin: number;
  mw: number;
  /** Outer-lip corners (u) and, per column between them, the upper lip's top and the (lowered) lower lip's bottom. */
  left: number;
  right: number;
  upper: Point[];
  lower: Point[];
  drop: number;
  feather: number;
}

function lipMaskOf(face: MouthAnimation, pose: MouthPose): LipMask | null {
  const mw = face.mouth_width;
  const outer = face.outer_lip;
  if (!(mw > 4) || !outer || outer.length < 6) return null;
  // The cells were cut upright by the head's roll (`cutCell`): the same roll aligns them back.
  const { toUpright, ...upright } = uprightAt(face.mouth_center, headRoll(face));
  const { upper, lower } = lipEdges(outer.map(toUpright));
  const margin = LIP_MARGIN * mw;
  return {
    ...upright,
    mw,
    left: upper[0].x - margin,
    right: upper[upper.length - 1].x + margin,
    upper: upper.map((p) => ({ x: p.x, y: p.y - margin })),
    lower: lower.map((p) => ({ x: p.x, y: p.y + margin })),
    drop: jawDropOf(pose, mw),
    feather: LIP_FEATHER * mw,
  };
}

/** The mask at upright (u, v): 1 over the lips, fading to 0 across the feather. */
function maskAt(m: LipMask, u: number, v: number): number {
  const half = (m.right - m.left) / 2;
  const lateral = Math.abs(u - (m.left + m.right) / 2) / half;
  const top = edgeAt(m.upper, u);
  const bottom = edgeAt(m.lower, u) + m.drop * Math.max(0, 1 - lateral * lateral);
  const dv = Math.max(0, top - v, v - bottom);
  const du = Math.max(0, m.left - u, u - m.right);
  const d = Math.hypot(du, dv);
  return d >= m.feather ? 0 : 1 - smoothstep(0, m.feather, d);
}

/**
 * Lays `sample` on `frame` aligned to `face`'s lips: every pixel under the mask maps to the cell by the similarity
 * that takes the frame's mouth (centre, width, roll) to the cell's, each plane shifted by the frame's mean minus the
 * sample's over the feather (the skin right around the lips), so the laid mouth takes the frame's light.
 */
function layAligned(
  frame: I420Frame,
  sample: PreparedSample,
  cell: CellGeometry,
  face: MouthAnimation,
  pose: MouthPose,
  claim?: Uint8Array,
): void {
  const mask = lipMaskOf(face, pose);
  if (!mask) return;
  const p = planes(frame);
  layPlane(p.y, frame.width, frame.height, 1, sample.planes[0], cell, mask, claim);
  layPlane(p.u, p.cw, p.ch, 2, sample.planes[1], cell, mask);
  layPlane(p.v, p.cw, p.ch, 2, sample.planes[2], cell, mask);
}

function layPlane(
  dst: Uint8Array,
  width: number,
  height: number,
  scale: number,
  cellPlane: Float32Array,
  cell: CellGeometry,
  m: LipMask,
  claim?: Uint8Array,
): void {
  const { cx, cy, cos, sin, mw, feather } = m;
  const offset = scale === 1 ? 0 : 0.5;
  const perPixel = cell.mouth_width / mw;
  const box = {
    left: m.left - feather,
    right: m.right + feather,
    top: Math.min(...m.upper.map((q) => q.y)) - feather,
    bottom: Math.max(...m.lower.map((q) => q.y)) + m.drop + feather,
  };
  const { x0, x1, y0, y1 } = planeBoxOf(m, box, scale, width, height);
  const boxWidth = x1 - x0 + 1;
  const alpha = new Float32Array(Math.max(0, boxWidth * (y1 - y0 + 1)));
  const value = new Float32Array(alpha.length);
  // Pass 1: the mask and the aligned sample; the colour offset from the feather's outer part.
  let ringSum = 0;
  let ringCount = 0;
  for (let py = y0; py <= y1; py++) {
    for (let px = x0; px <= x1; px++) {
      const fx = px * scale + offset - cx;
      const fy = py * scale + offset - cy;
      const u = fx * cos + fy * sin;
      const v = -fx * sin + fy * cos;
      const a = maskAt(m, u, v);
      if (a <= 0) continue;
      const sampled = sampleCell(cellPlane, cell, cell.center.x + u * perPixel, cell.center.y + v * perPixel);
      if (Number.isNaN(sampled)) continue;
      const i = (py - y0) * boxWidth + px - x0;
      alpha[i] = a;
      value[i] = sampled;
      if (claim) claim[py * width + px] = 1;
      if (a < 0.5) {
        ringSum += dst[py * width + px] - sampled;
        ringCount++;
      }
    }
  }
  const shift = ringCount > 0 ? Math.max(-MAX_COLOUR_SHIFT, Math.min(MAX_COLOUR_SHIFT, ringSum / ringCount)) : 0;
  // Pass 2: blend.
  for (let py = y0; py <= y1; py++) {
    for (let px = x0; px <= x1; px++) {
      const i = (py - y0) * boxWidth + px - x0;
      const a = alpha[i];
      if (a <= 0) continue;
      const d = py * width + px;
      const blended = dst[d] + (value[i] + shift - dst[d]) * a;
      dst[d] = blended < 0 ? 0 : blended > 255 ? 255 : (blended + 0.5) | 0;
    }
  }
}

/** Bilinear from one cell plane; NaN outside the cell. */
function sampleCell(plane: Float32Array, cell: CellGeometry, x: number, y: number): number {
  if (x < 0 || y < 0 || x > cell.width - 1 || y > cell.height - 1) return NaN;
  const x0 = Math.min(Math.floor(x), cell.width - 2);
  const y0 = Math.min(Math.floor(y), cell.height - 2);
  const fx = x - x0;
  const fy = y - y0;
  const a = y0 * cell.width + x0;
  const b = a + cell.width;
  return (plane[a] * (1 - fx) + plane[a + 1] * fx) * (1 - fy) + (plane[b] * (1 - fx) + plane[b + 1] * fx) * fy;
}
