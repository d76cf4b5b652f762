import fs from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { createRenderer } from '../actors/render/renderers/index.ts';
import { faceGeometry, faceParams } from '../actors/render/drawn-face.ts';
import { renderFramesInline } from '../actors/render/pool.ts';
import type { AvatarManifest, AvatarSource, ModelType } from '../actors/render/types.ts';
import { dumpPng, lumaDiff, request } from './render.fixtures.ts';

const AVATARS = path.join(import.meta.dirname, '..', 'avatars');

async function avatar(id: string): Promise<AvatarSource> {
  const dir = path.join(AVATARS, id);
  const manifest: AvatarManifest = JSON.parse(await fs.readFile(path.join(dir, 'manifest.json'), 'utf8'));
  return { id, dir, manifest };
}

function mouthBox(source: AvatarSource) {
  const g = faceGeometry(faceParams(source.manifest), source.manifest.width, source.manifest.height);
  return {
    x0: Math.round(g.mouthX - g.mouthHalfWidth * 1.3),
    y0: Math.round(g.mouthY - 15),
    x1: Math.round(g.mouthX + g.mouthHalfWidth * 1.3),
    y1: Math.round(g.mouthY + 45),
  };
}

describe.each([
  ['rt', 'demo-rt'],
  ['rt_head', 'demo-rt-head'],
] as Array<[ModelType, string]>)('%s renderer on %s', (model, id) => {
  it('the mouth follows the pose; for rt the rest of the frame stays', async () => {
    const source = await avatar(id);
    const renderer = createRenderer(model);
    await renderer.prepare(source);
    const at = (open: number) =>
      renderer.render(
        request(100, { mouth: { open, wide: 0, round: 0 }, prosody: { fast: 0, slow: 0 }, speaking: true }),
      );
    const closed = at(0);
    const half = at(0.5);
    const open = at(1);
    await dumpPng(open, `render-${model}-open.png`);
    expect([closed.width, closed.height, closed.data.length]).toEqual([512, 512, (512 * 512 * 3) / 2]);
    const box = mouthBox(source);
    const change = lumaDiff(closed, open, box);
    expect(change.inside).toBeGreaterThan(8);
    expect(lumaDiff(closed, half, box).inside).toBeLessThan(change.inside);
    expect(change.outside).toBeLessThan(0.05);
  });

  it('idle frames breathe and blink over time, deterministic per frameIdx', async () => {
    const source = await avatar(id);
    const renderer = createRenderer(model);
    await renderer.prepare(source);
    const frames = Array.from({ length: 250 }, (_, i) =>
      renderer.render(request(i, { prosody: { fast: 0, slow: 0 } })),
    );
    const everything = { x0: 0, y0: 0, x1: 0, y1: 0 };
    const changes = frames.slice(1).filter((frame, i) => lumaDiff(frame, frames[i], everything).outside > 0.001).length;
    expect(changes).toBeGreaterThan(10);
    const again = createRenderer(model);
    await again.prepare(source);
    expect(
      Buffer.compare(
        Buffer.from(again.render(request(137, { prosody: { fast: 0, slow: 0 } })).data),
        Buffer.from(frames[137].data),
      ),
    ).toBe(0);
  });
});

describe('rt_head head motion', () => {
  it('speech prosody moves the head more than silence', async () => {
    const source = await avatar('demo-rt-head');
    const renderer = createRenderer('rt_head');
    await renderer.prepare(source);
    const silent = renderFramesInline(
      renderer,
      Array.from({ length: 50 }, (_, i) => request(i)),
    );
    // Syllable-like bursts: loud every 5th frame.
    const talking = renderFramesInline(
      renderer,
      Array.from({ length: 50 }, (_, i) => request(i, { level: i % 5 < 2 ? 0.9 : 0.1, speaking: true })),
    );
    const forehead = { x0: 200, y0: 110, x1: 312, y1: 150 };
    const motion = (frames: typeof silent) =>
      frames.slice(1).reduce((sum, frame, i) => sum + lumaDiff(frame, frames[i], forehead).inside, 0);
    expect(motion(talking)).toBeGreaterThan(2 * motion(silent));
  });
});
