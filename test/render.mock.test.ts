import sharp from 'sharp';
import fc from 'fast-check';
import { afterAll, describe, expect, it } from 'vitest';
import { createRenderer } from '../actors/render/renderers/index.ts';
import { decodeTimecode, encodeTimecode } from '../actors/render/timecode.ts';
import { i420ToRgba, rgbaToI420, i420Size } from '../actors/render/i420.ts';
import { canRender } from '../actors/render/compat.ts';
import type { I420Frame } from '../actors/render/types.ts';
import { makePortraitBundle, request } from './render.fixtures.ts';

async function jpegRoundTrip(frame: I420Frame, quality: number): Promise<I420Frame> {
  const { width, height } = frame;
  const jpeg = await sharp(Buffer.from(i420ToRgba(frame)), { raw: { width, height, channels: 4 } })
    .jpeg({ quality })
    .toBuffer();
  const { data } = await sharp(jpeg).ensureAlpha().raw().toBuffer({ resolveWithObject: true });
  return rgbaToI420(new Uint8Array(data), width, height);
}

describe('mock renderer', () => {
  const bundle = makePortraitBundle({ modelType: 'lipsync' });
  afterAll(() => bundle.cleanup());

  it('renders a full-size I420 test card whose timecode survives JPEG quality 50', async () => {
    const renderer = createRenderer('mock');
    await renderer.prepare(bundle.source);
    for (const [frameIdx, ptsMs] of [
      [0, 0],
      [1234, 49_360],
      [999_999, 3_600_000_007 % 2 ** 32],
      [65_537, 12_345_678],
    ]) {
      const frame = renderer.render(request(frameIdx, { ptsMs, level: 0.7, speaking: true }));
      expect([frame.width, frame.height, frame.data.length]).toEqual([512, 512, i420Size(512, 512)]);
      expect(decodeTimecode(await jpegRoundTrip(frame, 50))).toEqual({ frameIdx, ptsMs });
    }
  });

  it('timecode round-trips any frame index / pts through lossy coding at 256x192 (property)', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 0, max: 2 ** 32 - 1 }),
        fc.integer({ min: 0, max: 2 ** 32 - 1 }),
        async (frameIdx, ptsMs) => {
          const frame: I420Frame = { width: 256, height: 192, data: new Uint8Array(i420Size(256, 192)).fill(128) };
          encodeTimecode(frame, frameIdx, ptsMs);
          expect(decodeTimecode(await jpegRoundTrip(frame, 50))).toEqual({ frameIdx, ptsMs });
        },
      ),
      { numRuns: 25 },
    );
  });

  it('a frame without a timecode decodes to null', async () => {
    const renderer = createRenderer('lipsync');
    await renderer.prepare(bundle.source);
    expect(decodeTimecode(renderer.render(request(5)))).toBeNull();
  });

  it('the level bar grows with the audio level, and the card is deterministic', async () => {
    const renderer = createRenderer('mock');
    await renderer.prepare(bundle.source);
    const quiet = renderer.render(request(7, { level: 0.1 }));
    const loud = renderer.render(request(7, { level: 0.9 }));
    const barRow = 512 - 20; // inside the level bar (bottom 2 bars of 12 px)
    const green = (frame: I420Frame) => {
      let count = 0;
      for (let x = 0; x < 512; x++) if (frame.data[barRow * 512 + x] > 100) count++;
      return count;
    };
    expect(green(loud)).toBeGreaterThan(green(quiet) + 300);
    expect(Buffer.compare(Buffer.from(renderer.render(request(7, { level: 0.1 })).data), Buffer.from(quiet.data))).toBe(
      0,
    );
  });

  it('compatibility: mock renders any avatar; lipsync only photos; rt/rt_head only drawn avatars', () => {
    expect(canRender('mock', 'lipsync_c')).toBe(true);
    expect(canRender('lipsync', 'lipsync')).toBe(true);
    expect(canRender('lipsync', 'rt')).toBe(false);
    expect(canRender('rt', 'rt_head')).toBe(true);
    expect(canRender('rt_head', 'rt')).toBe(true);
    expect(canRender('rt', 'lipsync')).toBe(false);
    expect(canRender('lipsync_b', 'lipsync_b')).toBe(false);
    expect(() => createRenderer('lipsync_b')).toThrow(/no renderer/);
    expect(() => createRenderer('lipsync_c')).toThrow(/no renderer/);
  });
});
