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
      let r = 0, g = 0, b = 0, weight = 0, count = 0;
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

function blendPlane(
  dst: Uint8Array,
  dstStride: number,
  dstRows: number,
  src: Uint8Array,
  alpha: Uint8Array,
  srcWidth: number,
  srcHeight: number,
  left: number,
  top: number,
): void {
  for (let row = 0; row < srcHeight; row++) {
    const y = top + row;
    if (y < 0 || y >= dstRows) continue;
    for (let col = 0; col < srcWidth; col++) {
      const x = left + col;
      if (x < 0 || x >= dstStride) continue;
      const i = row * srcWidth + col;
      const a = alpha[i];
      if (a === 0) continue;
      const d = y * dstStride + x;
      dst[d] = a === 255 ? src[i] : (dst[d] * (255 - a) + src[i] * a + 127) / 255;
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
