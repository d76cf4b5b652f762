/**
 * Small drawing helpers that work directly on I420 planes, so per-frame overlays never need an
 * RGBA round trip. Colours are given as (Y, U, V).
 */
import type { I420Frame } from './types.ts';
import { planes } from './i420.ts';

export interface Yuv {
  y: number;
  u: number;
  v: number;
}

export const WHITE: Yuv = { y: 235, u: 128, v: 128 };
export const BLACK: Yuv = { y: 16, u: 128, v: 128 };

/** Fills [x, x+w) x [y, y+h), clipped to the frame. Chroma is written for every 2x2 cell touched. */
export function fillRect(frame: I420Frame, x: number, y: number, w: number, h: number, colour: Yuv): void {
  const x0 = Math.max(0, Math.floor(x));
  const y0 = Math.max(0, Math.floor(y));
  const x1 = Math.min(frame.width, Math.floor(x + w));
  const y1 = Math.min(frame.height, Math.floor(y + h));
  if (x1 <= x0 || y1 <= y0) return;
  const p = planes(frame);
  for (let row = y0; row < y1; row++) p.y.fill(colour.y, row * frame.width + x0, row * frame.width + x1);
  const cx0 = x0 >> 1;
  const cx1 = (x1 + 1) >> 1;
  for (let row = y0 >> 1; row < (y1 + 1) >> 1; row++) {
    p.u.fill(colour.u, row * p.cw + cx0, row * p.cw + cx1);
    p.v.fill(colour.v, row * p.cw + cx0, row * p.cw + cx1);
  }
}

/** 3x5 bitmap glyphs: each string row is one glyph row, '#' = ink. Digits plus the few signs the mock card uses. */
const GLYPHS: Record<string, string[]> = {
  '0': ['###', '#.#', '#.#', '#.#', '###'],
  '1': ['.#.', '##.', '.#.', '.#.', '###'],
  '2': ['###', '..#', '###', '#..', '###'],
  '3': ['###', '..#', '###', '..#', '###'],
  '4': ['#.#', '#.#', '###', '..#', '..#'],
  '5': ['###', '#..', '###', '..#', '###'],
  '6': ['###', '#..', '###', '#.#', '###'],
  '7': ['###', '..#', '.#.', '.#.', '.#.'],
  '8': ['###', '#.#', '###', '#.#', '###'],
  '9': ['###', '#.#', '###', '..#', '###'],
  ':': ['...', '.#.', '...', '.#.', '...'],
  '.': ['...', '...', '...', '...', '.#.'],
  '#': ['#.#', '###', '#.#', '###', '#.#'],
  ' ': ['...', '...', '...', '...', '...'],
  m: ['...', '...', '###', '###', '#.#'],
  s: ['...', '.##', '.#.', '..#', '##.'],
  f: ['.##', '.#.', '###', '.#.', '.#.'],
};

export const GLYPH_WIDTH = 3;
export const GLYPH_HEIGHT = 5;

/** Draws `text` with its top-left at (x, y); each font pixel becomes a `scale`-sized square. Unknown characters are skipped. */
export function drawText(frame: I420Frame, text: string, x: number, y: number, scale: number, colour: Yuv): void {
  let penX = x;
  for (const char of text) {
    const glyph = GLYPHS[char];
    if (glyph) {
      for (let row = 0; row < GLYPH_HEIGHT; row++) {
        for (let col = 0; col < GLYPH_WIDTH; col++) {
          if (glyph[row][col] === '#') fillRect(frame, penX + col * scale, y + row * scale, scale, scale, colour);
        }
      }
    }
    penX += (GLYPH_WIDTH + 1) * scale;
  }
}

export function textWidth(text: string, scale: number): number {
  return text.length * (GLYPH_WIDTH + 1) * scale - scale;
}
