import path from 'node:path';
import fs from 'node:fs/promises';
import sharp from 'sharp';
import { afterAll, describe, expect, it } from 'vitest';
import { createRenderer } from '../actors/render/renderers/index.ts';
import { RenderPool } from '../actors/render/pool.ts';
import { decodeTimecode } from '../actors/render/timecode.ts';
import { i420ToRgba, rgbaToI420 } from '../actors/render/i420.ts';
import type { AvatarManifest, AvatarSource, FrameRequest, I420Frame, ModelType } from '../actors/render/types.ts';
import { REPO_AVATARS } from './helpers/app.ts';

async function avatar(id: string): Promise<AvatarSource> {
  const dir = path.join(REPO_AVATARS, id);
  const manifest: AvatarManifest = JSON.parse(await fs.readFile(path.join(dir, 'manifest.json'), 'utf8'));
  return { id, dir, manifest };
}

const request = (frameIdx: number, open: number, extra: Partial<FrameRequest> = {}): FrameRequest => ({
  frameIdx,
  ptsMs: frameIdx * 40,
  mouth: { open, wide: 0, round: 0 },
  level: open,
  speaking: open > 0,
  ...extra,
});

/** Mean absolute luma difference inside a box. */
function diff(a: I420Frame, b: I420Frame, box: { x: number; y: number; w: number; h: number }): number {
  let sum = 0;
  for (let y = box.y; y < box.y + box.h; y++) for (let x = box.x; x < box.x + box.w; x++) sum += Math.abs(a.data[y * a.width + x] - b.data[y * b.width + x]);
  return sum / (box.w * box.h);
}

describe('renderers', () => {
  it.each([
    ['rt', 'demo-rt', { x: 190, y: 320, w: 132, h: 70 }],
    ['rt_head', 'demo-rt-head', { x: 170, y: 300, w: 172, h: 110 }],
    ['lipsync', 'astronaut', { x: 200, y: 138, w: 44, h: 24 }],
  ] as Array<[ModelType, string, { x: number; y: number; w: number; h: number }]>)('%s: the mouth region follows the pose, the rest of the face stays', async (model, id, mouthBox) => {
    const source = await avatar(id);
    const renderer = createRenderer(model);
    await renderer.prepare(source);
    // Same frame index, so blinks and breathing are identical and only the mouth differs.
    const closed = renderer.render(request(100, 0));
    const open = renderer.render(request(100, 1));
    const half = renderer.render(request(100, 0.5));
    expect(closed.width).toBe(source.manifest.width);
    expect(closed.data.length).toBe((source.manifest.width * source.manifest.height * 3) / 2);
    const mouthChange = diff(closed, open, mouthBox);
    expect(mouthChange).toBeGreaterThan(8);
    expect(diff(closed, half, mouthBox)).toBeLessThan(mouthChange);
    if (model !== 'rt_head') {
      // Far from the mouth (the forehead/hair) nothing moves.
      expect(diff(closed, open, { x: 200, y: 40, w: 100, h: 40 })).toBeLessThan(0.5);
    }
  });

  it.each([
    ['rt', 'demo-rt'],
    ['lipsync', 'astronaut'],
  ] as Array<[ModelType, string]>)('%s: idle frames change over time (blinks, breathing) and are deterministic', async (model, id) => {
    const source = await avatar(id);
    const renderer = createRenderer(model);
    await renderer.prepare(source);
    const frames = Array.from({ length: 250 }, (_, i) => renderer.render(request(i, 0)));
    const full = { x: 0, y: 0, w: source.manifest.width, h: source.manifest.height };
    const changes = frames.slice(1).filter((f, i) => diff(f, frames[i], full) > 0.01).length;
    expect(changes).toBeGreaterThan(3);
    const again = createRenderer(model);
    await again.prepare(source);
    expect(diff(again.render(request(137, 0)), frames[137], full)).toBe(0);
  });

  it('mock: frame index and pts survive lossy compression in the pixel timecode, for any avatar', async () => {
    for (const id of ['astronaut', 'demo-rt']) {
      const source = await avatar(id);
      const renderer = createRenderer('mock');
      await renderer.prepare(source);
      for (const [idx, pts] of [[0, 0], [1234, 49_360], [999_999, 3_600_000]]) {
        const frame = renderer.render({ frameIdx: idx, ptsMs: pts, mouth: { open: 0, wide: 0, round: 0 }, level: 0.7, speaking: true });
        const { width, height } = frame;
        const jpeg = await sharp(Buffer.from(i420ToRgba(frame)), { raw: { width, height, channels: 4 } }).jpeg({ quality: 40 }).toBuffer();
        const { data } = await sharp(jpeg).ensureAlpha().raw().toBuffer({ resolveWithObject: true });
        const lossy = rgbaToI420(new Uint8Array(data), width, height);
        expect(decodeTimecode(lossy)).toEqual({ frameIdx: idx, ptsMs: Math.round(pts / 10) * 10 });
      }
    }
  });

  it('lipsync without animation serves the still image', async () => {
    const source = await avatar('astronaut');
    const still = { ...source, manifest: { ...source.manifest, metadata: {} } };
    const renderer = createRenderer('lipsync');
    await renderer.prepare(still);
    const a = renderer.render(request(10, 0));
    const b = renderer.render(request(11, 1));
    expect(diff(a, b, { x: 0, y: 0, w: 512, h: 512 })).toBe(0);
  });

  it('lipsync_b and lipsync_c have no renderer in this release', () => {
    expect(() => createRenderer('lipsync_b')).toThrow(/no renderer/);
    expect(() => createRenderer('lipsync_c')).toThrow(/no renderer/);
  });
});

describe('render pool', () => {
  const pool = new RenderPool({ threads: 2 });
  afterAll(() => pool.close());

  it('renders batches in workers, identical to inline rendering, and closes idempotently', async () => {
    const source = await avatar('demo-rt');
    const handle = await pool.open(source, 'rt');
    expect([handle.width, handle.height, handle.fps]).toEqual([512, 512, 25]);
    const requests = Array.from({ length: 6 }, (_, i) => request(i, (i % 3) / 2));
    const frames = await handle.render(requests);
    expect(frames).toHaveLength(6);
    const inline = createRenderer('rt');
    await inline.prepare(source);
    for (let i = 0; i < 6; i++) expect(Buffer.compare(Buffer.from(frames[i].data), Buffer.from(inline.render(requests[i]).data))).toBe(0);
    handle.close();
    await expect(handle.render(requests)).rejects.toThrow(/closed/);
  });

  it('fails fast on a bundle it cannot prepare', async () => {
    const source = await avatar('demo-rt');
    await expect(pool.open({ ...source, dir: '/nonexistent' }, 'mock')).rejects.toThrow();
  });
});
