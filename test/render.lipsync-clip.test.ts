import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import sharp from 'sharp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LipsyncRenderer } from '../actors/render/renderers/lipsync.ts';
import { loopFrameIndex, readClipSource } from '../actors/render/clip-loop.ts';
import { transformAnimation } from '../actors/faces/landmarks.ts';
import type { AvatarManifest, AvatarSource, ClipMetadata } from '../actors/render/types.ts';
import { ASTRONAUT_ANIMATION, PORTRAIT, lumaDiff, request } from './render.fixtures.ts';

/** A synthetic video avatar: the portrait moved 1 px right per frame, its face track moved with it. */
const FRAMES = 12;
const speaking = (frameIdx: number, open: number) => request(frameIdx, { mouth: { open, wide: 0, round: 0 }, level: open, speaking: true });

async function makeClipBundle(): Promise<{ source: AvatarSource; dir: string }> {
  const dir = mkdtempSync(join(tmpdir(), 'render-test-clip-'));
  mkdirSync(join(dir, 'frames'));
  const track = [];
  for (let i = 0; i < FRAMES; i++) {
    const png = await sharp(PORTRAIT).extend({ left: i, right: 0, top: 0, bottom: 0, extendWith: 'copy' }).extract({ left: 0, top: 0, width: 512, height: 512 }).png().toBuffer();
    writeFileSync(join(dir, 'frames', `frame_${String(i).padStart(5, '0')}.png`), png);
    track.push(transformAnimation(ASTRONAUT_ANIMATION, -i, 0, 1));
  }
  writeFileSync(join(dir, 'face_track.json'), JSON.stringify(track));
  const clip: ClipMetadata = {
    frame_count: FRAMES,
    fps: 25,
    loop: 'ping-pong',
    track_file: 'face_track.json',
    face_found_fraction: 1,
    source: { duration_s: 2, width: 512, height: 512, rotation: 0, codec: 'h264', has_audio: false },
  };
  const manifest: AvatarManifest = {
    id: 'test-clip',
    name: 'Test clip',
    model_type: 'lipsync',
    fps: 25,
    sample_rate: 16000,
    width: 512,
    height: 512,
    version: '1.0.0',
    metadata: { animation: track[0], clip },
  };
  writeFileSync(join(dir, 'manifest.json'), JSON.stringify(manifest));
  return { source: { id: manifest.id, dir, manifest, clip: await readClipSource(dir, manifest) }, dir };
}

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
    const renderer = new LipsyncRenderer();
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
    const renderer = new LipsyncRenderer();
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
