/**
 * Full-resolution Y/U/V/alpha layers for parts that move by sub-pixel amounts or rotate (the rt_head
 * head). Chroma is kept at full resolution inside the layer and subsampled while compositing.
 */
import type { I420Frame } from './types.ts';
import { planes } from './i420.ts';
import type { RgbaImage } from './image.ts';

export interface YuvaLayer {
  /** Top-left of the layer in frame coordinates. */
  x: number;
  y: number;
  width: number;
  height: number;
  y_: Uint8Array;
  u: Uint8Array;
  v: Uint8Array;
  a: Uint8Array;
}

function clampByte(value: number): number {
  return value < 0 ? 0 : value > 255 ? 255 : (value + 0.5) | 0;
}

export function yuvaFromRgba(image: RgbaImage, x: number, y: number, width: number, height: number): YuvaLayer {
  const layer: YuvaLayer = {
    x,
    y,
    width,
    height,
    y_: new Uint8Array(width * height),
    u: new Uint8Array(width * height),
    v: new Uint8Array(width * height),
    a: new Uint8Array(width * height),
  };
  for (let row = 0; row < height; row++) {
    const sy = y + row;
    if (sy < 0 || sy >= image.height) continue;
    for (let col = 0; col < width; col++) {
      const sx = x + col;
      if (sx < 0 || sx >= image.width) continue;
      const o = (sy * image.width + sx) * 4;
      const i = row * width + col;
      const r = image.data[o];
      const g = image.data[o + 1];
      const b = image.data[o + 2];
      layer.y_[i] = clampByte(16 + 0.2568 * r + 0.5041 * g + 0.0979 * b);
      layer.u[i] = clampByte(128 - 0.1482 * r - 0.291 * g + 0.4392 * b);
      layer.v[i] = clampByte(128 + 0.4392 * r - 0.3678 * g - 0.0714 * b);
      layer.a[i] = image.data[o + 3];
    }
  }
  return layer;
}

/**
 * Gives fully transparent pixels next to the layer's edge the colour of their most opaque neighbour
 * (alpha untouched), so bilinear sampling at the soft edge does not pull in transparent black.
 */
export function dilateColour(layer: YuvaLayer): void {
  const { width, height } = layer;
  const alpha = layer.a;
  for (let y = 0; y < height; y++) {
    for (let x = 0; x < width; x++) {
      const i = y * width + x;
      if (alpha[i] !== 0) continue;
      let best = -1;
      let bestAlpha = 0;
      if (x > 0 && alpha[i - 1] > bestAlpha) {
        best = i - 1;
        bestAlpha = alpha[i - 1];
      }
      if (x < width - 1 && alpha[i + 1] > bestAlpha) {
        best = i + 1;
        bestAlpha = alpha[i + 1];
      }
      if (y > 0 && alpha[i - width] > bestAlpha) {
        best = i - width;
        bestAlpha = alpha[i - width];
      }
      if (y < height - 1 && alpha[i + width] > bestAlpha) {
        best = i + width;
        bestAlpha = alpha[i + width];
      }
      if (best < 0) continue;
      layer.y_[i] = layer.y_[best];
      layer.u[i] = layer.u[best];
      layer.v[i] = layer.v[best];
    }
  }
}

export function cloneLayer(layer: YuvaLayer): YuvaLayer {
  return { ...layer, y_: layer.y_.slice(), u: layer.u.slice(), v: layer.v.slice(), a: layer.a.slice() };
}

/** Alpha-composites `top` over `bottom` in place (both in the same frame coordinates). */
export function blendLayerInto(bottom: YuvaLayer, top: YuvaLayer): void {
  for (let row = 0; row < top.height; row++) {
    const by = top.y + row - bottom.y;
    if (by < 0 || by >= bottom.height) continue;
    for (let col = 0; col < top.width; col++) {
      const bx = top.x + col - bottom.x;
      if (bx < 0 || bx >= bottom.width) continue;
      const ti = row * top.width + col;
      const alpha = top.a[ti];
      if (alpha === 0) continue;
      const bi = by * bottom.width + bx;
      const inv = 255 - alpha;
      bottom.y_[bi] = (bottom.y_[bi] * inv + top.y_[ti] * alpha + 127) / 255;
      bottom.u[bi] = (bottom.u[bi] * inv + top.u[ti] * alpha + 127) / 255;
      bottom.v[bi] = (bottom.v[bi] * inv + top.v[ti] * alpha + 127) / 255;
      bottom.a[bi] = alpha + (bottom.a[bi] * inv) / 255;
    }
  }
}

/**
 * Composites `layer` into `frame`, rotated by `angle` (radians, clockwise on screen) about
 * (pivotX, pivotY) and then shifted by (dx, dy) — all sub-pixel, bilinear.
 */
export function compositeTransformed(
  frame: I420Frame,
  layer: YuvaLayer,
  angle: number,
  pivotX: number,
  pivotY: number,
  dx: number,
  dy: number,
): void {
  const cos = Math.cos(angle);
  const sin = Math.sin(angle);
  // Bounding box of the transformed layer, in frame pixels.
  let minX = Infinity,
    minY = Infinity,
    maxX = -Infinity,
    maxY = -Infinity;
  for (const [cx, cy] of [
    [layer.x, layer.y],
    [layer.x + layer.width, layer.y],
    [layer.x, layer.y + layer.height],
    [layer.x + layer.width, layer.y + layer.height],
  ]) {
    const rx = pivotX + (cx - pivotX) * cos - (cy - pivotY) * sin + dx;
    const ry = pivotY + (cx - pivotX) * sin + (cy - pivotY) * cos + dy;
    minX = Math.min(minX, rx);
    maxX = Math.max(maxX, rx);
    minY = Math.min(minY, ry);
    maxY = Math.max(maxY, ry);
  }
  const x0 = Math.max(0, Math.floor(minX) - 1);
  const y0 = Math.max(0, Math.floor(minY) - 1);
  const x1 = Math.min(frame.width, Math.ceil(maxX) + 1);
  const y1 = Math.min(frame.height, Math.ceil(maxY) + 1);
  const p = planes(frame);
  const lw = layer.width;
  const lh = layer.height;
  // Inverse map frame (fx, fy) -> layer-local (lx, ly) is affine: lx = ox + fx*cos + fy*sin, ly = oy - fx*sin + fy*cos.
  const originX = pivotX - layer.x - (dx + pivotX) * cos - (dy + pivotY) * sin;
  const originY = pivotY - layer.y + (dx + pivotX) * sin - (dy + pivotY) * cos;
  const la = layer.a;
  const ly_ = layer.y_;
  for (let y = y0; y < y1; y++) {
    let lx = originX + x0 * cos + y * sin;
    let ly = originY - x0 * sin + y * cos;
    for (let x = x0; x < x1; x++, lx += cos, ly -= sin) {
      // Interior only: the layer carries a transparent 1 px margin, so skipping its outermost ring loses nothing.
      if (lx < 0 || ly < 0 || lx >= lw - 1 || ly >= lh - 1) continue;
      const ix = lx | 0;
      const iy = ly | 0;
      const fx = lx - ix;
      const fy = ly - iy;
      const i00 = iy * lw + ix;
      const w00 = (1 - fx) * (1 - fy);
      const w10 = fx * (1 - fy);
      const w01 = (1 - fx) * fy;
      const w11 = fx * fy;
      const alpha = la[i00] * w00 + la[i00 + 1] * w10 + la[i00 + lw] * w01 + la[i00 + lw + 1] * w11;
      if (alpha < 0.5) continue;
      const colour = ly_[i00] * w00 + ly_[i00 + 1] * w10 + ly_[i00 + lw] * w01 + ly_[i00 + lw + 1] * w11;
      const i = y * frame.width + x;
      p.y[i] = (p.y[i] * (255 - alpha) + colour * alpha) / 255;
    }
  }
  const lu = layer.u;
  const lv = layer.v;
  for (let cy = y0 >> 1; cy < (y1 + 1) >> 1 && cy < p.ch; cy++) {
    for (let cx = x0 >> 1; cx < (x1 + 1) >> 1 && cx < p.cw; cx++) {
      const fx0 = cx * 2 + 0.5;
      const fy0 = cy * 2 + 0.5;
      const lx = originX + fx0 * cos + fy0 * sin;
      const ly = originY - fx0 * sin + fy0 * cos;
      if (lx < 0 || ly < 0 || lx >= lw - 1 || ly >= lh - 1) continue;
      const ix = lx | 0;
      const iy = ly | 0;
      const fx = lx - ix;
      const fy = ly - iy;
      const i00 = iy * lw + ix;
      const w00 = (1 - fx) * (1 - fy);
      const w10 = fx * (1 - fy);
      const w01 = (1 - fx) * fy;
      const w11 = fx * fy;
      const alpha = la[i00] * w00 + la[i00 + 1] * w10 + la[i00 + lw] * w01 + la[i00 + lw + 1] * w11;
      if (alpha < 0.5) continue;
      const u = lu[i00] * w00 + lu[i00 + 1] * w10 + lu[i00 + lw] * w01 + lu[i00 + lw + 1] * w11;
      const v = lv[i00] * w00 + lv[i00 + 1] * w10 + lv[i00 + lw] * w01 + lv[i00 + lw + 1] * w11;
      const i = cy * p.cw + cx;
      p.u[i] = (p.u[i] * (255 - alpha) + u * alpha) / 255;
      p.v[i] = (p.v[i] * (255 - alpha) + v * alpha) / 255;
    }
  }
}
