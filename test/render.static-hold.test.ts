import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import fc from 'fast-check';
import sharp from 'sharp';
import { describe, expect, it } from 'vitest';
import { decodeClipLoop, readClipSource } from '../actors/render/clip-loop.ts';
import { i420Size } from '../actors/render/i420.ts';
import { holdStaticBlocks, STATIC_BLOCK, STATIC_BLOCK_MAX_DIFF } from '../actors/render/static-hold.ts';
import type { I420Frame } from '../actors/render/types.ts';
import { makeClipBundle } from './helpers/clip-bundle.ts';

const frameOf = (width: number, height: number, fill: (i: number) => number): I420Frame => ({
  width,
  height,
  data: Uint8Array.from({ length: i420Size(width, height) }, (_, i) => fill(i)),
});

/** Deterministic noise of ±`amplitude` levels (a camera's or a codec's), so runs compare. */
const noise = (seed: number, amplitude: number) => (i: number) => {
  const x = Math.sin(i * 12.9898 + seed * 78.233) * 43758.5453;
  return Math.round((x - Math.floor(x)) * (2 * amplitude) - amplitude);
};

const maxDiff = (a: Uint8Array, b: Uint8Array) => a.reduce((max, value, i) => Math.max(max, Math.abs(value - b[i])), 0);

describe('still areas of a video avatar held still between loop frames', () => {
  it('a noisy still background becomes bit-identical to the previous frame, a block that changed is taken as decoded', () => {
    const previous = frameOf(64, 48, (i) => 120 + noise(1, 2)(i));
    const current = frameOf(64, 48, (i) => 120 + noise(2, 2)(i));
    // One luma block (second row, third column) changed for real: a mouth opening, an edge moving.
    for (let y = 16; y < 32; y++) for (let x = 32; x < 48; x++) current.data[y * 64 + x] = 40;
    const decoded = Uint8Array.from(current.data);
    const blocks = Math.ceil(64 / STATIC_BLOCK) * Math.ceil(48 / STATIC_BLOCK);
    expect(holdStaticBlocks(previous, current)).toBe(blocks - 1);
    for (let y = 0; y < 48; y++) {
      for (let x = 0; x < 64; x++) {
        const i = y * 64 + x;
        const moved = y >= 16 && y < 32 && x >= 32 && x < 48;
        expect(current.data[i]).toBe(moved ? 40 : previous.data[i]);
      }
    }
    // Chroma held with its luma block, and never more than the bound away from what was decoded.
    expect(maxDiff(current.data, decoded)).toBeLessThanOrEqual(STATIC_BLOCK_MAX_DIFF);
  });

  it('a chroma change alone (a colour turning, same brightness) keeps the block as decoded', () => {
    const previous = frameOf(32, 32, () => 128);
    const current = frameOf(32, 32, () => 128);
    current.data[32 * 32 + 3] = 160; // one U sample of the first block
    expect(holdStaticBlocks(previous, current)).toBe(3);
    expect(current.data[32 * 32 + 3]).toBe(160);
  });

  it('a slow drift (a light dimming one level a frame) never strays past the bound, and is taken when it passes it', () => {
    let shown = frameOf(48, 32, () => 100);
    for (let step = 1; step <= 30; step++) {
      const next = frameOf(48, 32, () => 100 + step);
      holdStaticBlocks(shown, next);
      expect(maxDiff(next.data, frameOf(48, 32, () => 100 + step).data)).toBeLessThanOrEqual(STATIC_BLOCK_MAX_DIFF);
      shown = next;
    }
    expect(shown.data[0]).toBeGreaterThan(100 + 30 - STATIC_BLOCK_MAX_DIFF - 1);
  });

  it('odd sizes (partial blocks at the right and bottom edges, odd chroma) hold and bound like whole ones', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 40 }),
        fc.integer({ min: 1, max: 40 }),
        fc.integer({ min: 0, max: 1000 }),
        fc.integer({ min: 0, max: 12 }),
        (width, height, seed, amplitude) => {
          const previous = frameOf(width, height, (i) => 128 + noise(seed, amplitude)(i));
          const current = frameOf(width, height, (i) => 128 + noise(seed + 1, amplitude)(i));
          const decoded = Uint8Array.from(current.data);
          holdStaticBlocks(previous, current);
          // Every pixel is either as decoded or the previous frame's, and within the bound of what was decoded.
          for (let i = 0; i < decoded.length; i++) {
            expect(current.data[i] === decoded[i] || current.data[i] === previous.data[i]).toBe(true);
            expect(Math.abs(current.data[i] - decoded[i])).toBeLessThanOrEqual(STATIC_BLOCK_MAX_DIFF);
          }
          if (amplitude <= STATIC_BLOCK_MAX_DIFF / 2) expect(maxDiff(current.data, previous.data)).toBe(0);
        },
      ),
      { numRuns: 60 },
    );
  });

  it('a clip with camera noise loads as a loop whose still background is identical from frame to frame, and whose moving part moves', async () => {
    const bundle = await makeClipBundle();
    try {
      // Every frame: the bundle's first frame with ±2 levels of camera noise, and a 64 px square moving 3 px a frame.
      const { manifest, dir } = bundle.source;
      const frameFile = (k: number) => join(dir, 'frames', `frame_${String(k).padStart(5, '0')}.png`);
      const base = await sharp(frameFile(0)).raw().toBuffer({ resolveWithObject: true });
      const { width, height, channels } = base.info;
      const square = (k: number) => ({ x0: 200 + 3 * k, y0: 200, x1: 264 + 3 * k, y1: 264 });
      for (let k = 0; k < manifest.metadata.clip!.frame_count; k++) {
        const data = Buffer.from(base.data);
        const jitter = noise(k, 2);
        for (let i = 0; i < data.length; i++) data[i] = Math.min(255, Math.max(0, data[i] + jitter(i)));
        const { x0, y0, x1, y1 } = square(k);
        for (let y = y0; y < y1; y++)
          for (let x = x0; x < x1; x++) data.fill(255, (y * width + x) * channels, (y * width + x) * channels + 3);
        writeFileSync(frameFile(k), await sharp(data, { raw: { width, height, channels } }).png().toBuffer());
      }
      const clip = (await readClipSource(dir, manifest))!;
      const loop = await decodeClipLoop(clip, manifest.width, manifest.height);
      const lumaRows = (frame: I420Frame, y0: number, y1: number) => frame.data.subarray(y0 * width, y1 * width);
      for (let k = 1; k < loop.frames.length; k++) {
        // Above and below the square's blocks: bit-identical to the frame before, though every pixel was noisy.
        expect(maxDiff(lumaRows(loop.frames[k], 0, 192), lumaRows(loop.frames[k - 1], 0, 192))).toBe(0);
        expect(maxDiff(lumaRows(loop.frames[k], 272, height), lumaRows(loop.frames[k - 1], 272, height))).toBe(0);
        // The square's own rows changed (it moved).
        expect(maxDiff(lumaRows(loop.frames[k], 200, 264), lumaRows(loop.frames[k - 1], 200, 264))).toBeGreaterThan(
          100,
        );
      }
    } finally {
      rmSync(bundle.dir, { recursive: true, force: true });
    }
  });
});
