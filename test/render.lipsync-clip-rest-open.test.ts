/**
 * A video avatar whose lips rest parted (some people breathe through the mouth while listening): speech must
 * never show a mouth narrower than the idle loop's own. Read as a viewer would, with the face detector's inner lips
 * on rendered frames. The clip is made here: the astronaut photo rendered with parted lips, then made into a loop.
 */
import { rmSync } from 'node:fs';
import sharp from 'sharp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { closeFaceDetector, detectMouth } from '../actors/faces/detector.ts';
import { innerLipGap } from '../actors/render/harvested-mouths.ts';
import { i420ToRgba } from '../actors/render/i420.ts';
import { WarpRenderer, OPEN_STEPS } from '../actors/render/renderers/warp.ts';
import type { AvatarSource, I420Frame, MouthAnimation } from '../actors/render/types.ts';
import { makeClipBundle } from './helpers/clip-bundle.ts';
import { makePortraitBundle, request } from './render.fixtures.ts';

/** The detector's own frame-to-frame jitter on the inner lips is ~0.01–0.03 mouth widths. */
const DETECTOR_JITTER = 0.03;
/** How open the made clip's lips rest (warp `open`): an inner-lip gap near 0.2 mouth widths, as on a real clip. */
const PARTED_REST = 0.4;

const speaking = (open: number) => request(0, { mouth: { open, wide: 0, round: 0 }, level: open, speaking: true });

async function faceOf(frame: I420Frame): Promise<MouthAnimation> {
  const rgba = i420ToRgba({ width: frame.width, height: frame.height, data: frame.data });
  const result = await detectMouth({ rgba, width: frame.width, height: frame.height });
  if (!result.ok) throw new Error(`no face on a rendered frame (${result.reason})`);
  return result.animation;
}

const openingOf = (face: MouthAnimation) => innerLipGap(face) / face.mouth_width;

describe('lipsync renderer on a clip whose lips rest parted', () => {
  let clip: { source: AvatarSource; dir: string };
  let restOpening: number;
  beforeAll(async () => {
    // The clip's picture: the photo's own renderer opening its mouth, found again by the detector as clip creation does.
    const photo = makePortraitBundle();
    try {
      const renderer = new WarpRenderer();
      await renderer.prepare(photo.source);
      const parted = renderer.render(speaking(PARTED_REST));
      const png = await sharp(i420ToRgba({ width: parted.width, height: parted.height, data: parted.data }), {
        raw: { width: parted.width, height: parted.height, channels: 4 },
      })
        .png()
        .toBuffer();
      const face = await faceOf(parted);
      restOpening = openingOf(face);
      clip = await makeClipBundle({ portrait: png, animation: face });
    } finally {
      photo.cleanup();
    }
  }, 60_000);
  afterAll(async () => {
    if (clip) rmSync(clip.dir, { recursive: true, force: true });
    await closeFaceDetector();
  });

  it('every opening step shows the lips at least as far apart as the idle loop, and the widest clearly wider', async () => {
    // The premise: the loop's lips rest visibly parted (the closed-lips detector reading is ~0.05).
    expect(restOpening).toBeGreaterThan(0.12);
    const renderer = new WarpRenderer();
    await renderer.prepare(clip.source);
    const idle = openingOf(await faceOf(renderer.render(request(0))));
    const steps: number[] = [];
    for (let step = 1; step < OPEN_STEPS; step++) {
      const frame = renderer.render(speaking(step / (OPEN_STEPS - 1)));
      steps.push(openingOf(await faceOf(frame)));
    }
    console.log(
      `rest ${restOpening.toFixed(3)}, idle ${idle.toFixed(3)}, steps ${steps.map((s) => s.toFixed(3)).join(' ')}`,
    );
    for (const opening of steps) expect(opening).toBeGreaterThan(idle - DETECTOR_JITTER);
    expect(steps.at(-1)!).toBeGreaterThan(idle + 0.1);
  }, 60_000);
});
