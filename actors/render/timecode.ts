import type { I420Frame } from './types.ts';

/**
 * A machine-readable timecode in the luma plane of mock frames: two rows of 20 black/white blocks
 * (frame index, then pts in 10 ms units), framed by a white and a black calibration block. Blocks are
 * large and binary so they survive VP8/H.264 compression; decoding samples each block's centre and
 * thresholds against the calibration blocks.
 */
export const TIMECODE_BITS = 20;
const BLOCKS_PER_ROW = TIMECODE_BITS + 2;
const WHITE = 235;
const BLACK = 16;

export function timecodeGeometry(width: number): { block: number; rows: number } {
  const block = Math.max(4, Math.floor(width / BLOCKS_PER_ROW));
  return { block, rows: 2 };
}

export function encodeTimecode(frame: I420Frame, frameIdx: number, ptsMs: number): void {
  const { block } = timecodeGeometry(frame.width);
  const values = [frameIdx % 2 ** TIMECODE_BITS, Math.round(ptsMs / 10) % 2 ** TIMECODE_BITS];
  values.forEach((value, row) => {
    paint(frame, 0, row, block, WHITE);
    for (let bit = 0; bit < TIMECODE_BITS; bit++) {
      paint(frame, bit + 1, row, block, value & (1 << (TIMECODE_BITS - 1 - bit)) ? WHITE : BLACK);
    }
    paint(frame, TIMECODE_BITS + 1, row, block, BLACK);
  });
}

export function decodeTimecode(frame: I420Frame): { frameIdx: number; ptsMs: number } | null {
  const { block } = timecodeGeometry(frame.width);
  const out: number[] = [];
  for (let row = 0; row < 2; row++) {
    const white = sample(frame, 0, row, block);
    const black = sample(frame, TIMECODE_BITS + 1, row, block);
    if (white - black < 60) return null;
    const threshold = (white + black) / 2;
    let value = 0;
    for (let bit = 0; bit < TIMECODE_BITS; bit++) value = (value << 1) | (sample(frame, bit + 1, row, block) > threshold ? 1 : 0);
    out.push(value);
  }
  return { frameIdx: out[0], ptsMs: out[1] * 10 };
}

function paint(frame: I420Frame, col: number, row: number, block: number, luma: number): void {
  const { width, height, data } = frame;
  const ySize = width * height;
  const cw = width / 2;
  for (let y = row * block; y < (row + 1) * block && y < height; y++) {
    for (let x = col * block; x < (col + 1) * block && x < width; x++) {
      data[y * width + x] = luma;
      const c = (y >> 1) * cw + (x >> 1);
      data[ySize + c] = 128;
      data[ySize + ySize / 4 + c] = 128;
    }
  }
}

function sample(frame: I420Frame, col: number, row: number, block: number): number {
  const { width, data } = frame;
  const inset = Math.floor(block / 4);
  let sum = 0;
  let n = 0;
  for (let y = row * block + inset; y < (row + 1) * block - inset; y++) {
    for (let x = col * block + inset; x < (col + 1) * block - inset; x++) {
      sum += data[y * width + x];
      n++;
    }
  }
  return n ? sum / n : 0;
}
