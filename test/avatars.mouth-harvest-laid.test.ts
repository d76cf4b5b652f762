/**
 * A video avatar's harvested mouths are keyed by the opening each one shows once laid on the avatar's reference
 * frame (`laidOpeningsOn`, read by the real face detector), not by the landmarks found on the clip frame it was cut
 * from: on a real talking clip those misread teeth and pouts (a rounded mouth keyed 0.21 open read 0.04 once laid,
 * and was laid for every rounded vowel). The clip's own rest gap still says when a loop frame's lips are parted.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { closeFaceDetector, detectMouth } from '../actors/faces/detector.ts';
import { laidOpeningsOn, MouthHarvest, type LaidOpenings } from '../actors/faces/mouth-harvest.ts';
import { i420ToRgba } from '../actors/render/i420.ts';
import { WarpRenderer } from '../actors/render/renderers/warp.ts';
import type { MouthAnimation, Point } from '../actors/render/types.ts';
import { ASTRONAUT_ANIMATION, makePortraitBundle, request } from './render.fixtures.ts';

/** The openings the "clip" shows (the photo renderer's warp: a dark mouth the detector reads well). */
const OPENINGS = [0, 0.2, 0.4, 0.6, 0.8, 1];
const { x: CX, y: CY } = ASTRONAUT_ANIMATION.mouth_center;
const MW = ASTRONAUT_ANIMATION.mouth_width;
/** The fixture's own resting inner-lip gap (mouth widths). */
const REST_GAP = 0.114;

/** iBUG inner lip parted by `gap` mouth widths: what the clip frame's landmarks claimed. */
function innerLip(gap: number): Point[] {
  const half = (gap * MW) / 2;
  return [
    { x: CX - 16, y: CY },
    { x: CX - 8, y: CY - half },
    { x: CX, y: CY - half },
    { x: CX + 8, y: CY - half },
    { x: CX + 16, y: CY },
    { x: CX + 8, y: CY + half },
    { x: CX, y: CY + half },
    { x: CX - 8, y: CY + half },
  ];
}

describe('harvested mouths keyed by how they read once laid on the reference frame', () => {
  let frames: Uint8Array[];
  let reference: Uint8Array;
  let cleanup: () => void;

  /** A harvest of the frames whose clip landmarks claim the opposite opening (the widest mouth "closed"). */
  const misreadHarvest = () => {
    const harvest = new MouthHarvest();
    frames.forEach((rgba, index) => {
      const claimed: MouthAnimation = {
        ...ASTRONAUT_ANIMATION,
        inner_lip: innerLip(REST_GAP + (1 - OPENINGS[index]) * 0.4),
      };
      harvest.add(rgba, 512, 512, claimed, index);
    });
    return harvest;
  };
  /** Each sample's key by the clip frame it was cut from (frames in order of their true opening). */
  const keysByFrame = (files: Awaited<ReturnType<MouthHarvest['finish']>>) =>
    OPENINGS.map((_, frame) => files!.index.samples.find((sample) => sample.frame === frame)?.open);

  beforeAll(async () => {
    const photo = makePortraitBundle();
    cleanup = photo.cleanup;
    const renderer = new WarpRenderer();
    await renderer.prepare(photo.source);
    reference = i420ToRgba(renderer.render(request(0)));
    frames = OPENINGS.map((open) =>
      i420ToRgba(renderer.render(request(0, { mouth: { open, wide: 0, round: 0 }, speaking: true }))),
    );
  });
  afterAll(async () => {
    cleanup?.();
    await closeFaceDetector();
  });

  it("without the laid reading, the clip's landmarks key the samples (here reversed: the test's premise)", async () => {
    const keys = keysByFrame(await misreadHarvest().finish());
    expect(keys[0]).toBe(1);
    expect(keys.at(-1)).toBe(0);
  });

  it('read once laid by the real detector, the keys rise with the opening each sample shows, closed to wide open', async () => {
    const laid = laidOpeningsOn({ rgba: reference, width: 512, height: 512, face: ASTRONAUT_ANIMATION }, detectMouth);
    const files = await misreadHarvest().finish(laid);
    const keys = keysByFrame(files);
    console.log(`keys by true opening ${OPENINGS.join(' ')}: ${keys.map((k) => k?.toFixed(2)).join(' ')}`);
    // Laid through the lip-contour mask (issue 44), one middle sample can read into its neighbour's opening step,
    // where only the nearer of the two is kept: at most one of the six goes unkeyed (known loss, docs/avatars.md).
    const keyed = keys.filter((k): k is number => k !== undefined);
    expect(keyed.length).toBeGreaterThanOrEqual(keys.length - 1);
    expect(keys[0]).toBeLessThan(0.1);
    expect(keys.at(-1)).toBe(1);
    for (let i = 1; i < keyed.length; i++) expect(keyed[i]).toBeGreaterThanOrEqual(keyed[i - 1]);
    // The rest gap stays the clip's own (what a loop frame's tracked lips measure at rest).
    expect(files!.index.rest_gap).toBeCloseTo(REST_GAP, 2);
  }, 60_000);

  it("falls back to the clip's landmarks when the laid frames are not read, or do not spread as speech does", async () => {
    const unread: LaidOpenings = async (cells) => cells.map(() => null);
    const flat: LaidOpenings = async (cells) => cells.map((_, i) => 0.1 + (i % 2) * 0.01);
    for (const laid of [unread, flat]) {
      const keys = keysByFrame(await misreadHarvest().finish(laid));
      expect(keys[0]).toBe(1);
      expect(keys.at(-1)).toBe(0);
    }
  });
});
