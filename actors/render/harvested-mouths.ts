/**
 * A video avatar's harvested mouths (`metadata.clip.mouths`, docs/avatars.md): the person's own lips, teeth and
 * tongue cut from the clip at creation (`actors/faces/mouth-harvest.ts`), stored as one PNG atlas of equal cells
 * plus a JSON index keyed by the mouth pose each cell shows. This module is the format both sides share and the
 * render side: the atlas becomes one feathered I420 patch per sample at the reference frame's mouth, and a
 * speaking frame lays the sample nearest to the wanted pose at that frame's tracked mouth, its colour shifted to
 * the frame's own skin around it, so nothing dark is drawn and no seam shows.
 */
import sharp from 'sharp';
import { planes } from './i420.ts';
import type { RgbaImage } from './image.ts';
import { blendPlane, patchFromRgba, type I420Patch } from './patch.ts';
import { smoothstep } from './idle-motion.ts';
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
export const MOUTH_CELL_CENTER: Point = { x: -MOUTH_CELL_REGION.left * MOUTH_SAMPLE_WIDTH_PX, y: -MOUTH_CELL_REGION.top * MOUTH_SAMPLE_WIDTH_PX };
/**
 * The laid sample is opaque inside this ellipse (mouth widths around the centre: the lips and their opening,
 * whatever the loop frame's own mouth does) and fades to transparent at the outer one, on skin.
 */
const OPAQUE_RADII = { x: 0.72, up: 0.38, down: 0.7 };
const FEATHER_RADII = { x: 1.2, up: 0.58, down: 1.35 };
/** The colour shift towards the frame's skin is limited to this (levels): beyond, the sample is not the same face. */
const MAX_COLOUR_SHIFT = 48;
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
  for (const [upper, lower] of [[1, 7], [2, 6], [3, 5]]) sum += Math.hypot(lip[lower].x - lip[upper].x, lip[lower].y - lip[upper].y);
  return sum / 3;
}

/** The head's roll: the angle of the line through the eyes, radians. */
export function headRoll(a: MouthAnimation): number {
  return Math.atan2(a.right_eye.y - a.left_eye.y, a.right_eye.x - a.left_eye.x);
}

interface PreparedSample {
  pose: MouthPose;
  patch: I420Patch;
  /** Patch pixels on the feather ring (luma index, chroma index) and the sample's mean colour there. */
  ringLuma: Int32Array;
  ringChroma: Int32Array;
  mean: { y: number; u: number; v: number };
}

/** The harvested mouths of one avatar, ready to lay on loop frames. */
export class HarvestedMouths {
  /** The nearest sample per pose asked for (the renderer asks for quantised poses, so this stays small). */
  private readonly chosen = new Map<number, PreparedSample>();

  private constructor(
    private readonly samples: PreparedSample[],
    /** The reference mouth the patches were made at (the loop's first frame). */
    readonly reference: MouthAnimation,
    readonly restGap: number,
  ) {}

  /** Decodes the atlas and makes every sample's patch at `reference`'s mouth (size, roll, position). */
  static async prepare(source: MouthsSource, reference: MouthAnimation, frameWidth: number, frameHeight: number): Promise<HarvestedMouths> {
    const index = JSON.parse(Buffer.from(source.indexJson).toString('utf8')) as MouthSampleIndex;
    const { data, info } = await sharp(Buffer.from(source.atlasPng)).ensureAlpha().raw().toBuffer({ resolveWithObject: true });
    const atlas: RgbaImage = { width: info.width, height: info.height, data: new Uint8Array(data.buffer, data.byteOffset, data.length) };
    const { width: cellWidth, height: cellHeight } = index.cell;
    const fits = (sample: MouthSample) =>
      Number.isInteger(sample.cell) && sample.cell >= 0 && ((sample.cell % index.columns) + 1) * cellWidth <= atlas.width && (Math.floor(sample.cell / index.columns) + 1) * cellHeight <= atlas.height;
    const samples = index.samples
      .filter(fits)
      .slice(0, MAX_SAMPLES_PREPARED)
      .map((sample) => prepareSample(atlas, index, sample, reference, frameWidth, frameHeight));
    return new HarvestedMouths(samples, reference, index.rest_gap);
  }

  get count(): number {
    return this.samples.length;
  }

  /** The sample nearest to `pose` (opening first, then shape). */
  nearest(pose: MouthPose): PreparedSample {
    const key = (Math.round(pose.open * 1000) * 1001 + Math.round(pose.wide * 1000)) * 1001 + Math.round(pose.round * 1000);
    let best = this.chosen.get(key);
    if (!best) {
      let bestDistance = Infinity;
      for (const sample of this.samples) {
        const d = OPENING_WEIGHT * (sample.pose.open - pose.open) ** 2 + (sample.pose.wide - pose.wide) ** 2 + (sample.pose.round - pose.round) ** 2;
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
   * Lays the sample nearest to `pose` on `frame`, moved to `face`'s mouth, its colour shifted by the difference
   * between the frame's skin and the sample's on the feather ring.
   */
  lay(frame: I420Frame, pose: MouthPose, face: MouthAnimation): void {
    const sample = this.nearest(pose);
    const dx = Math.round(face.mouth_center.x - this.reference.mouth_center.x);
    const dy = Math.round(face.mouth_center.y - this.reference.mouth_center.y);
    blendShifted(frame, sample, dx, dy);
  }
}

/**
 * Lays one harvest cell (upright RGBA as cut at creation, `MOUTH_CELL_WIDTH` × `MOUTH_CELL_HEIGHT`) on `frame` at
 * `reference`'s mouth exactly as a session lays a sample there: creation reads how each candidate looks once laid.
 */
export function layCell(frame: I420Frame, cell: Uint8Array, reference: MouthAnimation): void {
  const single = { cell: { width: MOUTH_CELL_WIDTH, height: MOUTH_CELL_HEIGHT, center: MOUTH_CELL_CENTER, mouth_width: MOUTH_SAMPLE_WIDTH_PX }, columns: 1 };
  const atlas: RgbaImage = { width: MOUTH_CELL_WIDTH, height: MOUTH_CELL_HEIGHT, data: cell };
  blendShifted(frame, prepareSample(atlas, single, { cell: 0, frame: 0, open: 0, wide: 0, round: 0 }, reference, frame.width, frame.height), 0, 0);
}

function prepareSample(atlas: RgbaImage, index: Pick<MouthSampleIndex, 'cell' | 'columns'>, sample: MouthSample, reference: MouthAnimation, frameWidth: number, frameHeight: number): PreparedSample {
  const { cell } = index;
  const cellX = (sample.cell % index.columns) * cell.width;
  const cellY = Math.floor(sample.cell / index.columns) * cell.height;
  const mw = reference.mouth_width;
  const roll = headRoll(reference);
  const cos = Math.cos(roll);
  const sin = Math.sin(roll);
  const { x: cx, y: cy } = reference.mouth_center;
  const reach = Math.hypot(FEATHER_RADII.x, FEATHER_RADII.down) * mw;
  const left = Math.max(0, Math.floor((cx - reach) / 2) * 2);
  const top = Math.max(0, Math.floor((cy - reach) / 2) * 2);
  const right = Math.min(frameWidth, Math.ceil(cx + reach));
  const bottom = Math.min(frameHeight, Math.ceil(cy + reach));
  const width = Math.max(0, right - left);
  const height = Math.max(0, bottom - top);
  const image: RgbaImage = { width, height, data: new Uint8Array(width * height * 4) };
  const ring: number[] = [];
  const rgb = [0, 0, 0];
  for (let y = 0; y < height; y++) {
    for (let x = 0; x < width; x++) {
      // Into the upright face's frame (the cell is stored upright), in mouth widths.
      const fx = x + left - cx;
      const fy = y + top - cy;
      const u = (fx * cos + fy * sin) / mw;
      const v = (-fx * sin + fy * cos) / mw;
      const alpha = featherAlpha(u, v);
      if (alpha <= 0) continue;
      if (!sampleCell(atlas, cellX + MOUTH_CELL_CENTER.x + u * cell.mouth_width, cellY + MOUTH_CELL_CENTER.y + v * cell.mouth_width, cellX, cellY, cell, rgb)) continue;
      const o = (y * width + x) * 4;
      image.data[o] = rgb[0];
      image.data[o + 1] = rgb[1];
      image.data[o + 2] = rgb[2];
      image.data[o + 3] = Math.round(alpha * 255);
      if (alpha < 0.6) ring.push(y * width + x);
    }
  }
  const patch = patchFromRgba(image, 0, 0, width, height);
  patch.x = left;
  patch.y = top;
  const cw = (width + 1) >> 1;
  const ringChroma = [...new Set(ring.map((i) => (Math.floor(i / width) >> 1) * cw + ((i % width) >> 1)))];
  const mean = { y: meanAt(patch.luma, ring), u: meanAt(patch.u, ringChroma), v: meanAt(patch.v, ringChroma) };
  return { pose: { open: sample.open, wide: sample.wide, round: sample.round }, patch, ringLuma: Int32Array.from(ring), ringChroma: Int32Array.from(ringChroma), mean };
}

/** 1 inside the opaque ellipse, 0 outside the feather ellipse, smooth between (u, v in mouth widths, v down). */
function featherAlpha(u: number, v: number): number {
  const inner = Math.hypot(u / OPAQUE_RADII.x, v / (v < 0 ? OPAQUE_RADII.up : OPAQUE_RADII.down));
  const outer = Math.hypot(u / FEATHER_RADII.x, v / (v < 0 ? FEATHER_RADII.up : FEATHER_RADII.down));
  if (inner <= 1) return 1;
  if (outer >= 1) return 0;
  // Both radii grow linearly along a ray from the centre: where this pixel lies between the two ellipses on its ray.
  const t = (inner - 1) / (inner / outer - 1);
  return 1 - smoothstep(0, 1, t);
}

/** Bilinear RGB from the atlas inside one cell; false outside it. */
function sampleCell(atlas: RgbaImage, x: number, y: number, cellX: number, cellY: number, cell: { width: number; height: number }, out: number[]): boolean {
  if (x < cellX || y < cellY || x > cellX + cell.width - 1 || y > cellY + cell.height - 1) return false;
  const x0 = Math.min(Math.floor(x), cellX + cell.width - 2);
  const y0 = Math.min(Math.floor(y), cellY + cell.height - 2);
  const fx = x - x0;
  const fy = y - y0;
  const d = atlas.data;
  const a = (y0 * atlas.width + x0) * 4;
  const b = a + 4;
  const c = a + atlas.width * 4;
  const e = c + 4;
  for (let k = 0; k < 3; k++) out[k] = (d[a + k] * (1 - fx) + d[b + k] * fx) * (1 - fy) + (d[c + k] * (1 - fx) + d[e + k] * fx) * fy;
  return true;
}

function meanAt(plane: Uint8Array, indices: number[]): number {
  if (indices.length === 0) return 0;
  let sum = 0;
  for (const i of indices) sum += plane[i];
  return sum / indices.length;
}

/** Mean of a frame plane at the patch's ring positions placed at (left, top); NaN when none lies inside. */
function frameMeanAt(plane: Uint8Array, stride: number, rows: number, ring: Int32Array, patchWidth: number, left: number, top: number): number {
  let sum = 0;
  let count = 0;
  for (const i of ring) {
    const x = left + (i % patchWidth);
    const y = top + Math.floor(i / patchWidth);
    if (x < 0 || y < 0 || x >= stride || y >= rows) continue;
    sum += plane[y * stride + x];
    count++;
  }
  return count > 0 ? sum / count : NaN;
}

/** `blendPatch` with each plane's values shifted by the frame's mean minus the sample's on the feather ring. */
function blendShifted(frame: I420Frame, sample: PreparedSample, dx: number, dy: number): void {
  const p = planes(frame);
  const { patch } = sample;
  const left = patch.x + dx;
  const top = patch.y + dy;
  const cw = (patch.width + 1) >> 1;
  const ch = (patch.height + 1) >> 1;
  const shift = (frameMean: number, sampleMean: number) => (Number.isNaN(frameMean) ? 0 : Math.max(-MAX_COLOUR_SHIFT, Math.min(MAX_COLOUR_SHIFT, Math.round(frameMean - sampleMean))));
  const shiftY = shift(frameMeanAt(p.y, frame.width, frame.height, sample.ringLuma, patch.width, left, top), sample.mean.y);
  const shiftU = shift(frameMeanAt(p.u, p.cw, p.ch, sample.ringChroma, cw, left >> 1, top >> 1), sample.mean.u);
  const shiftV = shift(frameMeanAt(p.v, p.cw, p.ch, sample.ringChroma, cw, left >> 1, top >> 1), sample.mean.v);
  blendPlane(p.y, frame.width, frame.height, patch.luma, patch.lumaAlpha, patch.width, patch.height, left, top, shiftY);
  blendPlane(p.u, p.cw, p.ch, patch.u, patch.chromaAlpha, cw, ch, left >> 1, top >> 1, shiftU);
  blendPlane(p.v, p.cw, p.ch, patch.v, patch.chromaAlpha, cw, ch, left >> 1, top >> 1, shiftV);
}
