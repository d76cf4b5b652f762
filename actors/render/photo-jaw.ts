/**
 * Where a photo's mouth warp may move pixels: an edge-aware falloff, built once at preparation from the rest face.
 * Where the warp moves a strong edge by even a tenth of a pixel next to unmoved pixels, the frame steps by ten
 * levels there (the seam measure of `test/helpers/artefacts.ts`), so the displacement is scaled by how far a pixel
 * is from the nearest strong edge outside the lips: 0 on the edge and beyond it as seen from the mouth (the
 * background past the cheek's outline), 1 from `EDGE_CLEARANCE` mouth widths away.
 *
 * The chin's outline is the exception where it lies on something plain (a dark collar, a shadowed neck): the chin
 * drops over it with its outline whole, and the plain strip under it is carried along, its drop fading out within
 * it (`carried`; the renderer shades it as the chin's shadow, so the warp ends in a smooth fade of that shadow rather
 * than at the chin's moved edge), before the next edge (a collar's line), which stays with everything beyond it. An
 * earlier version held the outline and dropped only the chin's middle rigidly, which bent the collar line into a U.
 */
import { smoothstep } from './idle-motion.ts';
import type { RgbaImage } from './image.ts';

/** Luma step (levels per pixel, central difference) from which a pixel is an edge the warp must not bend. */
const EDGE_MIN_STEP = 44;
/**
 * Beyond the chin's outline, what the chin may be carried over: pixels stepping less than this (levels per pixel, a
 * dark collar's weave, a neck's shading), at least `CARRIED_MIN` mouth widths of them down the column.
 */
const PLAIN_MAX_STEP = 10;
const CARRIED_MIN = 0.2;
/**
 * Only under the chin (columns this many mouth widths either side of the mouth's centre): beyond, the outline is the
 * jaw's side, against hair or background, which it does not move over.
 */
const CHIN_HALF_WIDTH = 1.0;
/** An outline's tail, px: beyond its strong step, this many pixels may still step more than plain. */
const EDGE_TAIL_PX = 3;
/** Distance from such an edge, in mouth widths, from which the warp moves pixels fully. */
const EDGE_CLEARANCE = 0.5;
/**
 * The lips' own edges (the lip line, the lips against the skin) move with the mouth: edges inside this ellipse
 * around the mouth (radii in mouth widths, across and down from the seam between the lips) do not hold the warp.
 */
const LIPS_RADIUS_X = 0.75;
const LIPS_RADIUS_Y = 0.42;
/** Chamfer distance weights (3-4: within 8 % of the Euclidean distance). */
const STRAIGHT = 3;
const DIAGONAL = 4;

export interface WarpBox {
  x: number;
  y: number;
  width: number;
  height: number;
}

export interface JawFreedom {
  /** How freely the warp may move each pixel of the box (0..1, row-major over the box). */
  freedom: Float32Array;
  /** 1 where the pixel lies beyond the chin's outline, in what the chin is carried over (row-major over the box). */
  carried: Uint8Array;
}

/** How freely the warp may move each pixel of `box`, and what lies under the chin. */
export function warpFreedom(
  src: RgbaImage,
  box: WarpBox,
  mouth: { x: number; width: number; seamAt: (x: number) => number },
): JawFreedom {
  const { x: bx, y: by, width: w, height: h } = box;
  const luma = (x: number, y: number): number => {
    const cx = Math.min(src.width - 1, Math.max(0, x));
    const cy = Math.min(src.height - 1, Math.max(0, y));
    const o = (cy * src.width + cx) * 4;
    return 0.299 * src.data[o] + 0.587 * src.data[o + 1] + 0.114 * src.data[o + 2];
  };
  const stepAt = (x: number, y: number): number =>
    Math.max(Math.abs(luma(x + 1, y) - luma(x - 1, y)), Math.abs(luma(x, y + 1) - luma(x, y - 1))) / 2;
  const seeds = new Uint8Array(w * h);
  for (let j = 0; j < h; j++) {
    for (let i = 0; i < w; i++) {
      const x = bx + i;
      const y = by + j;
      const u = (x - mouth.x) / (LIPS_RADIUS_X * mouth.width);
      const v = (y - mouth.seamAt(x)) / (LIPS_RADIUS_Y * mouth.width);
      if (u * u + v * v < 1) continue;
      if (stepAt(x, y) >= EDGE_MIN_STEP) seeds[j * w + i] = 1;
    }
  }
  // Below the mouth, the first strong edge down a column is the face's outline (the chin, the jaw). The chin drops
  // in front of what lies beyond it only where that is plain (a dark collar, a shadowed neck): carried with it, it
  // looks unmoved, and the warp fades out within it, before the next edge (a collar's line, a necklace), which
  // stays where it is with everything beyond it. Where the outline meets anything else, it is held in place.
  const carriedMin = CARRIED_MIN * mouth.width;
  const carriedPixels = new Uint8Array(w * h);
  const mouthRow = (i: number): number => Math.min(h - 1, Math.max(0, Math.round(mouth.seamAt(bx + i)) - by));
  for (let i = 0; i < w; i++) {
    let j = mouthRow(i);
    while (j < h && !seeds[j * w + i]) j++;
    const outline = j;
    while (j < h && seeds[j * w + i]) j++;
    // The outline's soft tail (its last few pixels step less than an edge, more than what lies beyond).
    for (let tail = 0; tail < EDGE_TAIL_PX && j < h && stepAt(bx + i, by + j) >= PLAIN_MAX_STEP; tail++) j++;
    const plainFrom = j;
    while (j < h && stepAt(bx + i, by + j) < PLAIN_MAX_STEP) j++;
    const underChin = Math.abs(bx + i - mouth.x) <= CHIN_HALF_WIDTH * mouth.width;
    const carried = underChin && (j - plainFrom >= carriedMin || j === h);
    if (carried) {
      for (let k = outline; k < plainFrom; k++) seeds[k * w + i] = 0;
      for (let k = plainFrom; k < j; k++) carriedPixels[k * w + i] = 1;
    }
    for (let k = carried ? j : outline; k < h; k++) seeds[k * w + i] = 1;
  }
  const distance = chamferDistance(seeds, w, h);
  const clearance = EDGE_CLEARANCE * mouth.width;
  const freedom = new Float32Array(w * h);
  for (let k = 0; k < w * h; k++) freedom[k] = smoothstep(0, clearance, distance[k] / STRAIGHT);
  return { freedom, carried: carriedPixels };
}

/** Chamfer distance (3-4 weights, so /`STRAIGHT` is px) of every pixel to the nearest set pixel of `seeds`. */
function chamferDistance(seeds: Uint8Array, w: number, h: number): Int32Array {
  const dist = new Int32Array(w * h).fill(1 << 28);
  for (let k = 0; k < w * h; k++) if (seeds[k]) dist[k] = 0;
  const relax = (i: number, j: number, di: number, dj: number, cost: number): void => {
    const ni = i + di;
    const nj = j + dj;
    if (ni < 0 || nj < 0 || ni >= w || nj >= h) return;
    const d = dist[nj * w + ni] + cost;
    if (d < dist[j * w + i]) dist[j * w + i] = d;
  };
  for (let j = 0; j < h; j++) {
    for (let i = 0; i < w; i++) {
      relax(i, j, -1, 0, STRAIGHT);
      relax(i, j, 0, -1, STRAIGHT);
      relax(i, j, -1, -1, DIAGONAL);
      relax(i, j, 1, -1, DIAGONAL);
    }
  }
  for (let j = h - 1; j >= 0; j--) {
    for (let i = w - 1; i >= 0; i--) {
      relax(i, j, 1, 0, STRAIGHT);
      relax(i, j, 0, 1, STRAIGHT);
      relax(i, j, 1, 1, DIAGONAL);
      relax(i, j, -1, 1, DIAGONAL);
    }
  }
  return dist;
}
