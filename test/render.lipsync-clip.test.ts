import { rmSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WarpRenderer } from '../actors/render/renderers/warp.ts';
import { loopFrameIndex } from '../actors/render/clip-loop.ts';
import type { AvatarSource } from '../actors/render/types.ts';
import { CLIP_BUNDLE_FRAMES as FRAMES, makeClipBundle } from './helpers/clip-bundle.ts';

import { ASTRONAUT_ANIMATION, lumaDiff, request } from './render.fixtures.ts';

const speaking = (frameIdx: number, open: number) =>
  request(frameIdx, { mouth: { open, wide: 0, round: 0 }, level: open, speaking: true });

describe('lipsync renderer (video avatar)', () => {
  let bundle: { source: AvatarSource; dir: string };
  beforeAll(async () => {
    bundle = await makeClipBundle();
  });
  afterAll(() => rmSync(bundle.dir, { recursive: true, force: true }));

  it('the loop plays forwards then backwards, so it never jumps, and the position follows the session frame index', () => {
    expect(Array.from({ length: 8 }, (_, i) => loopFrameIndex(i, 4))).toEqual([0, 1, 2, 3, 2, 1, 0, 1]);
    for (let i = 1; i < 100; i++) expect(Math.abs(loopFrameIndex(i, FRAMES) - loopFrameIndex(i - 1, FRAMES))).toBe(1);
    expect(loopFrameIndex(0, 1)).toBe(0);
  });

  it('idle shows the clip frame of the loop position (the head moves); the same frame index gives the same frame', async () => {
    const renderer = new WarpRenderer();
    await renderer.prepare(bundle.source);
    const everything = { x0: 0, y0: 0, x1: 0, y1: 0 };
    const first = renderer.render(request(0));
    const later = renderer.render(request(6));
    expect(lumaDiff(first, later, everything).outside).toBeGreaterThan(1);
    // Ping-pong: frame 6 forwards is frame 16 backwards (period 22).
    expect(lumaDiff(later, renderer.render(request(16)), everything).outside).toBe(0);
    expect(lumaDiff(first, renderer.render(request(22)), everything).outside).toBe(0);
  });

  it('speech opens the mouth where the current loop frame has it, and nowhere else', async () => {
    const renderer = new WarpRenderer();
    await renderer.prepare(bundle.source);
    for (const frameIdx of [0, 9]) {
      const shift = loopFrameIndex(frameIdx, FRAMES);
      const { x, y } = ASTRONAUT_ANIMATION.mouth_center;
      const mouth = { x0: x + shift - 30, y0: y - 10, x1: x + shift + 30, y1: y + 25 };
      const closed = renderer.render(request(frameIdx));
      const open = renderer.render(speaking(frameIdx, 1));
      const diff = lumaDiff(closed, open, mouth);
      expect(diff.inside).toBeGreaterThan(15);
      expect(diff.outside).toBeLessThan(1);
      const forehead = lumaDiff(closed, open, { x0: 190, y0: 40, x1: 290, y1: 80 });
      expect(forehead.inside).toBe(0);
    }
  });
});
