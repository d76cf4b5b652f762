/**
 * A video avatar's head on top of its loop (`actors/render/clip-head.ts`), measured with the service's face landmarks on
 * rendered frames of a synthetic clip whose portrait moves 1 px right per loop frame: a listening nod moves the nose tip
 * down with the loop kept; `motion: 0` takes the loop's own head motion back so the face holds still (≤ 0.3 px, measured
 * from the pixels: the landmark net's own jitter on these frames is ~1 px).
 */
import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import sharp from 'sharp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { closeFaceDetector, detectMouth } from '../actors/faces/detector.ts';
import { i420ToRgba } from '../actors/render/i420.ts';
import { WarpRenderer } from '../actors/render/renderers/warp.ts';
import type { FrameRequest, I420Frame, Point } from '../actors/render/types.ts';
import { CLIP_BUNDLE_FRAMES, makeClipBundle } from './helpers/clip-bundle.ts';
import { PORTRAIT, request } from './render.fixtures.ts';
import { readClipSource } from '../actors/render/clip-loop.ts';

const nodding = { listening: 1, nod: 1, lookX: 0, lookY: 0, tilt: 0 };

async function noseOf(frame: I420Frame): Promise<Point> {
  // A full search on every frame: refitted in a fixed box the landmark net leans towards that box and reads a moving
  // face as moving about half as far.
  const found = await detectMouth({ rgba: i420ToRgba(frame), width: frame.width, height: frame.height });
  if (!found.ok || !found.animation.nose_tip) throw new Error('no face found on a rendered clip frame');
  return found.animation.nose_tip;
}

describe('a video avatar’s head on top of its loop', () => {
  let bundle: Awaited<ReturnType<typeof makeClipBundle>>;
  const renderer = new WarpRenderer();
  const noses = (requests: FrameRequest[]) => Promise.all(requests.map((r) => noseOf(renderer.render(r))));
  const loop = (overrides: Partial<FrameRequest>) =>
    Array.from({ length: CLIP_BUNDLE_FRAMES }, (_, i) => request(i, overrides));

  beforeAll(async () => {
    bundle = await makeClipBundle();
    // Its frames again, each the portrait shifted exactly i px right (the edge column repeated), so the pixels move as
    // far as the face track says: the bundle helper's extend-then-extract leaves sharp a wider picture, which the loop
    // scales back down, and its face then moves about half as far as its track.
    const { data, info } = await sharp(PORTRAIT).ensureAlpha().raw().toBuffer({ resolveWithObject: true });
    for (let i = 0; i < CLIP_BUNDLE_FRAMES; i++) {
      const shifted = Buffer.alloc(data.length);
      for (let y = 0; y < info.height; y++)
        for (let x = 0; x < info.width; x++) {
          const from = (y * info.width + Math.max(0, x - i)) * 4;
          data.copy(shifted, (y * info.width + x) * 4, from, from + 4);
        }
      const png = await sharp(shifted, { raw: { width: info.width, height: info.height, channels: 4 } })
        .png()
        .toBuffer();
      writeFileSync(join(bundle.dir, 'frames', `frame_${String(i).padStart(5, '0')}.png`), png);
    }
    const { manifest } = bundle.source;
    await renderer.prepare({ ...bundle.source, clip: await readClipSource(bundle.dir, manifest) });
  }, 60_000);

  afterAll(async () => {
    rmSync(bundle.dir, { recursive: true, force: true });
    await closeFaceDetector();
  });

  it('a listening nod moves the nose tip down on the loop frame it shows', async () => {
    const [plain] = await noses([request(5)]);
    const [nod] = await noses([request(5, { attention: nodding })]);
    expect(nod.y - plain.y).toBeGreaterThanOrEqual(2.5);
  }, 60_000);

  it('motion 0: the loop’s own head motion is taken back (the face ≤ 0.3 px from where it sits on frame 0); motion 1 keeps it', async () => {
    // The face's shift between two frames, from the pixels (the landmark net's own jitter on a full search is ~1 px):
    // the offset, in px, that best lines up the face region, refined to sub-pixel by a parabola through the best three.
    const face = { x0: 185, x1: 265, y0: 75, y1: 170 };
    const sad = (a: I420Frame, b: I420Frame, dx: number, dy: number) => {
      let sum = 0;
      for (let y = face.y0; y < face.y1; y++)
        for (let x = face.x0; x < face.x1; x++)
          sum += Math.abs(a.data[y * a.width + x] - b.data[(y + dy) * b.width + x + dx]);
      return sum;
    };
    const subPixel = (minus: number, at: number, plus: number) => {
      const curve = minus - 2 * at + plus;
      return curve > 0 ? (minus - plus) / (2 * curve) : 0;
    };
    const shift = (a: I420Frame, b: I420Frame): Point => {
      let best = { dx: 0, dy: 0, sad: Infinity };
      for (let dy = -3; dy <= 3; dy++)
        for (let dx = -14; dx <= 14; dx++) {
          const value = sad(a, b, dx, dy);
          if (value < best.sad) best = { dx, dy, sad: value };
        }
      const { dx, dy } = best;
      return {
        x: dx + subPixel(sad(a, b, dx - 1, dy), best.sad, sad(a, b, dx + 1, dy)),
        y: dy + subPixel(sad(a, b, dx, dy - 1), best.sad, sad(a, b, dx, dy + 1)),
      };
    };
    const travel = (overrides: Partial<FrameRequest>) => {
      const frames = loop(overrides).map((r) => renderer.render(r));
      return Math.max(...frames.map((frame) => Math.hypot(shift(frames[0], frame).x, shift(frames[0], frame).y)));
    };
    const moving = travel({});
    const still = travel({ motion: 0 });
    console.log(
      `clip loop: the face's farthest shift from frame 0, motion 1 ${moving.toFixed(2)} px, motion 0 ${still.toFixed(2)} px`,
    );
    expect(moving).toBeGreaterThan(CLIP_BUNDLE_FRAMES - 2);
    expect(still).toBeLessThanOrEqual(0.3);
  });
});
