import fs from 'node:fs/promises';
import path from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { faceGeometry, faceParams, type FaceGeometry } from '../actors/render/drawn-face.ts';
import { NEUTRAL_WEIGHTS, type ExpressionWeights } from '../actors/expression.ts';
import { createRenderer } from '../actors/render/renderers/index.ts';
import type { AvatarManifest, AvatarSource, I420Frame, MouthPose, Renderer } from '../actors/render/types.ts';
import { request } from './render.fixtures.ts';

/**
 * Measured on rendered `rt` frames. The project's face detector is trained on photos and does not find the drawn
 * face reliably, so the landmarks come from the drawn face's own geometry (where its mouth and eyes are) and the
 * pixels: lips by their red chroma around the mouth centre, a brow as the dark run above the left eye's centre.
 */
interface MouthMeasure {
  width: number;
  /** How far the corners sit above the mouth's centre line, px (positive = raised). */
  cornerLift: number;
}

/** V (Cr) above this is lip colour (#c0636a ≈ 174); the skin (≈ 151) and the cheek blush under it stay below. */
const LIP_CR = 165;
/** Luma below this is brow hair (≈ 48); skin is ≈ 208. */
const BROW_Y = 110;

function lipPixel(frame: I420Frame, x: number, y: number): boolean {
  const w = frame.width;
  const v = frame.data[w * frame.height + (w / 2) * (frame.height / 2) + (y >> 1) * (w / 2) + (x >> 1)];
  return v > LIP_CR;
}

function measureMouth(frame: I420Frame, g: FaceGeometry): MouthMeasure {
  const columns = new Map<number, number[]>();
  const x0 = Math.round(g.mouthX - g.mouthHalfWidth * 1.6),
    x1 = Math.round(g.mouthX + g.mouthHalfWidth * 1.6);
  const y0 = Math.round(g.mouthY - g.mouthHalfWidth * 0.7),
    y1 = Math.round(g.mouthY + g.mouthHalfWidth * 1.2);
  for (let x = x0; x < x1; x++) {
    for (let y = y0; y < y1; y++) if (lipPixel(frame, x, y)) columns.set(x, [...(columns.get(x) ?? []), y]);
  }
  const xs = [...columns.keys()].sort((a, b) => a - b);
  const left = xs[0],
    right = xs[xs.length - 1];
  const meanMid = (x: number) => {
    const ys = columns.get(x) ?? [];
    return (Math.min(...ys) + Math.max(...ys)) / 2;
  };
  // The corner's height: the middle of the lip pixels a few px in from each end; the centre's: the middle column.
  const inset = 3;
  const corner = (meanMid(left + inset) + meanMid(right - inset)) / 2;
  return { width: right - left + 1, cornerLift: meanMid(Math.round(g.mouthX)) - corner };
}

/** The lower edge of the left brow: the first dark pixel going up from above the eye, at the eye's centre column. */
function browEdge(frame: I420Frame, g: FaceGeometry): number {
  const x = Math.round(g.leftEyeX);
  for (let y = Math.round(g.eyeY - g.eyeRadiusY * 1.3); y > g.eyeY - g.eyeRadiusY * 6; y--)
    if (frame.data[y * frame.width + x] < BROW_Y) return y;
  throw new Error('no brow found above the eye');
}

describe('expressions on the drawn rt face', () => {
  let rt: Renderer;
  let geometry: FaceGeometry;
  beforeAll(async () => {
    const dir = path.join(import.meta.dirname, '..', 'avatars', 'demo-rt');
    const manifest: AvatarManifest = JSON.parse(await fs.readFile(path.join(dir, 'manifest.json'), 'utf8'));
    const source: AvatarSource = { id: 'demo-rt', dir, manifest };
    rt = createRenderer('rt');
    await rt.prepare(source);
    geometry = faceGeometry(faceParams(manifest), manifest.width, manifest.height);
  });

  // Frame 0: open eyes, the first breathing step; the same frame index for every variant.
  const frame = (expression: ExpressionWeights, mouth?: MouthPose) =>
    rt.render(request(0, { expression, ...(mouth ? { mouth, speaking: true, level: 0.4 } : {}) }));

  it.each([
    ['silent', undefined],
    ['speaking an open "ah"', { open: 0.6, wide: 0.2, round: 0 }],
    ['speaking an "ee"', { open: 0.3, wide: 1, round: 0 }],
  ] as const)('smile at intensity 1 widens the mouth by at least 8 %% and raises its corners (%s)', (_, mouth) => {
    const neutral = measureMouth(frame(NEUTRAL_WEIGHTS, mouth), geometry);
    const smile = measureMouth(frame({ ...NEUTRAL_WEIGHTS, smile: 1 }, mouth), geometry);
    expect(smile.width / neutral.width).toBeGreaterThanOrEqual(1.08);
    expect(smile.cornerLift - neutral.cornerLift).toBeGreaterThanOrEqual(2);
    // The viseme stays: an open mouth is still open under the smile (its lip pixels span as much height).
  });

  it('a smile while speaking keeps the spoken mouth open', () => {
    const closed = frame({ ...NEUTRAL_WEIGHTS, smile: 1 });
    const open = frame({ ...NEUTRAL_WEIGHTS, smile: 1 }, { open: 0.8, wide: 0, round: 0 });
    const dark = (f: I420Frame) => {
      let count = 0;
      for (let y = Math.round(geometry.mouthY - 10); y < geometry.mouthY + 30; y++)
        for (let x = Math.round(geometry.mouthX - 15); x < geometry.mouthX + 15; x++)
          if (f.data[y * f.width + x] < 60) count++;
      return count;
    };
    expect(dark(open)).toBeGreaterThan(dark(closed) + 100);
  });

  it.each([
    ['silent', undefined],
    ['speaking', { open: 0.6, wide: 0.2, round: 0 }],
  ] as const)('surprise raises the brows by at least 5 %% of the eye–brow distance (%s)', (_, mouth) => {
    const neutral = browEdge(frame(NEUTRAL_WEIGHTS, mouth), geometry);
    const surprised = browEdge(frame({ ...NEUTRAL_WEIGHTS, surprise: 1 }, mouth), geometry);
    const eyeToBrow = geometry.eyeY - neutral;
    expect((neutral - surprised) / eyeToBrow).toBeGreaterThanOrEqual(0.05);
  });

  it('concern lifts the inner brow end and lowers the mouth corners; neutral weights draw the face as before', () => {
    const plain = rt.render(request(0));
    expect(Buffer.compare(Buffer.from(frame(NEUTRAL_WEIGHTS).data), Buffer.from(plain.data))).toBe(0);
    const concern = frame({ ...NEUTRAL_WEIGHTS, concern: 1 });
    expect(measureMouth(concern, geometry).cornerLift).toBeLessThanOrEqual(
      measureMouth(plain, geometry).cornerLift - 2,
    );
    // Inner end of the left brow (towards the centre line) sits higher than in the neutral face.
    const innerColumn = Math.round(geometry.leftEyeX + geometry.eyeRadiusX * 0.8);
    const edge = (f: I420Frame) => {
      for (let y = Math.round(geometry.eyeY - geometry.eyeRadiusY * 1.3); y > 0; y--)
        if (f.data[y * f.width + innerColumn] < BROW_Y) return y;
      return 0;
    };
    expect(edge(plain) - edge(concern)).toBeGreaterThanOrEqual(4);
  });
});
