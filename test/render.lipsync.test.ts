import { afterAll, describe, expect, it } from 'vitest';
import { WarpRenderer } from '../actors/render/renderers/warp.ts';
import { blinkClosure } from '../actors/render/idle-motion.ts';
import { ASTRONAUT_ANIMATION, dumpPng, lumaDiff, makePortraitBundle, request } from './render.fixtures.ts';

const { x: mx, y: my } = ASTRONAUT_ANIMATION.mouth_center;
const MOUTH_BOX = { x0: mx - 30, y0: my - 10, x1: mx + 30, y1: my + 25 };
const speaking = (frameIdx: number, open: number, wide = 0, round = 0) =>
  request(frameIdx, { mouth: { open, wide, round }, level: open, speaking: true });

describe('lipsync renderer (photo)', () => {
  const bundle = makePortraitBundle();
  const still = makePortraitBundle({ animation: null });
  afterAll(() => {
    bundle.cleanup();
    still.cleanup();
  });

  it('opens the mouth: large change inside the mouth box, the rest of the photo untouched', async () => {
    const renderer = new WarpRenderer();
    await renderer.prepare(bundle.source);
    const closed = renderer.render(speaking(100, 0));
    const half = renderer.render(speaking(100, 0.5));
    const open = renderer.render(speaking(100, 1));
    await dumpPng(open, 'render-lipsync-open.png');
    const full = lumaDiff(closed, open, MOUTH_BOX);
    expect(closed.data.length).toBe((512 * 512 * 3) / 2);
    expect(full.inside).toBeGreaterThan(15);
    expect(lumaDiff(closed, half, MOUTH_BOX).inside).toBeLessThan(full.inside);
    // Only the jaw/chin region around the mouth moves (the warp fades out inside it); everything else is bit-identical.
    expect(full.outside).toBeLessThan(1);
    const warpRegion = { x0: mx - 1.4 * 42, y0: my - 0.8 * 42, x1: mx + 1.4 * 42, y1: my + 1.75 * 42 };
    expect(lumaDiff(closed, open, warpRegion).outside).toBe(0);
    const forehead = lumaDiff(closed, open, { x0: 190, y0: 40, x1: 290, y1: 80 });
    expect(forehead.inside).toBe(0);
  });

  it('wide and round shapes differ from a neutral opening', async () => {
    const renderer = new WarpRenderer();
    await renderer.prepare(bundle.source);
    const neutral = renderer.render(speaking(3, 0.6));
    expect(lumaDiff(neutral, renderer.render(speaking(3, 0.6, 1, 0)), MOUTH_BOX).inside).toBeGreaterThan(1);
    expect(lumaDiff(neutral, renderer.render(speaking(3, 0.6, 0, 1)), MOUTH_BOX).inside).toBeGreaterThan(1);
  });

  it('idle: blinks and sway change frames over time, deterministically per frameIdx', async () => {
    const renderer = new WarpRenderer();
    await renderer.prepare(bundle.source);
    const frames = Array.from({ length: 250 }, (_, i) => renderer.render(request(i)));
    const everything = { x0: 0, y0: 0, x1: 0, y1: 0 };
    const changes = frames.slice(1).filter((frame, i) => lumaDiff(frame, frames[i], everything).outside > 0.001).length;
    expect(changes).toBeGreaterThan(10);
    const blinkFrame = frames.findIndex((_, i) => blinkClosure(i, 25) === 1);
    expect(blinkFrame).toBeGreaterThan(0);
    const { x, y } = ASTRONAUT_ANIMATION.left_eye;
    const eye = { x0: x - 6, y0: y - 3, x1: x + 6, y1: y + 3 };
    expect(lumaDiff(frames[blinkFrame], renderer.render(speaking(blinkFrame + 50, 0)), eye).inside).toBeGreaterThan(5);
    const again = new WarpRenderer();
    await again.prepare(bundle.source);
    expect(Buffer.compare(Buffer.from(again.render(request(137)).data), Buffer.from(frames[137].data))).toBe(0);
  });

  it('without metadata.animation serves the still image for any pose', async () => {
    const renderer = new WarpRenderer();
    await renderer.prepare(still.source);
    expect(renderer.animated).toBe(false);
    const a = renderer.render(request(10));
    const b = renderer.render(speaking(11, 1, 1, 0));
    expect(Buffer.compare(Buffer.from(a.data), Buffer.from(b.data))).toBe(0);
  });
});
