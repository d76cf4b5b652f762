/**
 * The photo avatar's face beyond its mouth shapes (issue 44, point 3): a portrait that smiles with its teeth rests
 * with closed lips (one set of teeth ever shows: the painted one, while it speaks), and the head moves a little while
 * speaking, as `rt_head`'s does — present, bounded, and never touching the picture outside the head.
 *
 * The teeth-showing portrait is the project's own: the astronaut rendered in a broad smile with parted lips (upper
 * teeth painted between them), landmarks found on it by the service's face detector, made a photo avatar of its own.
 */
import fs from 'node:fs';
import { mkdtemp, rm, writeFile, mkdir } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import sharp from 'sharp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { closeFaceDetector, detectMouth } from '../actors/faces/detector.ts';
import { i420ToRgba, rgbaToI420 } from '../actors/render/i420.ts';
import { loadBundleFrame } from '../actors/render/image.ts';
import { WarpRenderer } from '../actors/render/renderers/warp.ts';
import type {
  AvatarManifest,
  AvatarSource,
  FrameRequest,
  I420Frame,
  MouthAnimation,
  MouthPose,
} from '../actors/render/types.ts';
import { VISEME_POSES } from '../actors/mouth/visemes.ts';
import { isTeethBright, teethRows } from './helpers/artefacts.ts';
import { measureMouth } from './helpers/mouth-metrics.ts';

const ASTRONAUT_DIR = path.resolve(import.meta.dirname, '..', 'avatars', 'astronaut');
const manifest = JSON.parse(fs.readFileSync(path.join(ASTRONAUT_DIR, 'manifest.json'), 'utf8')) as AvatarManifest;
const astronaut: AvatarSource = { id: manifest.id, dir: ASTRONAUT_DIR, manifest };
const animation = manifest.metadata.animation as MouthAnimation;
/** Detection, preparation and a few hundred frames on two loaded cores. */
const TIMEOUT_MS = 120_000;

/** A broad smile with the upper teeth showing between parted lips. */
const SMILE: MouthPose = { open: 0.3, wide: 1, round: 0 };

const speaking = (frameIdx: number, mouth: MouthPose, prosody = { fast: 0, slow: 0 }): FrameRequest => ({
  frameIdx,
  ptsMs: frameIdx * 40,
  mouth,
  level: prosody.fast,
  speaking: true,
  prosody,
});

/** Teeth-bright pixels between the outer lip contour's top and bottom, within the mouth's width. */
function teethBetweenLips(frame: I420Frame, lips: MouthAnimation): number {
  const outer = lips.outer_lip ?? [];
  const x0 = Math.round(Math.min(...outer.map((p) => p.x)));
  const x1 = Math.round(Math.max(...outer.map((p) => p.x)));
  const y0 = Math.round(Math.min(...outer.map((p) => p.y)));
  const y1 = Math.round(Math.max(...outer.map((p) => p.y)));
  let count = 0;
  for (let y = y0; y <= y1; y++) for (let x = x0; x <= x1; x++) if (isTeethBright(frame, x, y)) count++;
  return count;
}

/** The integer shift (px) of `frame`'s box that best matches `photo` (least mean absolute luma difference). */
function bestShift(
  frame: I420Frame,
  photo: I420Frame,
  box: { x0: number; y0: number; x1: number; y1: number },
  reach: number,
): { dx: number; dy: number } {
  let best = { dx: 0, dy: 0 };
  let bestError = Infinity;
  for (let dy = -reach; dy <= reach; dy++) {
    for (let dx = -reach; dx <= reach; dx++) {
      let error = 0;
      for (let y = box.y0; y < box.y1; y++)
        for (let x = box.x0; x < box.x1; x++)
          error += Math.abs(frame.data[(y + dy) * frame.width + x + dx] - photo.data[y * photo.width + x]);
      if (error < bestError) {
        bestError = error;
        best = { dx, dy };
      }
    }
  }
  return best;
}

describe('a portrait smiling with its teeth (the astronaut rendered smiling), as a photo avatar of its own', () => {
  let dir: string;
  let smiling: AvatarSource;
  let lips: MouthAnimation;

  beforeAll(async () => {
    const painter = new WarpRenderer();
    await painter.prepare(astronaut);
    const ah = painter.render(speaking(0, SMILE));
    const rgba = i420ToRgba(ah);
    const found = await detectMouth({ rgba, width: ah.width, height: ah.height });
    if (!found.ok) throw new Error(`no face on the rendered astronaut: ${found.reason}`);
    lips = found.animation;
    dir = await mkdtemp(path.join(tmpdir(), 'smiling-portrait-'));
    await mkdir(path.join(dir, 'frames'));
    await sharp(Buffer.from(rgba), { raw: { width: ah.width, height: ah.height, channels: 4 } })
      .png()
      .toFile(path.join(dir, 'frames', 'frame_00000.png'));
    const smilingManifest: AvatarManifest = { ...manifest, id: 'smiling-astronaut', metadata: { animation: lips } };
    await writeFile(path.join(dir, 'manifest.json'), JSON.stringify(smilingManifest));
    smiling = { id: smilingManifest.id, dir, manifest: smilingManifest };
  }, TIMEOUT_MS);

  afterAll(async () => {
    await closeFaceDetector();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it(
    'rests with closed lips and none of its own teeth; speaking, it shows one row of teeth (its own never ride down)',
    async () => {
      const rgba = await loadBundleFrame(smiling);
      const photo = rgbaToI420(rgba.data, rgba.width, rgba.height);
      // The source really shows teeth between its lips.
      expect(teethBetweenLips(photo, lips)).toBeGreaterThan(40);
      const renderer = new WarpRenderer();
      await renderer.prepare(smiling);
      for (const viseme of ['sil', 'PP'] as const) {
        const rest = renderer.render(speaking(0, VISEME_POSES[viseme]));
        expect(teethBetweenLips(rest, lips), viseme).toBe(0);
        expect(measureMouth(rest, lips).darkArea, viseme).toBe(0);
      }
      for (const viseme of ['DD', 'E', 'aa', 'O'] as const) {
        const frame = renderer.render(speaking(0, VISEME_POSES[viseme]));
        expect(teethRows(frame, lips), viseme).toBeLessThanOrEqual(1);
      }
    },
    TIMEOUT_MS,
  );
});

describe('head motion of a photo avatar', () => {
  const renderer = new WarpRenderer();
  let photo: I420Frame;
  const { left_eye, right_eye, face_box } = animation;
  const eyes = {
    x0: Math.round(left_eye.x - 12),
    y0: Math.round(Math.min(left_eye.y, right_eye.y) - 8),
    x1: Math.round(right_eye.x + 12),
    y1: Math.round(Math.max(left_eye.y, right_eye.y) + 8),
  };
  /** Speech at a lively phrase loudness with syllable accents: what the media timeline's prosody gives. */
  const prosodyAt = (i: number) => ({ fast: 0.45 + 0.35 * Math.max(0, Math.sin(i / 2.3)), slow: 0.45 });
  /** Frames before the first blink (2 s in at the earliest), whose eyes the shift is measured on are open. */
  const FRAMES = Array.from({ length: 15 }, (_, i) => 2 + i * 3);

  beforeAll(async () => {
    await renderer.prepare(astronaut);
    const rgba = await loadBundleFrame(astronaut);
    photo = rgbaToI420(rgba.data, rgba.width, rgba.height);
  });

  it('moves the head while speaking, a few pixels at most, more than in silence', () => {
    const speechShifts = FRAMES.map((i) =>
      bestShift(renderer.render(speaking(i, VISEME_POSES.E, prosodyAt(i))), photo, eyes, 6),
    );
    const idleShifts = FRAMES.map((i) =>
      bestShift(
        renderer.render({ frameIdx: i, ptsMs: i * 40, mouth: VISEME_POSES.sil, level: 0, speaking: false }),
        photo,
        eyes,
        6,
      ),
    );
    const extent = (shifts: Array<{ dx: number; dy: number }>) =>
      Math.max(...shifts.map((s) => Math.hypot(s.dx, s.dy)));
    const moved = (shifts: Array<{ dx: number; dy: number }>) => shifts.filter((s) => s.dx !== 0 || s.dy !== 0).length;
    // Present: most speaking frames show the head moved by at least a pixel, in more than one position.
    expect(moved(speechShifts)).toBeGreaterThan(speechShifts.length / 2);
    expect(new Set(speechShifts.map((s) => `${s.dx},${s.dy}`)).size).toBeGreaterThan(2);
    // Bounded: never more than 5 % of the face's height (5 px on the astronaut); silence moves less.
    for (const shift of speechShifts)
      expect(Math.hypot(shift.dx, shift.dy)).toBeLessThanOrEqual(0.05 * face_box.height);
    expect(extent(idleShifts)).toBeLessThan(extent(speechShifts));
  });

  it('leaves everything outside the head (background, shoulders) exactly as in the photo', () => {
    const centreX = face_box.x + face_box.width / 2;
    const centreY = face_box.y + 0.4 * face_box.height;
    for (const i of FRAMES.slice(0, 8)) {
      // Closed lips: the mouth's own warp (which reaches the collar at a wide "ah") is not what is looked at here.
      const frame = renderer.render(speaking(i, VISEME_POSES.sil, prosodyAt(i)));
      let differing = 0;
      for (let y = 0; y < frame.height; y++) {
        for (let x = 0; x < frame.width; x++) {
          const nx = (x - centreX) / face_box.width;
          const ny = (y - centreY) / face_box.height;
          if (nx * nx + ny * ny <= 1) continue;
          if (frame.data[y * frame.width + x] !== photo.data[y * photo.width + x]) differing++;
        }
      }
      expect(differing, `frame ${i}`).toBe(0);
    }
  });

  it('at rest serves the silent drift from its cache, where speech at zero loudness would have put the head', () => {
    let sum = 0;
    let count = 0;
    let moved = 0;
    for (const i of FRAMES) {
      const resting = renderer.render({
        frameIdx: i,
        ptsMs: i * 40,
        mouth: VISEME_POSES.sil,
        level: 0,
        speaking: false,
      });
      const warped = renderer.render(speaking(i, VISEME_POSES.sil));
      for (let y = face_box.y; y < face_box.y + face_box.height; y++) {
        for (let x = face_box.x; x < face_box.x + face_box.width; x++) {
          const o = Math.round(y) * resting.width + Math.round(x);
          sum += Math.abs(resting.data[o] - warped.data[o]);
          count++;
          if (resting.data[o] !== photo.data[o]) moved++;
        }
      }
    }
    // The same place to within the cache's 0.2 px step: no jump when speech ends; and the head does drift at rest.
    expect(sum / count).toBeLessThan(1.5);
    expect(moved).toBeGreaterThan(0);
  });

  it('moves the same way whatever the mouth does: the same request with closed lips is the frame’s own rest face', () => {
    const i = 17;
    const open = renderer.render(speaking(i, VISEME_POSES.aa, prosodyAt(i)));
    const closed = renderer.render(speaking(i, VISEME_POSES.sil, prosodyAt(i)));
    // The eyes (far from the mouth's warp) are identical in both.
    for (let y = eyes.y0; y < eyes.y1; y++)
      for (let x = eyes.x0; x < eyes.x1; x++)
        expect(open.data[y * open.width + x]).toBe(closed.data[y * closed.width + x]);
  });
});
