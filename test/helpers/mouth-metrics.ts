/**
 * Measurements of a rendered mouth on an I420 frame, in the avatar's own mouth geometry, shared by the
 * lipsync mouth test and `tools/viseme-contact-sheet.ts` (which prints them next to the contact sheet).
 */
import type { I420Frame, MouthAnimation } from '../../actors/render/types.ts';

/** Luma (BT.601 limited range) below which a pixel counts as the dark inside of an open mouth (≈ sRGB grey 63). */
export const DARK_LUMA = 70;
/** A tooth pixel is bright and not red: lips and skin of the portrait sit at V ≥ 141, its teeth at V ≤ 140. */
export const TEETH_LUMA = 165;
export const TEETH_MAX_V = 142;
/** Upper teeth are looked for this far (in mouth widths) above a column's topmost dark pixel. */
const TEETH_SEARCH = 0.12;

export interface Box {
  x0: number;
  y0: number;
  x1: number;
  y1: number;
}

/** Where an open mouth can be, in mouth widths around the mouth centre; stops above the collar of the portrait. */
export function mouthMeasureBox(animation: MouthAnimation): Box {
  const { x, y } = animation.mouth_center;
  const mw = animation.mouth_width;
  return {
    x0: Math.round(x - 0.75 * mw),
    y0: Math.round(y - 0.45 * mw),
    x1: Math.round(x + 0.75 * mw),
    y1: Math.round(y + 0.75 * mw),
  };
}

export interface MouthMeasure {
  /** Dark pixels inside the measure box divided by mouth_width². */
  darkArea: number;
  /** Horizontal extent of the dark pixels, px. */
  darkWidth: number;
  /** Largest number of dark pixels in one column, px. */
  darkHeight: number;
  /** Columns (px) with a bright, unsaturated pixel just above their topmost dark pixel: the upper teeth. */
  teethWidth: number;
}

export function measureMouth(frame: I420Frame, animation: MouthAnimation): MouthMeasure {
  const box = mouthMeasureBox(animation);
  const { width } = frame;
  const luma = frame.data;
  const chromaWidth = (frame.width + 1) >> 1;
  const vOffset = frame.width * frame.height + chromaWidth * ((frame.height + 1) >> 1);
  const search = Math.max(2, Math.round(TEETH_SEARCH * animation.mouth_width));
  let dark = 0;
  let minX = Infinity;
  let maxX = -Infinity;
  let darkHeight = 0;
  let teethWidth = 0;
  for (let x = box.x0; x < box.x1; x++) {
    let column = 0;
    let top = -1;
    for (let y = box.y0; y < box.y1; y++) {
      if (luma[y * width + x] >= DARK_LUMA) continue;
      column++;
      if (top < 0) top = y;
    }
    if (column === 0) continue;
    dark += column;
    darkHeight = Math.max(darkHeight, column);
    minX = Math.min(minX, x);
    maxX = Math.max(maxX, x);
    for (let y = top - 1; y >= Math.max(box.y0, top - search); y--) {
      const v = luma[vOffset + (y >> 1) * chromaWidth + (x >> 1)];
      if (luma[y * width + x] >= TEETH_LUMA && v <= TEETH_MAX_V) {
        teethWidth++;
        break;
      }
    }
  }
  const mw = animation.mouth_width;
  return { darkArea: dark / (mw * mw), darkWidth: dark > 0 ? maxX - minX + 1 : 0, darkHeight, teethWidth };
}

/**
 * How far the chin moved down, px: the vertical shift (0..0.5 mouth widths, 0.25 px steps) that best maps the
 * chin band of `rest` onto `frame`, in the middle third of the mouth width where the jaw moves rigidly.
 */
export function jawDropPx(rest: I420Frame, frame: I420Frame, animation: MouthAnimation): number {
  const { x: cx, y: cy } = animation.mouth_center;
  const mw = animation.mouth_width;
  const x0 = Math.round(cx - 0.3 * mw);
  const x1 = Math.round(cx + 0.3 * mw);
  const y0 = Math.round(cy + 0.45 * mw);
  const y1 = Math.round(cy + 0.8 * mw);
  const sample = (image: I420Frame, x: number, y: number): number => {
    const y0i = Math.floor(y);
    const f = y - y0i;
    return image.data[y0i * image.width + x] * (1 - f) + image.data[(y0i + 1) * image.width + x] * f;
  };
  let best = 0;
  let bestError = Infinity;
  for (let shift = 0; shift <= 0.5 * mw; shift += 0.25) {
    let error = 0;
    for (let y = y0; y < y1; y++)
      for (let x = x0; x < x1; x++) error += Math.abs(sample(frame, x, y + shift) - rest.data[y * rest.width + x]);
    if (error < bestError) {
      bestError = error;
      best = shift;
    }
  }
  return best;
}

/** Whether every luma and chroma sample of the rows above `rowLimit` is identical in both frames. */
export function rowsIdentical(a: I420Frame, b: I420Frame, rowLimit: number): boolean {
  const lumaEnd = rowLimit * a.width;
  for (let i = 0; i < lumaEnd; i++) if (a.data[i] !== b.data[i]) return false;
  const chromaWidth = (a.width + 1) >> 1;
  const chromaRows = rowLimit >> 1;
  const planeSize = chromaWidth * ((a.height + 1) >> 1);
  const uOffset = a.width * a.height;
  for (const offset of [uOffset, uOffset + planeSize]) {
    for (let i = offset; i < offset + chromaRows * chromaWidth; i++) if (a.data[i] !== b.data[i]) return false;
  }
  return true;
}
