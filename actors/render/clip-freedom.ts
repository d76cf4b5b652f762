/**
 * Where a video avatar's speaking-frame warp (`clip-warp.ts`) may move pixels: an edge-aware falloff over the warp's
 * region, like a photo's (`photo-jaw.ts`), but for every loop frame, so it is made on a coarse grid and kept per held
 * frame. Where the warp moved a strong edge outside the lips (the face's outline against hair or a background, a
 * chin against a collar) by even a fraction of a pixel, the frame stepped by tens of levels against the unmoved
 * pixels beside it: a dotted line along the jaw on real footage (`sun`), the chin's edge sliding over a collar on the
 * project's clips (the seam measure of `test/helpers/artefacts.ts`: 9–27 levels). Here the warp's displacement is
 * scaled by how far a point is from the nearest such edge: 0 on it, and below it as seen from the mouth (a collar
 * under the chin), 1 from `EDGE_CLEARANCE` mouth widths away. The lips' own edges move with the mouth.
 */
import { smoothstep } from './idle-motion.ts';
import type { I420Frame } from './types.ts';

/** Luma step (levels per pixel, central difference halved) from which a pixel is an edge the warp must not move. */
const EDGE_MIN_STEP = 20;
/** Distance from such an edge, in mouth widths, from which the warp moves pixels fully. */
const EDGE_CLEARANCE = 0.55;
/**
 * The lips' own edges move: edges inside this ellipse around where the jaws part (radii in mouth widths; below, grown
 * by the widest jaw drop, where the lower lip travels) do not count.
 */
const LIPS_RADIUS_X = 0.55;
const LIPS_RADIUS_ABOVE = 0.4;
const LIPS_RADIUS_BELOW = 0.8;
/** Within this fraction of the ellipse the warp moves fully, whatever edges lie near. */
const LIPS_FULL = 0.6;
/** Grid spacing in mouth widths (within `MIN_CELL_PX`…`MAX_CELL_PX`): fine enough to hold an edge, cheap per frame. */
const CELL_MOUTH_WIDTHS = 1 / 12;
const MIN_CELL_PX = 2;
const MAX_CELL_PX = 8;
/** Chamfer distance weights (3-4: within 8 % of the Euclidean distance). */
const STRAIGHT = 3;
const DIAGONAL = 4;

/** The freedom at grid points every `cell` frame pixels from (`x0`, `y0`); bilinear between. */
export interface FreedomGrid {
  x0: number;
  y0: number;
  cell: number;
  nx: number;
  ny: number;
  values: Float32Array;
}

/** What the falloff needs of the warp: its frame-pixel box, the mouth's upright frame, where the jaws part per u. */
export interface FreedomShape {
  box: { x0: number; x1: number; y0: number; y1: number };
  cx: number;
  cy: number;
  cos: number;
  sin: number;
  mw: number;
  /** v (upright pixels) where the jaws part at u. */
  partAt: (u: number) => number;
}

/** One grid per held loop frame (its luma plane), with the face it was made for. */
const grids = new WeakMap<Uint8Array, { key: object; grid: FreedomGrid }>();

/** The grid for `frame` (its face `key`): made on first use, then kept as long as the frame is. */
export function freedomOf(frame: I420Frame, key: object, shape: FreedomShape): FreedomGrid {
  const held = grids.get(frame.data);
  if (held && held.key === key) return held.grid;
  const grid = buildGrid(frame, shape);
  grids.set(frame.data, { key, grid });
  return grid;
}

/** The freedom at frame point (x, y): bilinear between grid points; 1 outside the grid. */
export function freedomAt(grid: FreedomGrid, x: number, y: number): number {
  const gx = (x - grid.x0) / grid.cell;
  const gy = (y - grid.y0) / grid.cell;
  if (gx < 0 || gy < 0 || gx > grid.nx - 1 || gy > grid.ny - 1) return 1;
  const i = Math.min(grid.nx - 2, gx | 0);
  const j = Math.min(grid.ny - 2, gy | 0);
  const fx = gx - i;
  const fy = gy - j;
  const k = j * grid.nx + i;
  const v = grid.values;
  const top = v[k] + (v[k + 1] - v[k]) * fx;
  const bottom = v[k + grid.nx] + (v[k + grid.nx + 1] - v[k + grid.nx]) * fx;
  return top + (bottom - top) * fy;
}

function buildGrid(frame: I420Frame, s: FreedomShape): FreedomGrid {
  const { width, height, data } = frame;
  const cell = Math.max(MIN_CELL_PX, Math.min(MAX_CELL_PX, Math.round(s.mw * CELL_MOUTH_WIDTHS)));
  const { x0, y0 } = s.box;
  const nx = Math.ceil((s.box.x1 - x0) / cell) + 1;
  const ny = Math.ceil((s.box.y1 - y0) / cell) + 1;
  const far = 1 << 28;
  const dist = new Int32Array(nx * ny).fill(far);
  // Seeds: the corners of every cell holding a strong edge outside the lips.
  for (let y = Math.max(1, y0); y <= Math.min(height - 2, s.box.y1); y++) {
    for (let x = Math.max(1, x0); x <= Math.min(width - 2, s.box.x1); x++) {
      const o = y * width + x;
      const step = Math.max(Math.abs(data[o + 1] - data[o - 1]), Math.abs(data[o + width] - data[o - width])) / 2;
      if (step < EDGE_MIN_STEP) continue;
      const fx = x - s.cx;
      const fy = y - s.cy;
      const u = fx * s.cos + fy * s.sin;
      const v = -fx * s.sin + fy * s.cos;
      const lu = u / (LIPS_RADIUS_X * s.mw);
      const below = v - s.partAt(u);
      const lv = below / ((below < 0 ? LIPS_RADIUS_ABOVE : LIPS_RADIUS_BELOW) * s.mw);
      if (lu * lu + lv * lv < 1) continue;
      const i = Math.floor((x - x0) / cell);
      const j = Math.floor((y - y0) / cell);
      for (const k of [j * nx + i, j * nx + i + 1, (j + 1) * nx + i, (j + 1) * nx + i + 1])
        if (k < dist.length) dist[k] = 0;
    }
  }
  // Below such an edge, seen from the mouth (a collar under the chin), nothing moves either: moved, its own texture
  // would change where nothing should.
  for (let i = 0; i < nx; i++) {
    let beyond = false;
    for (let j = 0; j < ny; j++) {
      const k = j * nx + i;
      const fx = x0 + i * cell - s.cx;
      const fy = y0 + j * cell - s.cy;
      const u = fx * s.cos + fy * s.sin;
      const v = -fx * s.sin + fy * s.cos;
      if (v - s.partAt(u) < LIPS_RADIUS_BELOW * s.mw) continue;
      if (beyond) dist[k] = 0;
      else beyond = dist[k] === 0;
    }
  }
  const relax = (k: number, i: number, j: number, di: number, dj: number, cost: number): void => {
    const ni = i + di;
    const nj = j + dj;
    if (ni < 0 || nj < 0 || ni >= nx || nj >= ny) return;
    const d = dist[nj * nx + ni] + cost;
    if (d < dist[k]) dist[k] = d;
  };
  for (let j = 0; j < ny; j++) {
    for (let i = 0; i < nx; i++) {
      const k = j * nx + i;
      relax(k, i, j, -1, 0, STRAIGHT);
      relax(k, i, j, 0, -1, STRAIGHT);
      relax(k, i, j, -1, -1, DIAGONAL);
      relax(k, i, j, 1, -1, DIAGONAL);
    }
  }
  for (let j = ny - 1; j >= 0; j--) {
    for (let i = nx - 1; i >= 0; i--) {
      const k = j * nx + i;
      relax(k, i, j, 1, 0, STRAIGHT);
      relax(k, i, j, 0, 1, STRAIGHT);
      relax(k, i, j, 1, 1, DIAGONAL);
      relax(k, i, j, -1, 1, DIAGONAL);
    }
  }
  const clearance = EDGE_CLEARANCE * s.mw;
  const values = new Float32Array(nx * ny);
  for (let j = 0; j < ny; j++) {
    for (let i = 0; i < nx; i++) {
      const k = j * nx + i;
      // The lips themselves always move fully (the opening is painted where they part), fading into the falloff
      // around them.
      const fx = x0 + i * cell - s.cx;
      const fy = y0 + j * cell - s.cy;
      const u = fx * s.cos + fy * s.sin;
      const below = -fx * s.sin + fy * s.cos - s.partAt(u);
      const lu = u / (LIPS_RADIUS_X * s.mw);
      const lv = below / ((below < 0 ? LIPS_RADIUS_ABOVE : LIPS_RADIUS_BELOW) * s.mw);
      const lips = 1 - smoothstep(LIPS_FULL, 1, Math.sqrt(lu * lu + lv * lv));
      values[k] = Math.max(lips, smoothstep(0, clearance, (dist[k] / STRAIGHT) * cell));
    }
  }
  return { x0, y0, cell, nx, ny, values };
}
