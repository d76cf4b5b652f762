import fs from 'node:fs/promises';
import path from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { faceGeometry, faceParams, type FaceGeometry } from '../actors/render/drawn-face.ts';
import { blinkStepAt } from '../actors/render/renderers/drawn.ts';
import { createRenderer } from '../actors/render/renderers/index.ts';
import type { AvatarManifest, I420Frame, Renderer } from '../actors/render/types.ts';
import { request } from './render.fixtures.ts';

/** 10 s of idle at 25 fps: two breaths, the idle sway's periods, and blinks. */
const IDLE_FRAMES = 250;

/** Luma differences outside the eye band: what moved besides the eyelids. */
function changedOutsideEyes(a: I420Frame, b: I420Frame, g: FaceGeometry): number {
  let changed = 0;
  const eyeTop = g.eyeY - g.eyeRadiusY * 2,
    eyeBottom = g.eyeY + g.eyeRadiusY * 2;
  for (let y = 0; y < a.height; y++) {
    if (y >= eyeTop && y <= eyeBottom) continue;
    for (let x = 0; x < a.width; x++) if (Math.abs(a.data[y * a.width + x] - b.data[y * a.width + x]) > 2) changed++;
  }
  return changed;
}

describe('the motion setting on rt_head', () => {
  let renderer: Renderer;
  let geometry: FaceGeometry;
  beforeAll(async () => {
    const dir = path.join(import.meta.dirname, '..', 'avatars', 'demo-rt');
    const manifest: AvatarManifest = {
      ...JSON.parse(await fs.readFile(path.join(dir, 'manifest.json'), 'utf8')),
      model_type: 'rt_head',
    };
    renderer = createRenderer('rt_head');
    await renderer.prepare({ id: 'demo-rt', dir, manifest });
    geometry = faceGeometry(faceParams(manifest), manifest.width, manifest.height);
  });

  it('motion 0: 10 s of idle move nothing but the eyelids (0 px of sway, breathing or nods); blinks remain', () => {
    const first = renderer.render(request(0, { motion: 0 }));
    let blinkFrames = 0;
    for (let i = 1; i < IDLE_FRAMES; i++) {
      const frame = renderer.render(request(i, { motion: 0 }));
      expect(changedOutsideEyes(first, frame, geometry)).toBe(0);
      if (blinkStepAt(i, 25) > 0) {
        blinkFrames++;
        expect(Buffer.compare(Buffer.from(frame.data), Buffer.from(first.data))).not.toBe(0);
      } else expect(Buffer.compare(Buffer.from(frame.data), Buffer.from(first.data))).toBe(0);
    }
    expect(blinkFrames).toBeGreaterThan(0);
  });

  it('motion 0 while speaking: the head stays put, the mouth still moves', () => {
    const quiet = renderer.render(request(40, { motion: 0 }));
    const speaking = renderer.render(
      request(40, {
        motion: 0,
        speaking: true,
        level: 0.6,
        mouth: { open: 0.7, wide: 0.2, round: 0 },
        prosody: { fast: 0.9, slow: 0.3 },
      }),
    );
    let changedAboveMouth = 0;
    const mouthTop = geometry.mouthY - geometry.mouthHalfWidth;
    for (let y = 0; y < mouthTop; y++)
      for (let x = 0; x < quiet.width; x++)
        if (quiet.data[y * quiet.width + x] !== speaking.data[y * quiet.width + x]) changedAboveMouth++;
    expect(changedAboveMouth).toBe(0);
    expect(Buffer.compare(Buffer.from(quiet.data), Buffer.from(speaking.data))).not.toBe(0);
  });

  it('the default motion (1) sways and breathes: idle frames differ outside the eyes', () => {
    const first = renderer.render(request(0));
    const later = [25, 50, 75].map((i) => changedOutsideEyes(first, renderer.render(request(i)), geometry));
    expect(Math.max(...later)).toBeGreaterThan(500);
  });
});
