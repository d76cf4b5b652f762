import type { I420Frame } from './types.ts';

/** BT.601 studio-swing RGBA → I420; chroma from the 2×2 block average. Width and height must be even. */
export function rgbaToI420(rgba: Uint8Array | Uint8ClampedArray, width: number, height: number, out?: Uint8Array): I420Frame {
  const ySize = width * height;
  const cSize = ySize / 4;
  const data = out ?? new Uint8Array(ySize + 2 * cSize);
  const cw = width / 2;
  for (let y = 0; y < height; y++) {
    let p = y * width * 4;
    let o = y * width;
    for (let x = 0; x < width; x++, p += 4, o++) {
      data[o] = (66 * rgba[p] + 129 * rgba[p + 1] + 25 * rgba[p + 2] + 128 + 4096) >> 8;
    }
  }
  for (let cy = 0; cy < height / 2; cy++) {
    for (let cx = 0; cx < cw; cx++) {
      const p0 = (cy * 2 * width + cx * 2) * 4;
      const p1 = p0 + width * 4;
      const r = (rgba[p0] + rgba[p0 + 4] + rgba[p1] + rgba[p1 + 4]) >> 2;
      const g = (rgba[p0 + 1] + rgba[p0 + 5] + rgba[p1 + 1] + rgba[p1 + 5]) >> 2;
      const b = (rgba[p0 + 2] + rgba[p0 + 6] + rgba[p1 + 2] + rgba[p1 + 6]) >> 2;
      const c = cy * cw + cx;
      data[ySize + c] = (-38 * r - 74 * g + 112 * b + 128 + 32768) >> 8;
      data[ySize + cSize + c] = (112 * r - 94 * g - 18 * b + 128 + 32768) >> 8;
    }
  }
  return { width, height, data };
}

/** I420 → RGBA (tests and image dumps). */
export function i420ToRgba(frame: I420Frame): Uint8Array {
  const { width, height, data } = frame;
  const ySize = width * height;
  const cSize = ySize / 4;
  const out = new Uint8Array(ySize * 4);
  for (let y = 0; y < height; y++) {
    for (let x = 0; x < width; x++) {
      const c = (y >> 1) * (width >> 1) + (x >> 1);
      const Y = 1.164 * (data[y * width + x] - 16);
      const U = data[ySize + c] - 128;
      const V = data[ySize + cSize + c] - 128;
      const o = (y * width + x) * 4;
      out[o] = clamp(Y + 1.596 * V);
      out[o + 1] = clamp(Y - 0.392 * U - 0.813 * V);
      out[o + 2] = clamp(Y + 2.017 * U);
      out[o + 3] = 255;
    }
  }
  return out;
}

const clamp = (v: number) => (v < 0 ? 0 : v > 255 ? 255 : Math.round(v));
