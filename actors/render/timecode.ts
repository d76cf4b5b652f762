/**
 * Machine-readable timecode stamped into the luma plane of mock frames, so recordings and WebRTC
 * captures can be checked frame by frame after lossy video coding.
 *
 * Layout: 3 rows of 32 blocks at the top of the frame, each block `width/32` px wide and at least
 * 8 px tall (16x8 at 512 px wide), black = 0, white = 1, MSB first:
 *   sync word (16 bits) | frameIdx (32 bits) | ptsMs (32 bits, whole ms, ~49 days) | CRC-16 (16 bits)
 * Decoding samples only the centre of each block and thresholds at mid-grey, which survives
 * H.264/VP8/JPEG ringing; the sync word and CRC reject frames that carry no timecode.
 */
import type { I420Frame } from './types.ts';
import { fillRect, BLACK, WHITE } from './draw-i420.ts';

const SYNC_WORD = 0xa5c3;
const BLOCKS_PER_ROW = 32;
const ROWS = 3;
const MIN_BLOCK_HEIGHT = 8;

export interface Timecode {
  frameIdx: number;
  ptsMs: number;
}

export function timecodeGeometry(width: number): { blockWidth: number; blockHeight: number; stripHeight: number } {
  const blockWidth = Math.max(1, Math.floor(width / BLOCKS_PER_ROW));
  const blockHeight = Math.max(MIN_BLOCK_HEIGHT, blockWidth >> 1);
  return { blockWidth, blockHeight, stripHeight: blockHeight * ROWS };
}

function crc16(bytes: number[]): number {
  let crc = 0xffff;
  for (const byte of bytes) {
    crc ^= byte << 8;
    for (let bit = 0; bit < 8; bit++) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
  }
  return crc;
}

function payloadBytes(frameIdx: number, ptsMs: number): number[] {
  const bytes: number[] = [];
  for (const value of [frameIdx >>> 0, ptsMs >>> 0]) {
    bytes.push((value >>> 24) & 0xff, (value >>> 16) & 0xff, (value >>> 8) & 0xff, value & 0xff);
  }
  return bytes;
}

function toBits(words: Array<[value: number, bits: number]>): number[] {
  const bits: number[] = [];
  for (const [value, count] of words) {
    for (let i = count - 1; i >= 0; i--) bits.push(Math.floor(value / 2 ** i) % 2);
  }
  return bits;
}

/** Stamps the timecode strip into `frame` in place. ptsMs is rounded to whole ms and wraps at 2^32. */
export function encodeTimecode(frame: I420Frame, frameIdx: number, ptsMs: number): void {
  const idx = Math.max(0, Math.floor(frameIdx)) >>> 0;
  const pts = Math.max(0, Math.round(ptsMs)) >>> 0;
  const crc = crc16(payloadBytes(idx, pts));
  const bits = toBits([
    [SYNC_WORD, 16],
    [idx, 32],
    [pts, 32],
    [crc, 16],
  ]);
  const { blockWidth, blockHeight } = timecodeGeometry(frame.width);
  bits.forEach((bit, i) => {
    const col = i % BLOCKS_PER_ROW;
    const row = Math.floor(i / BLOCKS_PER_ROW);
    fillRect(frame, col * blockWidth, row * blockHeight, blockWidth, blockHeight, bit ? WHITE : BLACK);
  });
}

function readWord(bits: number[], start: number, count: number): number {
  let value = 0;
  for (let i = 0; i < count; i++) value = value * 2 + bits[start + i];
  return value;
}

/** Reads the timecode strip; null when the frame carries none (sync or CRC mismatch). */
export function decodeTimecode(frame: I420Frame): Timecode | null {
  const { blockWidth, blockHeight, stripHeight } = timecodeGeometry(frame.width);
  if (frame.height < stripHeight || blockWidth < 2) return null;
  const bits: number[] = [];
  // Sample the inner half of each block: edges are where codecs smear black into white.
  const insetX = Math.floor(blockWidth / 4);
  const insetY = Math.floor(blockHeight / 4);
  for (let i = 0; i < BLOCKS_PER_ROW * ROWS; i++) {
    const x0 = (i % BLOCKS_PER_ROW) * blockWidth + insetX;
    const y0 = Math.floor(i / BLOCKS_PER_ROW) * blockHeight + insetY;
    const x1 = x0 + Math.max(1, blockWidth - 2 * insetX);
    const y1 = y0 + Math.max(1, blockHeight - 2 * insetY);
    let sum = 0;
    for (let y = y0; y < y1; y++) for (let x = x0; x < x1; x++) sum += frame.data[y * frame.width + x];
    bits.push(sum / ((x1 - x0) * (y1 - y0)) > 125 ? 1 : 0);
  }
  if (readWord(bits, 0, 16) !== SYNC_WORD) return null;
  const frameIdx = readWord(bits, 16, 32);
  const ptsMs = readWord(bits, 48, 32);
  if (readWord(bits, 80, 16) !== crc16(payloadBytes(frameIdx, ptsMs))) return null;
  return { frameIdx, ptsMs };
}
