/**
 * RGBA <-> I420 (BT.601 limited range) conversion in plain JS. Renderers convert once at prepare
 * time and then work on cached I420 planes, so these run rarely on the hot path; the pure-JS version
 * is used because it behaves identically in every worker (no native addon loading per thread).
 */
import type { I420Frame } from './types.ts';

export function i420Size(width: number, height: number): number {
  return width * height + 2 * chromaWidth(width) * chromaHeight(height);
}

export function chromaWidth(width: number): number {
  return (width + 1) >> 1;
}

export function chromaHeight(height: number): number {
  return (height + 1) >> 1;
}

function clampByte(value: number): number {
  return value < 0 ? 0 : value > 255 ? 255 : (value + 0.5) | 0;
}

/** One RGB colour as BT.601 limited-range Y, U, V, unrounded (the matrix `rgbaToI420` applies per pixel). */
export function rgbToYuv(r: number, g: number, b: number): { y: number; u: number; v: number } {
  return {
    y: 16 + 0.2568 * r + 0.5041 * g + 0.0979 * b,
    u: 128 - 0.1482 * r - 0.291 * g + 0.4392 * b,
    v: 128 + 0.4392 * r - 0.3678 * g - 0.0714 * b,
  };
}

/** Converts straight (non-premultiplied) RGBA to I420; alpha is ignored. */
export function rgbaToI420(rgba: Uint8Array, width: number, height: number, out?: Uint8Array): I420Frame {
  const data = out ?? new Uint8Array(i420Size(width, height));
  const cw = chromaWidth(width);
  const ch = chromaHeight(height);
  const uOffset = width * height;
  const vOffset = uOffset + cw * ch;
  for (let y = 0; y < height; y++) {
    let src = y * width * 4;
    let dst = y * width;
    for (let x = 0; x < width; x++, src += 4, dst++) {
      data[dst] = clampByte(16 + 0.2568 * rgba[src] + 0.5041 * rgba[src + 1] + 0.0979 * rgba[src + 2]);
    }
  }
  for (let cy = 0; cy < ch; cy++) {
    const y0 = cy * 2;
    const y1 = Math.min(y0 + 1, height - 1);
    for (let cx = 0; cx < cw; cx++) {
      const x0 = cx * 2;
      const x1 = Math.min(x0 + 1, width - 1);
      const a = (y0 * width + x0) * 4;
      const b = (y0 * width + x1) * 4;
      const c = (y1 * width + x0) * 4;
      const d = (y1 * width + x1) * 4;
      const r = (rgba[a] + rgba[b] + rgba[c] + rgba[d]) * 0.25;
      const g = (rgba[a + 1] + rgba[b + 1] + rgba[c + 1] + rgba[d + 1]) * 0.25;
      const bl = (rgba[a + 2] + rgba[b + 2] + rgba[c + 2] + rgba[d + 2]) * 0.25;
      const i = cy * cw + cx;
      data[uOffset + i] = clampByte(128 - 0.1482 * r - 0.291 * g + 0.4392 * bl);
      data[vOffset + i] = clampByte(128 + 0.4392 * r - 0.3678 * g - 0.0714 * bl);
    }
  }
  return { width, height, data };
}

/**
 * Converts I420 back to opaque RGBA (nearest chroma); used by tests, image dumps and the browser's face canvas
 * (into its `ImageData`, `out`).
 */
export function i420ToRgba(frame: I420Frame, out?: Uint8Array): Uint8Array {
  const { width, height, data } = frame;
  const cw = chromaWidth(width);
  const uOffset = width * height;
  const vOffset = uOffset + cw * chromaHeight(height);
  const rgba = out ?? new Uint8Array(width * height * 4);
  for (let y = 0; y < height; y++) {
    for (let x = 0; x < width; x++) {
      const c = (y >> 1) * cw + (x >> 1);
      const yy = 1.164 * (data[y * width + x] - 16);
      const u = data[uOffset + c] - 128;
      const v = data[vOffset + c] - 128;
      const o = (y * width + x) * 4;
      rgba[o] = clampByte(yy + 1.596 * v);
      rgba[o + 1] = clampByte(yy - 0.392 * u - 0.813 * v);
      rgba[o + 2] = clampByte(yy + 2.017 * u);
      rgba[o + 3] = 255;
    }
  }
  return rgba;
}

/** Plane views of an I420 buffer. */
export function planes(frame: I420Frame): { y: Uint8Array; u: Uint8Array; v: Uint8Array; cw: number; ch: number } {
  const { width, height, data } = frame;
  const cw = chromaWidth(width);
  const ch = chromaHeight(height);
  const ySize = width * height;
  return {
    y: data.subarray(0, ySize),
    u: data.subarray(ySize, ySize + cw * ch),
    v: data.subarray(ySize + cw * ch, ySize + 2 * cw * ch),
    cw,
    ch,
  };
}

export function cloneFrame(frame: I420Frame): I420Frame {
  return { width: frame.width, height: frame.height, data: frame.data.slice() };
}
