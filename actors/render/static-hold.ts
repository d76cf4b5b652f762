/**
 * Keeps a video avatar's still areas still. Footage from a real camera carries sensor noise, and a clip decoded from
 * H.264 carries coding noise, so a wall that does not move still differs by a few levels in every frame. VP8 then
 * pays motion search and residuals for every such block of every frame it sends: a clip session's encoder cost
 * about 2× a photo session's (docs/performance.md, "Clip avatars: where a clip session's extra CPU goes").
 *
 * When a loop is loaded, each frame's blocks that differ from the previous frame *as loaded* by at most
 * `STATIC_BLOCK_MAX_DIFF` are copied from it, so still areas are bit-identical from frame to frame and the encoder
 * skips them. Comparing with the previous frame as loaded (not as decoded) bounds the error: a slow drift is held
 * until it passes the bound, then taken whole, so no pixel ever strays more than the bound from its decoded value.
 * The loop plays forwards then backwards, so frame k's neighbours on screen are always k − 1 and k + 1, and a block
 * held between them is identical in both directions.
 */
import { chromaHeight, chromaWidth } from './i420.ts';
import type { I420Frame } from './types.ts';

/** VP8's macroblock: a block the encoder can skip whole when nothing in it changed. */
export const STATIC_BLOCK = 16;
/**
 * Largest per-pixel difference (on Y, U and V) of a block still called still: 4 of luma's 219 levels. Sensor and
 * coding noise in the real clips we tried stays under it in 70–73 % of 16×16 blocks (5–6 % were bit-identical as
 * decoded), while a head moving by a pixel changes its edges by far more; a step of 4 levels between a held block
 * and its neighbour does not show.
 */
export const STATIC_BLOCK_MAX_DIFF = 4;

/**
 * Copies into `current` every block that differs from `previous` by at most `STATIC_BLOCK_MAX_DIFF`; returns how
 * many blocks were held. Both frames must have the same size.
 */
export function holdStaticBlocks(previous: I420Frame, current: I420Frame): number {
  const { width, height } = current;
  if (previous.width !== width || previous.height !== height) throw new Error('frames differ in size');
  const cw = chromaWidth(width);
  const ch = chromaHeight(height);
  const uOffset = width * height;
  const vOffset = uOffset + cw * ch;
  const prev = previous.data;
  const cur = current.data;
  let held = 0;
  for (let y0 = 0; y0 < height; y0 += STATIC_BLOCK) {
    const y1 = Math.min(y0 + STATIC_BLOCK, height);
    const cy0 = y0 >> 1;
    const cy1 = Math.min((y1 + 1) >> 1, ch);
    for (let x0 = 0; x0 < width; x0 += STATIC_BLOCK) {
      const x1 = Math.min(x0 + STATIC_BLOCK, width);
      const cx0 = x0 >> 1;
      const cx1 = Math.min((x1 + 1) >> 1, cw);
      if (
        !within(prev, cur, 0, width, x0, x1, y0, y1) ||
        !within(prev, cur, uOffset, cw, cx0, cx1, cy0, cy1) ||
        !within(prev, cur, vOffset, cw, cx0, cx1, cy0, cy1)
      )
        continue;
      copy(prev, cur, 0, width, x0, x1, y0, y1);
      copy(prev, cur, uOffset, cw, cx0, cx1, cy0, cy1);
      copy(prev, cur, vOffset, cw, cx0, cx1, cy0, cy1);
      held++;
    }
  }
  return held;
}

function within(
  a: Uint8Array,
  b: Uint8Array,
  offset: number,
  stride: number,
  x0: number,
  x1: number,
  y0: number,
  y1: number,
): boolean {
  for (let y = y0; y < y1; y++) {
    const row = offset + y * stride;
    for (let i = row + x0; i < row + x1; i++) {
      const d = a[i] - b[i];
      if (d > STATIC_BLOCK_MAX_DIFF || d < -STATIC_BLOCK_MAX_DIFF) return false;
    }
  }
  return true;
}

function copy(
  from: Uint8Array,
  to: Uint8Array,
  offset: number,
  stride: number,
  x0: number,
  x1: number,
  y0: number,
  y1: number,
): void {
  for (let y = y0; y < y1; y++) {
    const row = offset + y * stride;
    to.set(from.subarray(row + x0, row + x1), row + x0);
  }
}
