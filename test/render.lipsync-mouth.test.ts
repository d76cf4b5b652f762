/**
 * The default photo avatar (`avatars/astronaut`, model `lipsync`) speaking: viseme poses rendered by the real
 * renderer and measured on the frames (dark inside of the mouth, upper teeth, chin drop; see
 * `test/helpers/mouth-metrics.ts`). `npx tsx tools/viseme-contact-sheet.ts` draws the same frames.
 */
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WarpRenderer } from '../actors/render/renderers/warp.ts';
import { rgbaToI420 } from '../actors/render/i420.ts';
import { loadBundleFrame } from '../actors/render/image.ts';
import type { AvatarManifest, AvatarSource, I420Frame, MouthAnimation, MouthPose } from '../actors/render/types.ts';
import { VISEME_POSES, type Viseme } from '../actors/mouth/visemes.ts';
import { jawDropPx, measureMouth, rowsIdentical } from './helpers/mouth-metrics.ts';
import { ASTRONAUT_ANIMATION, makePortraitBundle } from './render.fixtures.ts';

const ASTRONAUT_DIR = path.resolve(import.meta.dirname, '..', 'avatars', 'astronaut');
const manifest = JSON.parse(fs.readFileSync(path.join(ASTRONAUT_DIR, 'manifest.json'), 'utf8')) as AvatarManifest;
const astronaut: AvatarSource = { id: manifest.id, dir: ASTRONAUT_DIR, manifest };
const animation = manifest.metadata.animation as MouthAnimation;
const mw = animation.mouth_width;

/** Frame 0 has no blink; `speaking` keeps the idle sway out of the picture. */
const renderPose = (renderer: WarpRenderer, mouth: MouthPose): I420Frame =>
  renderer.render({ frameIdx: 0, ptsMs: 0, mouth, level: 0.5, speaking: true });

describe('photo avatar mouth (astronaut, lipsync)', () => {
  const renderer = new WarpRenderer();
  const frames = new Map<Viseme, I420Frame>();
  let photo: I420Frame;

  beforeAll(async () => {
    await renderer.prepare(astronaut);
    for (const viseme of ['sil', 'PP', 'aa', 'O', 'E'] as const)
      frames.set(viseme, renderPose(renderer, VISEME_POSES[viseme]));
    const rgba = await loadBundleFrame(astronaut);
    photo = rgbaToI420(rgba.data, rgba.width, rgba.height);
  });

  it('"aa" opens wide: dark inside ≥ 0.18 mouth width², upper teeth across ≥ 0.3 mouth width, chin down ≥ 0.25 mouth width', () => {
    const aa = measureMouth(frames.get('aa')!, animation);
    expect(aa.darkArea).toBeGreaterThanOrEqual(0.18);
    expect(aa.darkHeight).toBeGreaterThanOrEqual(0.2 * mw);
    expect(aa.teethWidth).toBeGreaterThanOrEqual(0.3 * mw);
    expect(jawDropPx(frames.get('sil')!, frames.get('aa')!, animation)).toBeGreaterThanOrEqual(0.25 * mw);
  });

  it('silence and m/b/p close the lips completely, although the photo smiles with its teeth showing', () => {
    expect(measureMouth(photo, animation).darkArea).toBeGreaterThan(0);
    for (const viseme of ['sil', 'PP'] as const) {
      const closed = measureMouth(frames.get(viseme)!, animation);
      expect(closed.darkArea, viseme).toBe(0);
      expect(closed.teethWidth, viseme).toBe(0);
    }
  });

  it('"O" is a rounded opening narrower than "aa"; "E" is wider than tall', () => {
    const aa = measureMouth(frames.get('aa')!, animation);
    const o = measureMouth(frames.get('O')!, animation);
    const e = measureMouth(frames.get('E')!, animation);
    expect(o.darkArea).toBeGreaterThan(0.08);
    expect(o.darkWidth).toBeLessThan(0.75 * aa.darkWidth);
    expect(o.darkWidth / o.darkHeight).toBeLessThan(aa.darkWidth / aa.darkHeight);
    expect(e.darkArea).toBeGreaterThan(0.06);
    expect(e.darkWidth).toBeGreaterThan(3 * e.darkHeight);
  });

  it('leaves the upper face (eyes and above) exactly as in the photo for every pose', () => {
    const belowEyes = Math.ceil(Math.max(animation.left_eye.y, animation.right_eye.y) + 0.15 * mw);
    for (const [viseme, frame] of frames) expect(rowsIdentical(frame, photo, belowEyes), viseme).toBe(true);
  });
});

describe('photo avatar mouth without inner-lip landmarks', () => {
  const bundle = makePortraitBundle({ animation: { ...ASTRONAUT_ANIMATION, inner_lip: [] } });
  afterAll(() => bundle.cleanup());

  it('rests on the unchanged photo and still opens along the mouth centre line', async () => {
    const renderer = new WarpRenderer();
    await renderer.prepare(bundle.source);
    const rgba = await loadBundleFrame(bundle.source);
    const photo = rgbaToI420(rgba.data, rgba.width, rgba.height);
    const rest = renderPose(renderer, VISEME_POSES.sil);
    expect(Buffer.compare(Buffer.from(rest.data), Buffer.from(photo.data))).toBe(0);
    const open = measureMouth(renderPose(renderer, VISEME_POSES.aa), ASTRONAUT_ANIMATION);
    expect(open.darkArea).toBeGreaterThanOrEqual(0.18);
  });
});
