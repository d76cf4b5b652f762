/**
 * Where a photo's mouth warp may move pixels: an edge-aware falloff, built once at preparation from the rest face.
 * The jaw's drop used to fade out towards the neck over a fixed distance, so on a photo whose chin rests on a
 * collar (the astronaut's black suit) it bent the collar line into a jagged neckline, and where the warp moved a
 * strong edge by even a tenth of a pixel the frame stepped by ten levels against the unmoved pixels beside it (the
 * seam measure of `test/helpers/artefacts.ts`). Here the displacement is scaled by how far a pixel is from the
 * nearest strong edge outside the lips: 0 on the edge and beyond it as seen from the mouth (below a collar's edge),
 * 1 from `EDGE_CLEARANCE` mouth widths away. Beside the chin, strong edges stay exactly where they are and the skin
 * before them is compressed instead; the chin's middle drops rigidly in front of them (the renderer's
 * `CHIN_CORE_HALF_WIDTH`), so the collar line dips smoothly under the chin instead of bending into a jagged neckline.
 */
import { smoothstep } from './idle-motion.ts';
import type { RgbaImage } from './image.ts';

/** Luma step (levels per pixel, central difference) from which a pixel is an edge the warp must not bend. */
const EDGE_MIN_STEP = 44;
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

/** How freely the warp may move each pixel of `box` (0..1, row-major over the box). */
export function warpFreedom(
  src: RgbaImage,
  box: WarpBox,
  mouth: { x: number; width: number; seamAt: (x: number) => number },
): Float32Array {
  const { x: bx, y: by, width: w, height: h } = box;
  const luma = (x: number, y: number): number => {
    const cx = Math.min(src.width - 1, Math.max(0, x));
    const cy = Math.min(src.height - 1, Math.max(0, y));
    const o = (cy * src.width + cx) * 4;
    return 0.299 * src.data[o] + 0.587 * src.data[o + 1] + 0.114 * src.data[o + 2];
  };
  const far = 1 << 28;
  const dist = new Int32Array(w * h).fill(far);
  for (let j = 0; j < h; j++) {
    for (let i = 0; i < w; i++) {
      const x = bx + i;
      const y = by + j;
      const u = (x - mouth.x) / (LIPS_RADIUS_X * mouth.width);
      const v = (y - mouth.seamAt(x)) / (LIPS_RADIUS_Y * mouth.width);
      if (u * u + v * v < 1) continue;
      const step = Math.max(Math.abs(luma(x + 1, y) - luma(x - 1, y)), Math.abs(luma(x, y + 1) - luma(x, y - 1))) / 2;
      if (step >= EDGE_MIN_STEP) dist[j * w + i] = 0;
    }
  }
  // What lies beyond such an edge, seen from the mouth (the collar below the chin's edge, the background past the
  // cheek's outline), does not move either: moved, its own texture changed where nothing should.
  const blocked = (i: number, j: number, beyond: boolean): boolean => {
    const k = j * w + i;
    if (beyond) dist[k] = 0;
    return beyond || dist[k] === 0;
  };
  const mouthRow = (i: number): number => Math.min(h - 1, Math.max(0, Math.round(mouth.seamAt(bx + i)) - by));
  for (let i = 0; i < w; i++) {
    let beyond = false;
    for (let j = mouthRow(i); j < h; j++) beyond = blocked(i, j, beyond);
  }
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
  const clearance = EDGE_CLEARANCE * mouth.width;
  const freedom = new Float32Array(w * h);
  for (let k = 0; k < w * h; k++) freedom[k] = smoothstep(0, clearance, dist[k] / STRAIGHT);
  return freedom;
}
