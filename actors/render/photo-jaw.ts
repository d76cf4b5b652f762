/**
 * Where a photo's mouth warp may move pixels: an edge-aware falloff, built once at preparation from the rest face.
 * Where the warp moves a strong edge by even a tenth of a pixel next to unmoved pixels, the frame steps by ten
 * levels there (the seam measure of `test/helpers/artefacts.ts`), so the displacement is scaled by how far a pixel
 * is from the nearest strong edge outside the lips: 0 on the edge and beyond it as seen from the mouth (the
 * background past the cheek's outline), 1 from `EDGE_CLEARANCE` mouth widths away.
 *
 * Under the chin the outline is held too (it lies on a collar, a neck's shadow: a chin dropped over them showed as a
 * block, a flat shelf with a kink in the jaw line where its drop ended), but the clearance there is short
 * (`CHIN_CLEARANCE`): the chin above it drops nearly whole and its lower curve closes up on the held outline, as a
 * jaw turning about its hinges hides the neck under it. Beside the chin the clearance grows back to `EDGE_CLEARANCE`
 * along the jaw. (The renderer lets the outline itself slip a pixel or two with the chin: `CHIN_SLIP_PX`.)
 */
import { smoothstep } from './idle-motion.ts';
import type { RgbaImage } from './image.ts';

/** Luma step (levels per pixel, central difference) from which a pixel is an edge the warp must not bend. */
const EDGE_MIN_STEP = 44;
/**
 * Under the chin (within `CHIN_FLAT` mouth widths of the mouth's centre) the warp moves pixels fully from this far
 * (mouth widths) above the held outline; the clearance grows to `EDGE_CLEARANCE` at `CHIN_HALF_WIDTH`, where the
 * outline is the jaw's side. A short clearance keeps the chin's drop (`test/render.lipsync-mouth`: ≥ 0.25 mouth
 * widths where the chin is; the astronaut shows ~8 px of neck above its collar); 0.2 dropped it only 0.18.
 */
export const CHIN_CLEARANCE = 0.1;
const CHIN_FLAT = 0.4;
const CHIN_HALF_WIDTH = 1.0;
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

/**
 * How freely the warp may move each pixel of `box` (0..1, row-major over the box), one map per clearance under the chin
 * in `chinClearances` (mouth widths; `CHIN_CLEARANCE` is the warp's, the renderer also fades the chin into its held
 * outline over a longer one), all from one search for the edges and their distances.
 */
export function warpFreedom(
  src: RgbaImage,
  box: WarpBox,
  mouth: { x: number; width: number; seamAt: (x: number) => number },
  chinClearances: readonly number[] = [CHIN_CLEARANCE],
): Float32Array[] {
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
  // Below the mouth, the first strong edge down a column is the face's outline (the chin, the jaw): it stays where it
  // is with everything beyond it (a collar, a necklace, the background).
  const mouthRow = (i: number): number => Math.min(h - 1, Math.max(0, Math.round(mouth.seamAt(bx + i)) - by));
  for (let i = 0; i < w; i++) {
    let j = mouthRow(i);
    while (j < h && !seeds[j * w + i]) j++;
    for (let k = j; k < h; k++) seeds[k * w + i] = 1;
  }
  const distance = chamferDistance(seeds, w, h);
  return chinClearances.map((chinClearance) => {
    const freedom = new Float32Array(w * h);
    for (let i = 0; i < w; i++) {
      const beside = 1 - underChin((bx + i - mouth.x) / mouth.width);
      const clearance = mix(chinClearance, EDGE_CLEARANCE, beside) * mouth.width;
      for (let j = 0; j < h; j++) freedom[j * w + i] = smoothstep(0, clearance, distance[j * w + i] / STRAIGHT);
    }
    return freedom;
  });
}

/**
 * How much a column lies under the chin (1) rather than beside it along the jaw (0), from its offset from the mouth's
 * centre in mouth widths: where the held outline is the chin's, against a collar or a neck.
 */
export function underChin(offset: number): number {
  return 1 - smoothstep(CHIN_FLAT, CHIN_HALF_WIDTH, Math.abs(offset));
}

function mix(a: number, b: number, t: number): number {
  return a + (b - a) * t;
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
