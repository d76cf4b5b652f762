import sharp from 'sharp';
import fc from 'fast-check';
import { afterAll, describe, expect, it } from 'vitest';
import { closeFaceDetector, detectMouth } from '../actors/faces/detector.ts';
import {
  faceAnchor,
  faceHint,
  MIN_FACE_SCORE,
  toMouthDetection,
  transformAnimation,
} from '../actors/faces/landmarks.ts';
import type { RawFace } from '../actors/faces/types.ts';

import { PORTRAIT_FIXTURE as FIXTURE } from './helpers/fixtures.ts';
/** Where a person marks the astronaut's mouth in the 512×512 fixture. */
const EXPECTED_MOUTH = { x: 222, y: 145 };
const MOUTH_TOLERANCE_PX = 12;

async function rgbaOf(input: sharp.Sharp) {
  const { data, info } = await input.ensureAlpha().raw().toBuffer({ resolveWithObject: true });
  return { rgba: new Uint8Array(data), width: info.width, height: info.height };
}

/** A synthetic face: 68 landmarks laid out around a box, for the pure failure-rule tests. */
function fakeFace(x: number, y: number, size: number, score: number): RawFace {
  const landmarks = Array.from({ length: 68 }, (_, i) => ({
    x: x + (size * ((i * 7) % 17)) / 17,
    y: y + (size * ((i * 5) % 13)) / 13,
  }));
  return { box: { x, y, width: size, height: size }, score, landmarks };
}

describe('face detection (face-api on tfjs wasm, offline)', () => {
  afterAll(async () => closeFaceDetector());

  it('finds the astronaut mouth within 12 px of where it is, with lips and eyes around it', async () => {
    const image = await rgbaOf(sharp(FIXTURE));
    const started = performance.now();
    const result = await detectMouth(image);
    console.info(`face detection, cold (worker start + wasm + weights): ${Math.round(performance.now() - started)} ms`);
    // The caller's pixels are copied, not transferred: the buffer stays usable.
    expect(image.rgba.byteLength).toBe(512 * 512 * 4);
    expect(result.ok).toBe(true);
    if (!result.ok) return;
    const a = result.animation;
    expect(Math.hypot(a.mouth_center.x - EXPECTED_MOUTH.x, a.mouth_center.y - EXPECTED_MOUTH.y)).toBeLessThan(
      MOUTH_TOLERANCE_PX,
    );
    expect(a.outer_lip).toHaveLength(12);
    expect(a.inner_lip).toHaveLength(8);
    expect(a.left_eye_contour).toHaveLength(6);
    expect(a.right_eye_contour).toHaveLength(6);
    expect(a.mouth_width).toBeGreaterThan(25);
    expect(a.mouth_width).toBeLessThan(70);
    // Eyes above the mouth, image-left eye left of the image-right one, all inside the face box.
    expect(a.left_eye.y).toBeLessThan(a.mouth_center.y - 15);
    expect(a.right_eye.y).toBeLessThan(a.mouth_center.y - 15);
    expect(a.left_eye.x).toBeLessThan(a.right_eye.x);
    for (const p of [a.mouth_center, a.left_eye, a.right_eye]) {
      expect(p.x).toBeGreaterThan(a.face_box.x);
      expect(p.x).toBeLessThan(a.face_box.x + a.face_box.width);
    }
    expect(a.confidence).toBeGreaterThanOrEqual(MIN_FACE_SCORE);
    expect(a.detector).toBe('face-api/ssd_mobilenetv1+landmark68');
  });

  it('a warm detection gives the same answer; a Buffer input works too', async () => {
    const { data, info } = await sharp(FIXTURE).ensureAlpha().raw().toBuffer({ resolveWithObject: true });
    const started = performance.now();
    const result = await detectMouth({ rgba: data, width: info.width, height: info.height });
    const warmMs = performance.now() - started;
    console.info(`face detection, warm: ${Math.round(warmMs)} ms`);
    expect(result.ok).toBe(true);
    if (!result.ok) return;
    expect(
      Math.hypot(
        result.animation.mouth_center.x - EXPECTED_MOUTH.x,
        result.animation.mouth_center.y - EXPECTED_MOUTH.y,
      ),
    ).toBeLessThan(MOUTH_TOLERANCE_PX);
    // Generous: ~0.6 s on the 2-core dev machine; only a detector that reloads its models per call would pass 10 s.
    expect(warmMs).toBeLessThan(10_000);
  });

  it('a pixel buffer of the wrong length is an error result, not a crash', async () => {
    expect(await detectMouth({ rgba: new Uint8Array(10), width: 4, height: 4 })).toMatchObject({
      ok: false,
      reason: 'error',
    });
  });

  it('reports no_face for an image without a face', async () => {
    const noise = Buffer.alloc(320 * 240 * 3);
    for (let i = 0; i < noise.length; i++) noise[i] = (i * 2654435761) >>> 24;
    const image = sharp({ create: { width: 320, height: 240, channels: 3, background: '#7fa0c0' } }).composite([
      { input: noise, raw: { width: 320, height: 240, channels: 3 }, blend: 'soft-light' },
    ]);
    const result = await detectMouth(await rgbaOf(sharp(await image.png().toBuffer())));
    expect(result).toEqual({ ok: false, reason: 'no_face' });
  });

  it('reports multiple_faces for two same-sized portraits side by side', async () => {
    const half = await sharp(FIXTURE).extract({ left: 96, top: 0, width: 256, height: 320 }).toBuffer();
    const twin = sharp({ create: { width: 512, height: 320, channels: 3, background: '#000' } }).composite([
      { input: half, left: 0, top: 0 },
      { input: half, left: 256, top: 0 },
    ]);
    const result = await detectMouth(await rgbaOf(sharp(await twin.png().toBuffer())));
    expect(result).toMatchObject({ ok: false, reason: 'multiple_faces' });
  });

  it('a video frame with the neighbouring face as hint is followed: landmarks refitted in that box, the box moved with them, the score carried', async () => {
    const image = await rgbaOf(sharp(FIXTURE));
    const full = await detectMouth(image);
    if (!full.ok) throw new Error('fixture face not found');
    // The neighbouring frame's face sat 6 px further left: the box must move right with the landmarks.
    const neighbour = transformAnimation(full.animation, 6, 0, 1);
    const hint = { ...faceHint(neighbour), score: 0.777 };
    const followed = await detectMouth({ ...image, near: hint });
    expect(followed.ok).toBe(true);
    if (!followed.ok) return;
    const a = followed.animation;
    // No SSD pass ran: the score is the hint's, not a new detection's.
    expect(a.confidence).toBe(0.777);
    expect(
      Math.hypot(a.mouth_center.x - full.animation.mouth_center.x, a.mouth_center.y - full.animation.mouth_center.y),
    ).toBeLessThan(4);
    expect(Math.abs(a.face_box.x - (neighbour.face_box.x + (faceAnchor(a).x - hint.anchor.x)))).toBeLessThan(0.1);
    expect(a.face_box.x).toBeGreaterThan(neighbour.face_box.x + 2);
    expect(a.outer_lip).toHaveLength(12);
  });

  it('a hint the face has moved out of (or that holds none) falls back to searching the whole frame', async () => {
    const image = await rgbaOf(sharp(FIXTURE));
    const full = await detectMouth(image);
    if (!full.ok) throw new Error('fixture face not found');
    // A box of the face's size in the bottom-right corner, where there is no face.
    const elsewhere = transformAnimation(full.animation, -250, -300, 1);
    const result = await detectMouth({ ...image, near: { ...faceHint(elsewhere), score: 0.777 } });
    expect(result.ok).toBe(true);
    if (!result.ok) return;
    expect(result.animation.confidence).toBe(full.animation.confidence);
    expect(result.animation.face_box).toEqual(full.animation.face_box);
  });

  it('an aborted detection rejects with the abort reason', async () => {
    const controller = new AbortController();
    const pending = detectMouth(await rgbaOf(sharp(FIXTURE)), { signal: controller.signal });
    controller.abort(new Error('client went away'));
    await expect(pending).rejects.toThrow('client went away');
  });
});

describe('portrait rules (pure)', () => {
  it('no candidates → no_face; weak dominant face → low_confidence', () => {
    expect(toMouthDetection([])).toEqual({ ok: false, reason: 'no_face' });
    expect(toMouthDetection([fakeFace(0, 0, 100, 0.1)])).toEqual({ ok: false, reason: 'no_face' });
    expect(toMouthDetection([fakeFace(0, 0, 100, 0.4)])).toMatchObject({ ok: false, reason: 'low_confidence' });
  });

  it('several faces: ok exactly when the largest has at least twice the area of the next', () => {
    fc.assert(
      fc.property(fc.integer({ min: 20, max: 200 }), fc.integer({ min: 20, max: 200 }), (a, b) => {
        const result = toMouthDetection([fakeFace(0, 0, a, 0.9), fakeFace(300, 0, b, 0.9)]);
        const dominant = Math.max(a, b) ** 2 >= 2 * Math.min(a, b) ** 2;
        expect(result.ok).toBe(dominant);
        if (!result.ok) expect(result.reason).toBe('multiple_faces');
        else expect(result.animation.face_box.width).toBe(Math.max(a, b));
      }),
    );
  });

  it('transformAnimation maps every point through the same crop and scale', () => {
    const result = toMouthDetection([fakeFace(40, 60, 100, 0.9)]);
    if (!result.ok) throw new Error('expected a face');
    const moved = transformAnimation(result.animation, 10, 20, 2);
    expect(moved.mouth_center.x).toBeCloseTo((result.animation.mouth_center.x - 10) * 2, 1);
    expect(moved.outer_lip[3].y).toBeCloseTo((result.animation.outer_lip[3].y - 20) * 2, 1);
    expect(moved.mouth_width).toBeCloseTo(result.animation.mouth_width * 2, 1);
    expect(moved.face_box).toEqual({ x: 60, y: 80, width: 200, height: 200 });
  });
});
