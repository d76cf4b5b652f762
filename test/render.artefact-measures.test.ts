/**
 * The artefact measures (test/helpers/artefacts.ts) on constructed frames: each fires on the artefact it is for —
 * a seam, a halo, a notched upper lip, dark interior outside the lips, two rows of teeth — and stays quiet on a
 * good open mouth whose change fades smoothly into the face.
 */
import { describe, expect, it } from 'vitest';
import { rgbaToI420 } from '../actors/render/i420.ts';
import type { I420Frame, Point } from '../actors/render/types.ts';
import {
  COMPOSITE_MIN_DIFF,
  SEAM_MAX_LEVELS,
  OUTSIDE_MAX_LEVELS,
  brokenThresholds,
  darkOutsideLips,
  measureArtefacts,
  mouthJawRegion,
  outsideDifference,
  seamStep,
  teethAboveUpperLip,
  teethBelowLowerLip,
  teethRows,
  type LipGeometry,
} from './helpers/artefacts.ts';

const SIZE = 160;
const CX = 80;
const CY = 64;
const MW = 32;
type Rgb = [number, number, number];
const SKIN: Rgb = [200, 150, 130];
const LIP: Rgb = [180, 80, 90];
const THROAT: Rgb = [30, 10, 12];
const TEETH: Rgb = [236, 224, 206];

function ellipse(cx: number, cy: number, rx: number, ry: number, count: number): Point[] {
  return Array.from({ length: count }, (_, i) => {
    const t = (i / count) * 2 * Math.PI;
    return { x: Math.round(cx + rx * Math.cos(t)), y: Math.round(cy + ry * Math.sin(t)) };
  });
}

const inEllipse = (x: number, y: number, cx: number, cy: number, rx: number, ry: number): boolean =>
  ((x - cx) / rx) ** 2 + ((y - cy) / ry) ** 2 <= 1;

/** Landmarks of the open mouth the good frame shows. */
const OPEN_LIPS: LipGeometry = {
  mouth_center: { x: CX, y: CY },
  mouth_width: MW,
  outer_lip: ellipse(CX, CY, 16, 9, 12),
  inner_lip: ellipse(CX, CY, 12, 5, 8),
};

function paint(colour: (x: number, y: number) => Rgb): I420Frame {
  const rgba = new Uint8Array(SIZE * SIZE * 4);
  for (let y = 0; y < SIZE; y++) {
    for (let x = 0; x < SIZE; x++) {
      const [r, g, b] = colour(x, y);
      rgba.set([r, g, b, 255], (y * SIZE + x) * 4);
    }
  }
  return rgbaToI420(rgba, SIZE, SIZE);
}

/** Skin with a gentle vertical shading (the base's own gradient), so a step is measured against something. */
const skin = (y: number): Rgb => [SKIN[0] - 0.2 * y, SKIN[1] - 0.2 * y, SKIN[2] - 0.2 * y];

const closedMouth = (x: number, y: number): Rgb => (inEllipse(x, y, CX, CY, 16, 6) ? LIP : skin(y));

/** The open mouth: lips, dark inside, one row of upper teeth hanging from the upper lip. */
function openMouth(x: number, y: number): Rgb | null {
  if (!inEllipse(x, y, CX, CY, 16, 9)) return null;
  if (!inEllipse(x, y, CX, CY, 12, 5)) return LIP;
  return y <= CY - 2.5 ? TEETH : THROAT;
}

/** How much the jaw region brightens while speaking: 6 levels at the mouth, fading smoothly to 0 at the region's edge. */
function fade(x: number, y: number): number {
  const region = mouthJawRegion(OPEN_LIPS);
  const r = Math.sqrt(((x - region.cx) / region.rx) ** 2 + ((y - region.cy) / region.ry) ** 2);
  const t = Math.min(1, Math.max(0, (r - 0.3) / 0.7));
  return 6 * (1 - t * t * (3 - 2 * t));
}

function goodOpen(x: number, y: number): Rgb {
  const mouth = openMouth(x, y);
  if (mouth) return mouth;
  const [r, g, b] = skin(y);
  const lift = fade(x, y);
  return [r + lift, g + lift, b + lift];
}

const base = paint(closedMouth);
const good = paint(goodOpen);

describe('artefact measures on constructed frames', () => {
  it('a good open mouth whose change fades into the face holds every threshold', () => {
    const report = measureArtefacts(base, good, OPEN_LIPS);
    expect(brokenThresholds(report)).toEqual([]);
    expect(report.seam.pairs).toBeGreaterThan(0);
    expect(report.teethRows).toBe(1);
    expect(report.teethBelowLowerLip).toBe(0);
    expect(report.darkOutsideLips).toBe(0);
  });

  it('a patch laid as a box a few levels off the face shows as a seam', () => {
    const box = (x: number, y: number): boolean => Math.abs(x - CX) <= 40 && y >= CY - 24 && y <= CY + 40;
    const seamed = paint((x, y) => {
      const [r, g, b] = goodOpen(x, y);
      return box(x, y) ? [r + 8, g + 8, b + 8] : [r, g, b];
    });
    const seam = seamStep(base, seamed);
    expect(seam.p98).toBeGreaterThan(SEAM_MAX_LEVELS);
    expect(seamStep(base, good).p98).toBeLessThanOrEqual(SEAM_MAX_LEVELS);
  });

  it("the renderer's own mask finds the seam where the patch ends", () => {
    const mask = new Uint8Array(SIZE * SIZE);
    for (let y = CY - 24; y <= CY + 40; y++) for (let x = CX - 40; x <= CX + 40; x++) mask[y * SIZE + x] = 1;
    const hardEdged = paint((x, y) =>
      mask[y * SIZE + x] && !openMouth(x, y) ? [skin(y)[0] + 10, skin(y)[1] + 10, skin(y)[2] + 10] : goodOpen(x, y),
    );
    expect(seamStep(base, hardEdged, mask).p98).toBeGreaterThan(SEAM_MAX_LEVELS);
    expect(seamStep(base, good, mask).p98).toBeLessThanOrEqual(SEAM_MAX_LEVELS);
  });

  it('a speckled halo around the mouth–jaw region shows outside it and as a seam', () => {
    const haloed = paint((x, y) => {
      const [r, g, b] = goodOpen(x, y);
      const speck = (x + 2 * y) % 3 === 0 && Math.hypot(x - CX, y - CY) < 70 ? 8 : 0;
      return [r + speck, g + speck, b + speck];
    });
    const outside = outsideDifference(base, haloed, OPEN_LIPS);
    expect(outside.mean).toBeGreaterThan(OUTSIDE_MAX_LEVELS);
    expect(outside.fadeP99).toBeGreaterThanOrEqual(COMPOSITE_MIN_DIFF);
    expect(outsideDifference(base, good, OPEN_LIPS).mean).toBeLessThanOrEqual(OUTSIDE_MAX_LEVELS);
    expect(seamStep(base, haloed).p98).toBeGreaterThan(SEAM_MAX_LEVELS);
  });

  it('a white notch splitting the upper lip is teeth above its inner edge', () => {
    const notched = paint((x, y) => (Math.abs(x - CX) <= 1 && y >= CY - 8 && y <= CY - 6 ? TEETH : goodOpen(x, y)));
    expect(teethAboveUpperLip(notched, OPEN_LIPS)).toBeGreaterThan(0);
    expect(teethAboveUpperLip(good, OPEN_LIPS)).toBe(0);
  });

  it('teeth riding on the lower lip are teeth below it', () => {
    const riding = paint((x, y) => (Math.abs(x - CX) <= 6 && y >= CY + 6 && y <= CY + 8 ? TEETH : goodOpen(x, y)));
    expect(teethBelowLowerLip(riding, OPEN_LIPS)).toBeGreaterThan(0);
    expect(teethBelowLowerLip(good, OPEN_LIPS)).toBe(0);
  });

  it('a second row of teeth under the painted upper teeth counts as two rows', () => {
    const twoRows = paint((x, y) =>
      inEllipse(x, y, CX, CY, 12, 5) && y >= CY + 2 && y <= CY + 4 ? TEETH : goodOpen(x, y),
    );
    expect(teethRows(twoRows, OPEN_LIPS)).toBe(2);
    expect(teethRows(good, OPEN_LIPS)).toBe(1);
    expect(brokenThresholds(measureArtefacts(base, twoRows, OPEN_LIPS))).toEqual(['2 rows of teeth']);
  });

  it('mouth interior painted past the lip corner is dark outside the lips', () => {
    const leaking = paint((x, y) => (x >= CX + 17 && x <= CX + 20 && Math.abs(y - CY) <= 1 ? THROAT : goodOpen(x, y)));
    expect(darkOutsideLips(base, leaking, OPEN_LIPS)).toBeGreaterThan(0);
    expect(darkOutsideLips(base, good, OPEN_LIPS)).toBe(0);
  });
});
