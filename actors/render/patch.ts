/**
 * Pre-converted I420 patches with per-pixel alpha. Renderers build them once (mouth shapes, eyelids)
 * and per frame only blend a small rectangle into a copy of the cached base frame.
 */
import type { I420Frame } from './types.ts';
import { planes } from './i420.ts';
import type { RgbaImage } from './image.ts';

export interface I420Patch {
  /** Top-left in frame coordinates; always even so chroma stays aligned. */
  x: number;
  y: number;
  width: number;
  height: number;
  luma: Uint8Array;
  lumaAlpha: Uint8Array;
  /** Chroma planes at half resolution (ceil(width/2) x ceil(height/2)). */
  u: Uint8Array;
  v: Uint8Array;
  chromaAlpha: Uint8Array;
}

function clampByte(value: number): number {
  return value < 0 ? 0 : value > 255 ? 255 : (value + 0.5) | 0;
}

/**
 * Cuts the rectangle (x, y, w, h) out of a straight-alpha RGBA image (x and y rounded down to even)
 * and converts it. When `opaque` is set alpha is forced to 255 (a plain copy patch).
 */
export function patchFromRgba(image: RgbaImage, x: number, y: number, w: number, h: number, opaque = false): I420Patch {
  const px = Math.max(0, Math.floor(x / 2) * 2);
  const py = Math.max(0, Math.floor(y / 2) * 2);
  const width = Math.min(image.width - px, Math.ceil(w) + (x - px));
  const height = Math.min(image.height - py, Math.ceil(h) + (y - py));
  const cw = (width + 1) >> 1;
  const ch = (height + 1) >> 1;
  const patch: I420Patch = {
    x: px,
    y: py,
    width,
    height,
    luma: new Uint8Array(width * height),
    lumaAlpha: new Uint8Array(width * height),
    u: new Uint8Array(cw * ch),
    v: new Uint8Array(cw * ch),
    chromaAlpha: new Uint8Array(cw * ch),
  };
  const src = image.data;
  for (let row = 0; row < height; row++) {
    for (let col = 0; col < width; col++) {
      const o = ((py + row) * image.width + px + col) * 4;
      const i = row * width + col;
      patch.luma[i] = clampByte(16 + 0.2568 * src[o] + 0.5041 * src[o + 1] + 0.0979 * src[o + 2]);
      patch.lumaAlpha[i] = opaque ? 255 : src[o + 3];
    }
  }
  for (let cy = 0; cy < ch; cy++) {
    for (let cx = 0; cx < cw; cx++) {
      let r = 0,
        g = 0,
        b = 0,
        weight = 0,
        count = 0;
      for (let dy = 0; dy < 2; dy++) {
        for (let dx = 0; dx < 2; dx++) {
          const row = cy * 2 + dy;
          const col = cx * 2 + dx;
          if (row >= height || col >= width) continue;
          const o = ((py + row) * image.width + px + col) * 4;
          // Alpha-weighted so transparent neighbours do not bleed their (meaningless) colour in.
          const a = opaque ? 255 : src[o + 3];
          r += src[o] * a;
          g += src[o + 1] * a;
          b += src[o + 2] * a;
          weight += a;
          count++;
        }
      }
      const i = cy * cw + cx;
      if (weight > 0) {
        r /= weight;
        g /= weight;
        b /= weight;
      }
      patch.u[i] = clampByte(128 - 0.1482 * r - 0.291 * g + 0.4392 * b);
      patch.v[i] = clampByte(128 + 0.4392 * r - 0.3678 * g - 0.0714 * b);
      patch.chromaAlpha[i] = clampByte(weight / count);
    }
  }
  return patch;
}

/**
 * A run shorter than this is not worth its own kind: a short opaque run is blended with its neighbours (a copy call
 * costs more than the few multiplies it saves), and a short transparent gap between two blended runs is blended
 * through (alpha 0 leaves the pixel as it was, and one loop beats two).
 */
const MIN_RUN = 8;
/** Run kinds in a plane's run list (`runsOf`). */
const BLEND = 0;
const COPY = 1;
const SKIP = -1;

/**
 * The parts of an alpha plane a blend has to touch, as (row, first, end, kind) quads in row order: `COPY` runs are
 * opaque (the patch's values are copied), `BLEND` runs are blended pixel by pixel, and transparent stretches are not
 * listed. A video avatar's mouth pose is the whole warp box with alpha only where the warp changed something; on a
 * close-up the box is ~300×300 px at 512², a third of it opaque and half of it transparent, and blending every pixel of
 * it was 3/4 of a clip session's render worker time (docs/performance.md, "The mouth patch's blend").
 * Computed once per alpha plane (patches are never changed once made) and kept beside it, with the shape it was
 * read at: the same plane read as another shape is read again.
 */
const planeRuns = new WeakMap<Uint8Array, { width: number; height: number; runs: Int32Array }>();

function kindOf(a: number): number {
  return a === 0 ? SKIP : a === 255 ? COPY : BLEND;
}

function runsOf(alpha: Uint8Array, width: number, height: number): Int32Array {
  const known = planeRuns.get(alpha);
  if (known && known.width === width && known.height === height) return known.runs;
  const runs: number[] = [];
  const row: number[] = [];
  for (let y = 0; y < height; y++) {
    const base = y * width;
    row.length = 0;
    for (let col = 0; col < width; ) {
      const kind = kindOf(alpha[base + col]);
      let end = col + 1;
      while (end < width && kindOf(alpha[base + end]) === kind) end++;
      const short = end - col < MIN_RUN;
      const interior = col > 0 && end < width;
      const effective = short && (kind === COPY || (kind === SKIP && interior)) ? BLEND : kind;
      const last = row.length - 3;
      if (effective === BLEND && last >= 0 && row[last + 2] === BLEND && row[last + 1] === col) row[last + 1] = end;
      else if (effective !== SKIP) row.push(col, end, effective);
      col = end;
    }
    for (let i = 0; i < row.length; i += 3) runs.push(y, row[i], row[i + 1], row[i + 2]);
  }
  const packed = Int32Array.from(runs);
  planeRuns.set(alpha, { width, height, runs: packed });
  return packed;
}

/**
 * Blends one plane of a patch into `dst` at (left, top), the patch's values shifted by `shift` (clamped to a byte):
 * dst = (dst·(255 − a) + src·a + 127) / 255, rounded down, computed in integers. Only the plane's runs are visited,
 * clipped to the frame; an opaque run without a shift is copied, which is what the formula gives at a = 255.
 */
export function blendPlane(
  dst: Uint8Array,
  dstStride: number,
  dstRows: number,
  src: Uint8Array,
  alpha: Uint8Array,
  srcWidth: number,
  srcHeight: number,
  left: number,
  top: number,
  shift = 0,
): void {
  const runs = runsOf(alpha, srcWidth, srcHeight);
  const rowStart = Math.max(0, -top);
  const rowEnd = Math.min(srcHeight, dstRows - top);
  const colStart = Math.max(0, -left);
  const colEnd = dstStride - left;
  for (let r = 0; r < runs.length; r += 4) {
    const row = runs[r];
    if (row < rowStart) continue;
    if (row >= rowEnd) break;
    const first = Math.max(runs[r + 1], colStart);
    const end = Math.min(runs[r + 2], colEnd);
    if (first >= end) continue;
    const s = row * srcWidth;
    const d = (top + row) * dstStride + left;
    if (runs[r + 3] === COPY && shift === 0) {
      dst.set(src.subarray(s + first, s + end), d + first);
      continue;
    }
    for (let col = first; col < end; col++) {
      const a = alpha[s + col];
      let value = src[s + col] + shift;
      value = value < 0 ? 0 : value > 255 ? 255 : value;
      // floor(v / 255) for 0 ≤ v ≤ 65152, exactly (v = 255·255 + 127 at most); a = 0 leaves dst as it was.
      const v = dst[d + col] * (255 - a) + value * a + 127;
      dst[d + col] = (v + 1 + (v >> 8)) >> 8;
    }
  }
}

/**
 * Blends `patch` into `frame` in place, shifted by (dx, dy) whole pixels. Chroma follows the shift
 * to the nearest chroma row/column (half a pixel off for odd shifts, invisible on smooth content).
 */
export function blendPatch(frame: I420Frame, patch: I420Patch, dx = 0, dy = 0): void {
  const p = planes(frame);
  const left = patch.x + Math.round(dx);
  const top = patch.y + Math.round(dy);
  blendPlane(p.y, frame.width, frame.height, patch.luma, patch.lumaAlpha, patch.width, patch.height, left, top);
  const cw = (patch.width + 1) >> 1;
  const ch = (patch.height + 1) >> 1;
  blendPlane(p.u, p.cw, p.ch, patch.u, patch.chromaAlpha, cw, ch, left >> 1, top >> 1);
  blendPlane(p.v, p.cw, p.ch, patch.v, patch.chromaAlpha, cw, ch, left >> 1, top >> 1);
}
