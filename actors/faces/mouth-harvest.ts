/**
 * Mouth harvesting at a video avatar's creation: every sampled clip frame with a face hands its mouth to a
 * `MouthHarvest` (cut upright at a fixed scale into one atlas cell, with its inner-lip opening and mouth width),
 * and at the end the harvest keys them by pose — opening as it reads once laid on the avatar's reference frame
 * (`laidOpeningsOn`; the clip frame's own landmarks without it), relative to the rest gap and widest opening,
 * width relative to the resting mouth (wide lips for ee/s, narrowed for oo/w) — and keeps one sample per
 * opening step and shape. A clip whose lips never part beyond `MIN_SPEAKING_OPENING`, or that shows fewer than
 * `MIN_HARVESTED_OPENINGS` opening steps, harvests nothing: the renderer falls back to its warp.
 * The render side and the bundle format: `actors/render/harvested-mouths.ts`.
 */
import sharp from 'sharp';
import { faceHint } from './landmarks.ts';
import type { Detector } from './portrait.ts';
import { i420ToRgba, rgbaToI420 } from '../render/i420.ts';
import {
  headRoll,
  innerLipGap,
  layCell,
  MOUTH_CELL_CENTER,
  MOUTH_CELL_HEIGHT,
  MOUTH_CELL_WIDTH,
  MOUTH_SAMPLE_WIDTH_PX,
  usableHarvest,
  type MouthSample,
  type MouthSampleIndex,
} from '../render/harvested-mouths.ts';
import type { MouthAnimation } from '../render/types.ts';

/** Opening steps a harvest keeps (closed … widest), like the renderer's pose steps, for each of the shapes. */
export const MOUTH_OPEN_STEPS = 6;
/** Shapes per opening: neutral, wide (ee, s), round (oo, w). */
export const MOUTH_SHAPES = 3;
/** Samples stored at most: one per opening step and shape. */
export const MAX_HARVESTED_MOUTHS = MOUTH_OPEN_STEPS * MOUTH_SHAPES;
/**
 * Candidate mouths held while the clip decodes (one per sampled frame with a face): 64 cells of 160 × 128 RGBA
 * are 5.2 MB, whatever the clip's resolution. Creation samples at most 60 frames (`video-clip.ts`).
 */
export const MAX_MOUTH_CANDIDATES = 64;
/** Atlas cells per row: 18 samples make a 960 × 384 PNG (≤ 1.5 MB decoded). */
export const MOUTH_ATLAS_COLUMNS = 6;
/**
 * Lips parted by less than this (mouth widths beyond the clip's rest gap) on every sampled frame: the person does
 * not speak in the clip (the detector's own jitter is ~0.03); nothing is harvested.
 */
export const MIN_SPEAKING_OPENING = 0.1;
/** Opening steps above closed a harvest must show, else it could not follow speech and the warp is used. */
export const MIN_HARVESTED_OPENINGS = 3;
/** Mouth width change (fraction of the resting width) that counts as fully wide or fully round. */
const FULL_SHAPE_CHANGE = 0.1;
/** The rest gap is this quantile of the sampled gaps (the lips are closed on a good part of any speaking clip). */
const REST_GAP_QUANTILE = 0.1;
/**
 * Laid candidates the detector must find a face on for their laid openings to key the harvest: below this share the
 * composite itself is in doubt, and the clip's own landmarks are used.
 */
const MIN_LAID_FOUND_FRACTION = 0.8;

interface Candidate {
  frame: number;
  cell: Uint8Array;
  gap: number;
  /** Mouth width over eye distance (independent of how close the face is). */
  widthRatio: number;
  confidence: number;
}

/** The inner-lip gap (mouth widths) each cell shows once laid, or null where that could not be read; in order. */
export type LaidOpenings = (cells: readonly Uint8Array[]) => Promise<Array<number | null>>;

/** What a harvest keeps: the atlas PNG and its index, for `mouths/`. */
export interface HarvestedMouthFiles {
  index: MouthSampleIndex;
  atlasPng: Buffer;
}

export class MouthHarvest {
  private readonly candidates: Candidate[] = [];

  /** Cuts the mouth of `face` out of one sampled frame (`frame`: its index at 25 fps from the clip's start). */
  add(rgba: Uint8Array, width: number, height: number, face: MouthAnimation, frame: number): void {
    if (this.candidates.length >= MAX_MOUTH_CANDIDATES) return;
    const eyes = Math.hypot(face.right_eye.x - face.left_eye.x, face.right_eye.y - face.left_eye.y);
    if (!(face.mouth_width > 4) || !(eyes > 4) || !face.inner_lip || face.inner_lip.length < 8) return;
    this.candidates.push({
      frame,
      cell: cutCell(rgba, width, height, face),
      gap: innerLipGap(face) / face.mouth_width,
      widthRatio: face.mouth_width / eyes,
      confidence: face.confidence,
    });
  }

  /**
   * The samples keyed by pose, or null when the clip does not show speech (see `MIN_SPEAKING_OPENING`). With
   * `laidOpenings`, each candidate's opening is keyed as it reads once laid on the avatar's reference frame.
   */
  async finish(laidOpenings?: LaidOpenings): Promise<HarvestedMouthFiles | null> {
    if (this.candidates.length === 0) return null;
    const clipGaps = this.candidates.map((c) => c.gap).sort((a, b) => a - b);
    const clipRestGap = restGapOf(clipGaps);
    if (clipGaps[clipGaps.length - 1] - clipRestGap < MIN_SPEAKING_OPENING) return null;
    const all = (laidOpenings && (await withLaidGaps(this.candidates, laidOpenings))) || this.candidates;
    const gaps = all.map((c) => c.gap).sort((a, b) => a - b);
    const restGap = restGapOf(gaps);
    const widest = gaps[gaps.length - 1] - restGap;
    const openOf = (c: Candidate) => Math.min(1, Math.max(0, (c.gap - restGap) / widest));
    const resting = all
      .filter((c) => openOf(c) < 0.3)
      .map((c) => c.widthRatio)
      .sort((a, b) => a - b);
    const restWidth = resting.length > 0 ? resting[Math.floor(resting.length / 2)] : all[0].widthRatio;
    const keyed = all.map((c) => {
      const change = c.widthRatio / restWidth - 1;
      const pose = {
        open: openOf(c),
        wide: clamp01(change / FULL_SHAPE_CHANGE),
        round: clamp01(-change / FULL_SHAPE_CHANGE),
      };
      const shape = pose.wide >= 0.5 ? 1 : pose.round >= 0.5 ? 2 : 0;
      const step = Math.round(pose.open * (MOUTH_OPEN_STEPS - 1));
      return {
        c,
        pose,
        slot: step * MOUTH_SHAPES + shape,
        step,
        miss: Math.abs(pose.open * (MOUTH_OPEN_STEPS - 1) - step),
      };
    });
    const bySlot = new Map<number, (typeof keyed)[number]>();
    for (const k of keyed) {
      const held = bySlot.get(k.slot);
      if (
        !held ||
        k.miss < held.miss - 0.05 ||
        (Math.abs(k.miss - held.miss) <= 0.05 && k.c.confidence > held.c.confidence)
      )
        bySlot.set(k.slot, k);
    }
    // A candidate that lost its step to a nearer one takes the neighbouring step on its side when no candidate reads
    // there: laid through the lip-contour mask, two middle openings can read into one step (on the project's test
    // clip 0.4 and 0.6 read 0.44 and 0.50 of the widest), and the one dropped left that step without a mouth.
    const winners = new Set(bySlot.values());
    const losers = keyed
      .filter((k) => !winners.has(k))
      .map((k) => {
        const exact = k.pose.open * (MOUTH_OPEN_STEPS - 1);
        const step = exact >= k.step ? Math.min(MOUTH_OPEN_STEPS - 1, k.step + 1) : Math.max(0, k.step - 1);
        return { ...k, slot: k.slot + (step - k.step) * MOUTH_SHAPES, step, miss: Math.abs(exact - step) };
      })
      .filter((k) => k.miss < 1)
      .sort((a, b) => a.miss - b.miss);
    for (const k of losers) if (!bySlot.has(k.slot)) bySlot.set(k.slot, k);
    const chosen = [...bySlot.values()].sort((a, b) => a.slot - b.slot);
    if (new Set(chosen.filter((k) => k.step > 0).map((k) => k.step)).size < MIN_HARVESTED_OPENINGS) return null;
    // What a session would not lay (too few openings or no closed mouth, `usableHarvest`) is not stored either.
    if (!usableHarvest(chosen.map((k) => k.pose))) return null;
    const samples: MouthSample[] = chosen.map((k, cell) => ({
      open: round3(k.pose.open),
      wide: round3(k.pose.wide),
      round: round3(k.pose.round),
      cell,
      frame: k.c.frame,
    }));
    const rows = Math.ceil(chosen.length / MOUTH_ATLAS_COLUMNS);
    const atlasWidth = MOUTH_ATLAS_COLUMNS * MOUTH_CELL_WIDTH;
    const atlas = new Uint8Array(atlasWidth * rows * MOUTH_CELL_HEIGHT * 4);
    chosen.forEach((k, cell) => {
      const left = (cell % MOUTH_ATLAS_COLUMNS) * MOUTH_CELL_WIDTH;
      const top = Math.floor(cell / MOUTH_ATLAS_COLUMNS) * MOUTH_CELL_HEIGHT;
      for (let y = 0; y < MOUTH_CELL_HEIGHT; y++) {
        atlas.set(
          k.c.cell.subarray(y * MOUTH_CELL_WIDTH * 4, (y + 1) * MOUTH_CELL_WIDTH * 4),
          ((top + y) * atlasWidth + left) * 4,
        );
      }
    });
    const atlasPng = await sharp(atlas, { raw: { width: atlasWidth, height: rows * MOUTH_CELL_HEIGHT, channels: 4 } })
      .png()
      .toBuffer();
    return {
      atlasPng,
      index: {
        version: 1,
        cell: {
          width: MOUTH_CELL_WIDTH,
          height: MOUTH_CELL_HEIGHT,
          center: MOUTH_CELL_CENTER,
          mouth_width: MOUTH_SAMPLE_WIDTH_PX,
        },
        columns: MOUTH_ATLAS_COLUMNS,
        // The clip's own: what a loop frame's tracked lips measure at rest (the renderer's `ownMouthOpen`).
        rest_gap: round3(clipRestGap),
        samples,
      },
    };
  }
}

/**
 * The candidates with each gap as it reads once laid, those the detector found a face on; null (keep the clip's own
 * gaps) when it found too few, or when the laid gaps do not spread as far as speech does.
 */
async function withLaidGaps(candidates: Candidate[], laidOpenings: LaidOpenings): Promise<Candidate[] | null> {
  const laid = await laidOpenings(candidates.map((c) => c.cell));
  const found = candidates.flatMap((c, i) =>
    laid[i] === null || laid[i] === undefined ? [] : [{ ...c, gap: laid[i] }],
  );
  if (found.length < candidates.length * MIN_LAID_FOUND_FRACTION) return null;
  const gaps = found.map((c) => c.gap).sort((a, b) => a - b);
  return gaps[gaps.length - 1] - restGapOf(gaps) >= MIN_SPEAKING_OPENING ? found : null;
}

/** The rest gap of a sorted list of gaps. */
function restGapOf(sortedGaps: number[]): number {
  return sortedGaps[Math.floor(REST_GAP_QUANTILE * (sortedGaps.length - 1))];
}

/**
 * How each candidate reads once laid on the avatar's reference frame (the loop's first), as a session lays it there
 * (`layCell`): the detector's inner-lip gap in mouth widths on the composed frame, or null where it finds no face.
 * Creation keys samples by this, not by the landmarks on the clip frame they were cut from: a talking mouth's teeth
 * and a pout read differently there (on one real clip a rounded mouth keyed 0.21 open read 0.04 once laid, i.e.
 * closed, and was laid for every rounded vowel). One landmark refit per candidate (≤ `MAX_MOUTH_CANDIDATES`, 30–50 ms each).
 */
export function laidOpeningsOn(
  reference: { rgba: Uint8Array; width: number; height: number; face: MouthAnimation },
  detect: Detector,
  signal?: AbortSignal,
): LaidOpenings {
  const { width, height, face } = reference;
  const near = faceHint(face);
  return async (cells) => {
    const base = rgbaToI420(reference.rgba, width, height);
    const openings: Array<number | null> = [];
    for (const cell of cells) {
      signal?.throwIfAborted();
      const frame = { width, height, data: base.data.slice() };
      layCell(frame, cell, face);
      const result = await detect({ rgba: i420ToRgba(frame), width, height, near }, { signal });
      openings.push(
        result.ok && result.animation.mouth_width > 0
          ? innerLipGap(result.animation) / result.animation.mouth_width
          : null,
      );
    }
    return openings;
  };
}

/** The cell around `face`'s mouth: upright (the head's roll undone), scaled so the mouth is `MOUTH_SAMPLE_WIDTH_PX` wide. */
function cutCell(rgba: Uint8Array, width: number, height: number, face: MouthAnimation): Uint8Array {
  const cell = new Uint8Array(MOUTH_CELL_WIDTH * MOUTH_CELL_HEIGHT * 4);
  const roll = headRoll(face);
  const cos = Math.cos(roll);
  const sin = Math.sin(roll);
  const perPixel = face.mouth_width / MOUTH_SAMPLE_WIDTH_PX;
  for (let y = 0; y < MOUTH_CELL_HEIGHT; y++) {
    for (let x = 0; x < MOUTH_CELL_WIDTH; x++) {
      const u = (x - MOUTH_CELL_CENTER.x) * perPixel;
      const v = (y - MOUTH_CELL_CENTER.y) * perPixel;
      const sx = Math.min(width - 1.001, Math.max(0, face.mouth_center.x + u * cos - v * sin));
      const sy = Math.min(height - 1.001, Math.max(0, face.mouth_center.y + u * sin + v * cos));
      const x0 = Math.floor(sx);
      const y0 = Math.floor(sy);
      const fx = sx - x0;
      const fy = sy - y0;
      const a = (y0 * width + x0) * 4;
      const c = a + width * 4;
      const o = (y * MOUTH_CELL_WIDTH + x) * 4;
      for (let k = 0; k < 3; k++)
        cell[o + k] =
          (rgba[a + k] * (1 - fx) + rgba[a + 4 + k] * fx) * (1 - fy) +
          (rgba[c + k] * (1 - fx) + rgba[c + 4 + k] * fx) * fy;
      cell[o + 3] = 255;
    }
  }
  return cell;
}

const clamp01 = (v: number) => (v < 0 ? 0 : v > 1 ? 1 : v);
const round3 = (v: number) => Math.round(v * 1000) / 1000;
