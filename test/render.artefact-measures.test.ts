/**
 * The artefact measures (test/helpers/artefacts.ts) on constructed frames: each fires on the artefact it is for —
 * a seam, a halo, a notched upper lip, dark interior outside the lips, two rows of teeth — and stays quiet on a
 * good open mouth whose change fades smoothly into the face.
 *
 * The seam step forgives an edge moved towards or away from the composite's boundary by at most
 * `MOVED_EDGE_REACH_PX` px: where a warp fades out beside a lip line or a jaw outline, the moved edge steps against the
 * unmoved pixel next to it by up to its whole contrast, which a person does not see as a seam. So the seam cases below
 * are what a person does see — a patch pasted 4 levels off with a hard edge (on plain skin, across a lip line), a copy
 * of the mouth region laid a few pixels off on texture, a lip line broken (kinked) where the composite ends, a blend
 * that ends in a 1-px ramp — and each must fail; an edge moved a fraction of a pixel or lifted 2 px by a warp fading
 * out in plain skin, and smooth fades, must pass.
 */
import fs from 'node:fs';
import path from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { rgbaToI420 } from '../actors/render/i420.ts';
import { WarpRenderer } from '../actors/render/renderers/warp.ts';
import type {
  AvatarManifest,
  FrameRequest,
  I420Frame,
  MouthAnimation,
  MouthPose,
  Point,
} from '../actors/render/types.ts';
import {
  COMPOSITE_MIN_DIFF,
  compositeMask,
  SEAM_MAX_LEVELS,
  OUTSIDE_MAX_LEVELS,
  brokenThresholds,
  darkOutsideLips,
  faceTone,
  isTeethBright,
  insideAndLowerEdge,
  INSIDE_MIN_SHADING,
  LOWER_EDGE_MAX_STEP,
  measureArtefacts,
  mouthJawRegion,
  outsideDifference,
  seamStep,
  teethAboveUpperLip,
  teethBelowLowerLip,
  teethRows,
  thinLinesUnderLips,
  MAX_THIN_LINE_PIXELS,
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

/** A frame of luma `y(x, y)` (rounded, as a frame holds it) and neutral chroma: seams measured on luma alone. */
function lumaFrame(y: (x: number, y: number) => number): I420Frame {
  const frame = paint(() => [128, 128, 128]);
  for (let row = 0; row < SIZE; row++)
    for (let x = 0; x < SIZE; x++) frame.data[row * SIZE + x] = Math.min(255, Math.max(0, Math.round(y(x, row))));
  return frame;
}

/** Plain skin: one level darker every 8 rows (a face's gentle shading). */
const plainSkin = (_x: number, y: number): number => 150 - y / 8;
/** Skin with texture a person sees shift (pores, stubble, a weave): ±20 levels over a few pixels. */
const texturedSkin = (x: number, y: number): number =>
  plainSkin(x, y) + 20 * Math.sin((2 * Math.PI * x) / 9) * Math.sin((2 * Math.PI * y) / 11);
/** A lip line across the face at `LIP_LINE_Y`: 60 levels darker below it, anti-aliased over a pixel. */
const LIP_LINE_Y = 70.5;
const withLipLine = (x: number, y: number): number =>
  plainSkin(x, y) - 60 * Math.min(1, Math.max(0, y - LIP_LINE_Y + 0.5));

/** The box a mouth composite covers in the seam cases. */
const inBox = (x: number, y: number): boolean => x >= 40 && x < 120 && y >= 40 && y < 120;

/** The step a composite adds over the base's own step alone, with no allowance for a moved edge (p98). */
function stepOverOwnStep(before: I420Frame, after: I420Frame): number {
  const mask = compositeMask(before, after);
  const steps: number[] = [];
  for (let y = 0; y + 1 < SIZE; y++) {
    for (let x = 0; x + 1 < SIZE; x++) {
      const p = y * SIZE + x;
      for (const q of [p + 1, p + SIZE]) {
        if ((mask[p] !== 0) === (mask[q] !== 0)) continue;
        const own = Math.abs(before.data[p] - before.data[q]);
        steps.push(Math.max(0, Math.abs(after.data[p] - after.data[q]) - own));
      }
    }
  }
  steps.sort((a, b) => a - b);
  return steps[Math.floor(0.98 * steps.length)];
}

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

  it('a patch pasted 4 levels lighter with a hard edge on plain skin is a seam', () => {
    const pasted = lumaFrame((x, y) => plainSkin(x, y) + (inBox(x, y) ? 4 : 0));
    expect(seamStep(lumaFrame(plainSkin), pasted).p98).toBeGreaterThan(SEAM_MAX_LEVELS);
  });

  it('a patch pasted 4 levels darker across a lip line is a seam where it crosses the skin', () => {
    const pasted = lumaFrame((x, y) => withLipLine(x, y) - (inBox(x, y) ? 4 : 0));
    expect(seamStep(lumaFrame(withLipLine), pasted).p98).toBeGreaterThan(SEAM_MAX_LEVELS);
  });

  it('a copy of the mouth region laid 3 px off its place is a seam where its texture breaks', () => {
    const misregistered = lumaFrame((x, y) => (inBox(x, y) ? texturedSkin(x + 3, y + 2) : texturedSkin(x, y)));
    expect(seamStep(lumaFrame(texturedSkin), misregistered).p98).toBeGreaterThan(SEAM_MAX_LEVELS);
  });

  it('a lighter patch whose blend ends in a 1-px ramp is a seam', () => {
    const rim = (x: number, y: number): boolean =>
      inBox(x, y) && !(inBox(x - 1, y) && inBox(x + 1, y) && inBox(x, y - 1) && inBox(x, y + 1));
    const ramped = lumaFrame((x, y) => plainSkin(x, y) + (rim(x, y) ? 4 : inBox(x, y) ? 8 : 0));
    expect(seamStep(lumaFrame(plainSkin), ramped).p98).toBeGreaterThan(SEAM_MAX_LEVELS);
  });

  it('a lip line broken where the composite ends (lowered 2 px inside it, a kink) is a seam', () => {
    const kinked = lumaFrame((x, y) => withLipLine(x, inBox(x, y) ? y - 2 : y));
    expect(seamStep(lumaFrame(withLipLine), kinked).p98).toBeGreaterThan(SEAM_MAX_LEVELS);
  });

  it('a copy of the mouth region laid 2 px off along the lips is a seam', () => {
    const misregistered = lumaFrame((x, y) => (inBox(x, y) ? texturedSkin(x + 2, y) : texturedSkin(x, y)));
    expect(seamStep(lumaFrame(texturedSkin), misregistered).p98).toBeGreaterThan(SEAM_MAX_LEVELS);
  });

  it('a lip line moved up 2 px by a warp that fades out in the plain skin above it is no seam', () => {
    // The lift is 2 px at the line and fades to 0 over the 30 px above it; the plain skin moved shows no change, so
    // the composite a frame shows ends on the moved line.
    const lift = (x: number, y: number): number =>
      inBox(x, 80) && y <= LIP_LINE_Y + 3
        ? 2 * Math.max(0, 1 - (LIP_LINE_Y - y) / 30) * Math.sin((Math.PI * (x - 40)) / 80)
        : 0;
    const before = lumaFrame(withLipLine);
    const lifted = lumaFrame((x, y) => withLipLine(x, y + lift(x, y)));
    expect(stepOverOwnStep(before, lifted)).toBeGreaterThan(SEAM_MAX_LEVELS);
    expect(seamStep(before, lifted).p98).toBeLessThanOrEqual(SEAM_MAX_LEVELS);
  });

  it('a lip line moved down a fraction of a pixel, fading out along it, is no seam (counted naively, it is)', () => {
    // A warp that lowers the lip line by up to 0.8 px in the middle of the box and not at all at its ends.
    const drop = (x: number): number => (inBox(x, 80) ? 0.8 * Math.sin((Math.PI * (x - 40)) / 80) : 0);
    const moved = lumaFrame((x, y) => withLipLine(x, y - drop(x)));
    const before = lumaFrame(withLipLine);
    expect(stepOverOwnStep(before, moved)).toBeGreaterThan(SEAM_MAX_LEVELS);
    expect(seamStep(before, moved).p98).toBeLessThanOrEqual(SEAM_MAX_LEVELS);
  });

  it('a lighter patch that fades in smoothly over 12 px is no seam, on plain skin and across a lip line', () => {
    const fadeIn = (x: number, y: number): number => {
      const inset = Math.min(x - 40, 119 - x, y - 40, 119 - y);
      const t = Math.min(1, Math.max(0, inset / 12));
      return inBox(x, y) ? 8 * t * t * (3 - 2 * t) : 0;
    };
    for (const face of [plainSkin, withLipLine, texturedSkin]) {
      const faded = lumaFrame((x, y) => face(x, y) + fadeIn(x, y));
      expect(seamStep(lumaFrame(face), faded).p98).toBeLessThanOrEqual(SEAM_MAX_LEVELS);
    }
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

  describe('with what a warp says it moved (`compositeMask`’s claim: a clip warp’s `warpMaskOf`)', () => {
    /** A lip line dropped by a warp: 4 px at the line within the box's columns, fading out over the 30 px below it. */
    const dropAt = (x: number, y: number): number =>
      inBox(x, 80) && y >= LIP_LINE_Y - 3
        ? 4 * Math.max(0, 1 - Math.max(0, y - LIP_LINE_Y) / 30) * Math.sin((Math.PI * (x - 40)) / 80)
        : 0;
    /** What such a warp claims: every pixel it moves by more than 0.05 px. */
    const claimOf = (moved: (x: number, y: number) => number): Uint8Array => {
      const claim = new Uint8Array(SIZE * SIZE);
      for (let y = 0; y < SIZE; y++) for (let x = 0; x < SIZE; x++) claim[y * SIZE + x] = moved(x, y) > 0.05 ? 1 : 0;
      return claim;
    };
    const before = lumaFrame(withLipLine);
    const dropped = lumaFrame((x, y) => withLipLine(x, y - dropAt(x, y)));
    const claim = claimOf(dropAt);

    it('a lip line dropped 4 px over plain skin that moved with it is no seam where the warp fades out', () => {
      // Read off the frame alone the composite ends on the dropped line (the skin below moved, unchanged): counted.
      expect(seamStep(before, dropped).p98).toBeGreaterThan(SEAM_MAX_LEVELS);
      expect(seamStep(before, dropped, compositeMask(before, dropped, claim)).p98).toBeLessThanOrEqual(SEAM_MAX_LEVELS);
    });

    it('the same drop cut off where the warp ends (the lip line torn at its sides) is a seam', () => {
      const cut = (x: number, y: number): number => (inBox(x, y) && y >= LIP_LINE_Y - 3 ? 4 : 0);
      const torn = lumaFrame((x, y) => withLipLine(x, y - cut(x, y)));
      expect(seamStep(before, torn, compositeMask(before, torn, claimOf(cut))).p98).toBeGreaterThan(SEAM_MAX_LEVELS);
    });

    it('the drop with the moved skin pasted 4 levels lighter is a seam where the claim ends', () => {
      const pasted = lumaFrame((x, y) => withLipLine(x, y - dropAt(x, y)) + (claim[y * SIZE + x] ? 4 : 0));
      expect(seamStep(before, pasted, compositeMask(before, pasted, claim)).p98).toBeGreaterThan(SEAM_MAX_LEVELS);
    });

    it('a change outside what the warp claims still counts: a patch laid beside the drop', () => {
      const beside = (x: number, y: number): boolean => x >= 124 && x < 150 && y >= 90 && y < 130;
      const laid = lumaFrame((x, y) => withLipLine(x, y - dropAt(x, y)) + (beside(x, y) ? 6 : 0));
      expect(seamStep(before, laid, compositeMask(before, laid, claim)).p98).toBeGreaterThan(SEAM_MAX_LEVELS);
    });
  });

  describe('with what a photo’s mouth pose says it changed (`WarpRenderer.mouthClaimOf`, the astronaut)', () => {
    const renderer = new WarpRenderer();
    const CLOSED = { open: 0, wide: 0, round: 0 };
    /** A speaking request as a session sends it: the head bobbing and tilting with the phrase, an expression on. */
    const speaking = (mouth: MouthPose): FrameRequest => ({
      frameIdx: 22,
      ptsMs: 880,
      mouth,
      level: 0.5,
      speaking: true,
      prosody: { fast: 0.9, slow: 0.9 },
      expression: { smile: 0.6, concern: 0, surprise: 0.4, emphasis: 0.5 },
    });
    const WIDE_OPEN = speaking({ open: 1, wide: 0, round: 0 });
    let frame: I420Frame;
    let rest: I420Frame;
    let claim: Uint8Array;
    let mouth: MouthAnimation;
    const mapped = (from: I420Frame, pixel: (i: number, y: number) => number): I420Frame => {
      const data = from.data.slice();
      for (let i = 0; i < from.width * from.height; i++) data[i] = Math.min(255, Math.max(0, pixel(i, data[i])));
      return { ...from, data };
    };

    beforeAll(async () => {
      const dir = path.resolve(import.meta.dirname, '..', 'avatars', 'astronaut');
      const manifest = JSON.parse(fs.readFileSync(path.join(dir, 'manifest.json'), 'utf8')) as AvatarManifest;
      await renderer.prepare({ id: manifest.id, dir, manifest });
      mouth = manifest.metadata.animation!;
      frame = renderer.render(WIDE_OPEN);
      rest = renderer.render({ ...WIDE_OPEN, mouth: CLOSED });
      claim = renderer.mouthClaimOf(WIDE_OPEN)!;
    });

    it('every pixel a speaking frame changes from its closed-lips frame lies in the claim (rounding aside)', () => {
      for (const mouth of [
        { open: 0.2, wide: 0, round: 0 },
        { open: 1, wide: 0, round: 0 },
        { open: 0.35, wide: 1, round: 0 },
        { open: 0.75, wide: 0, round: 0.5 },
      ]) {
        const request = speaking(mouth);
        const spoken = renderer.render(request);
        const closed = renderer.render({ ...request, mouth: CLOSED });
        const posed = renderer.mouthClaimOf(request)!;
        let changed = 0;
        let outside = 0;
        for (let i = 0; i < posed.length; i++) {
          const diff = Math.abs(spoken.data[i] - closed.data[i]);
          if (diff >= COMPOSITE_MIN_DIFF) changed++;
          if (!posed[i] && diff > COMPOSITE_MIN_DIFF) outside++;
        }
        expect(changed, JSON.stringify(mouth)).toBeGreaterThan(1000);
        expect(outside, JSON.stringify(mouth)).toBe(0);
      }
      expect(renderer.mouthClaimOf(speaking(CLOSED))!.some((v) => v !== 0)).toBe(false);
    });

    it('the wide-open mouth read with its claim is no seam where its warp fades out', () => {
      expect(seamStep(rest, frame, compositeMask(rest, frame, claim)).p98).toBeLessThanOrEqual(SEAM_MAX_LEVELS);
    });

    it('the pose cut off 6 px inside its claim (lip lines and the chin torn where it stops) is a seam', () => {
      let cut = claim;
      for (let pass = 0; pass < 6; pass++) {
        const inner = cut.slice();
        const w = frame.width;
        for (let i = w; i < cut.length - w; i++)
          if (cut[i] && !(cut[i - 1] && cut[i + 1] && cut[i - w] && cut[i + w])) inner[i] = 0;
        cut = inner;
      }
      const torn = mapped(frame, (i, luma) => (cut[i] ? luma : rest.data[i]));
      expect(seamStep(rest, torn, compositeMask(rest, torn, cut)).p98).toBeGreaterThan(SEAM_MAX_LEVELS);
    });

    it('the pose with all it claims pasted 4 levels lighter is a seam where the claim ends', () => {
      const pasted = mapped(frame, (i, luma) => (claim[i] ? luma + 4 : luma));
      expect(seamStep(rest, pasted, compositeMask(rest, pasted, claim)).p98).toBeGreaterThan(SEAM_MAX_LEVELS);
    });

    it('a change outside the claim still counts: a dark notch laid into the cheek beside the mouth', () => {
      const { x: cx, y: cy } = mouth.mouth_center;
      const mw = mouth.mouth_width;
      const w = frame.width;
      const notch = (i: number): boolean => {
        const x = i % w;
        const y = Math.floor(i / w);
        return x >= cx + 1.6 * mw && x < cx + 1.9 * mw && y >= cy - 0.1 * mw && y < cy + 0.1 * mw;
      };
      let beside = 0;
      for (let i = 0; i < claim.length; i++) if (notch(i) && !claim[i]) beside++;
      expect(beside).toBeGreaterThan(50);
      const laid = mapped(frame, (i, luma) => (notch(i) ? luma - 40 : luma));
      expect(seamStep(rest, laid, compositeMask(rest, laid, claim)).p98).toBeGreaterThan(SEAM_MAX_LEVELS);
    });
  });

  describe('the inside of an open mouth and its lower lip (`insideAndLowerEdge`)', () => {
    /** A pale lower lip, as a smiling face's stretched lip shows it (the project's clip avatar). */
    const PALE_LIP: Rgb = [224, 180, 168];
    const mixRgb = (a: Rgb, b: Rgb, t: number): Rgb => [0, 1, 2].map((i) => a[i] + (b[i] - a[i]) * t) as Rgb;
    const INNER_BOTTOM = CY + 5;
    const TEETH_BOTTOM = CY - 2.5;
    /** Lips (pale below), skin, and `inside(y)` in the opening under one row of upper teeth. */
    const mouthWith = (inside: (y: number) => Rgb, lowerLip: (x: number, y: number) => Rgb = () => PALE_LIP) =>
      paint((x, y) => {
        if (!inEllipse(x, y, CX, CY, 16, 9)) return skin(y);
        if (!inEllipse(x, y, CX, CY, 12, 5)) return y > CY ? lowerLip(x, y) : LIP;
        return y <= TEETH_BOTTOM ? TEETH : inside(y);
      });
    /**
     * What the clip warp painted before its inside came from `photo-mouth.ts`: one maroon, lit at both lip edges and
     * dark between them, ending in one pixel against the lower lip.
     */
    const flatFill = mouthWith((y) => {
      const depth = Math.min(1, Math.min(y - (TEETH_BOTTOM + 0.5), INNER_BOTTOM - y) / 3);
      return mixRgb([92, 34, 38], [24, 8, 10], depth);
    });
    /** A throat under the teeth brightening into a tongue towards the lip, the lip's edge rising over a few pixels. */
    const shadedInside = (y: number): Rgb =>
      mixRgb(THROAT, [140, 72, 76], Math.min(1, Math.max(0, (y - (CY - 1)) / (INNER_BOTTOM - 1 - (CY - 1)))));
    const softLip = (x: number, y: number): Rgb => {
      const below = y - (CY + 5 * Math.sqrt(Math.max(0, 1 - ((x - CX) / 12) ** 2)));
      return mixRgb([140, 72, 76], PALE_LIP, Math.min(1, Math.max(0, below / 4)));
    };
    const shaded = mouthWith(shadedInside, softLip);

    it('a flat fill ending hard against a pale lower lip: one hard step at the lower edge, a dark unshaded inside', () => {
      const measured = insideAndLowerEdge(flatFill, OPEN_LIPS);
      expect(measured.columns).toBeGreaterThan(5);
      expect(measured.edgeStep).toBeGreaterThan(LOWER_EDGE_MAX_STEP);
      expect(measured.shading).toBeLessThan(INSIDE_MIN_SHADING);
    });

    it('a throat shading into a tongue, meeting the lip over a few pixels: within both bounds', () => {
      const measured = insideAndLowerEdge(shaded, OPEN_LIPS);
      expect(measured.columns).toBeGreaterThan(5);
      expect(measured.edgeStep).toBeLessThanOrEqual(LOWER_EDGE_MAX_STEP);
      expect(measured.shading).toBeGreaterThanOrEqual(INSIDE_MIN_SHADING);
    });

    it('closed lips show no opening to measure', () => {
      expect(insideAndLowerEdge(base, OPEN_LIPS)).toEqual({ columns: 0, edgeStep: 0, shading: 0 });
    });
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

  it('a white notch splitting the upper lip, where the base lip is red, is teeth above its inner edge', () => {
    const notched = paint((x, y) => (Math.abs(x - CX) <= 1 && y >= CY - 8 && y <= CY - 6 ? TEETH : goodOpen(x, y)));
    expect(teethAboveUpperLip(base, notched, OPEN_LIPS)).toBeGreaterThan(0);
    expect(teethAboveUpperLip(base, good, OPEN_LIPS)).toBe(0);
    expect(brokenThresholds(measureArtefacts(base, notched, OPEN_LIPS))).toContain(
      `${teethAboveUpperLip(base, notched, OPEN_LIPS)} teeth-bright px above the upper lip's inner edge`,
    );
  });

  it('a split through the whole upper lip counts even where the base shows the teeth under it', () => {
    // Measured against the open mouth itself (its teeth 1–2 px below the inner edge): only the split's pixels within
    // `MOVED_EDGE_REACH_PX` of those teeth are taken for them. 2 px wide: a 1-px line shares its chroma with the lip.
    const split = paint((x, y) => ((x === CX || x === CX + 1) && y >= CY - 10 && y <= CY - 5 ? TEETH : goodOpen(x, y)));
    expect(teethAboveUpperLip(good, split, OPEN_LIPS)).toBeGreaterThan(0);
  });

  it('teeth pasted on the skin above the upper lip are teeth above it', () => {
    // 8 × 4 px on whole chroma blocks (a half-covered block is reddened by the skin beside it).
    const pasted = paint((x, y) => (x >= CX - 4 && x < CX + 4 && y >= CY - 14 && y < CY - 10 ? TEETH : goodOpen(x, y)));
    expect(teethAboveUpperLip(base, pasted, OPEN_LIPS)).toBe(8 * 4);
  });

  /** A lip highlight (pale, nearly neutral: teeth-bright) 3 px wide on the upper lip, `dx` px right of its place. */
  const HIGHLIGHT: Rgb = [232, 222, 214];
  const highlighted =
    (mouth: (x: number, y: number) => Rgb, dx: number) =>
    (x: number, y: number): Rgb =>
      x - dx >= CX - 6 && x - dx <= CX - 4 && y >= CY - 8 && y <= CY - 7 ? HIGHLIGHT : mouth(x, y);

  it('the base’s own lip highlight, unchanged or moved 1–2 px by the warp, is not teeth above the lip', () => {
    const baseWithHighlight = paint(highlighted(closedMouth, 0));
    const unchanged = paint(highlighted(goodOpen, 0));
    expect(teethAboveUpperLip(baseWithHighlight, unchanged, OPEN_LIPS)).toBe(0);
    for (const dx of [1, 2, -2]) {
      const moved = paint(highlighted(goodOpen, dx));
      expect(teethAboveUpperLip(baseWithHighlight, moved, OPEN_LIPS), `moved ${dx} px`).toBe(0);
      // Measured off the frame alone (nothing in the base), the same highlight counts.
      expect(teethAboveUpperLip(base, moved, OPEN_LIPS), `moved ${dx} px, base without it`).toBeGreaterThan(0);
    }
    // Moved further than `MOVED_EDGE_REACH_PX`, its far pixels are the render's.
    expect(teethAboveUpperLip(baseWithHighlight, paint(highlighted(goodOpen, 5)), OPEN_LIPS)).toBeGreaterThan(0);
  });

  it('pale skin above the lip that the base shows unchanged is not teeth above the lip', () => {
    const PALE_SKIN: Rgb = [214, 204, 196];
    const pale =
      (mouth: (x: number, y: number) => Rgb) =>
      (x: number, y: number): Rgb =>
        Math.abs(x - CX) <= 8 && y >= CY - 16 && y <= CY - 13 ? PALE_SKIN : mouth(x, y);
    const paleBase = paint(pale(closedMouth));
    const paleOpen = paint(pale(goodOpen));
    expect(teethAboveUpperLip(base, paleOpen, OPEN_LIPS)).toBeGreaterThan(0);
    expect(teethAboveUpperLip(paleBase, paleOpen, OPEN_LIPS)).toBe(0);
    expect(brokenThresholds(measureArtefacts(paleBase, paleOpen, OPEN_LIPS))).toEqual([]);
  });

  /**
   * Teeth under a warm light (a portrait's cast, as on the `sun` footage): as bright as teeth, but U≈−20, V≈+16 — the
   * absolute test (`TEETH_MAX_RED`, `TEETH_MAX_BLUE_SHIFT`) takes them for skin.
   */
  const WARM_TEETH: Rgb = [236, 205, 170];
  const warmOpen = (x: number, y: number): Rgb => {
    const colour = goodOpen(x, y);
    return colour === TEETH ? WARM_TEETH : colour;
  };

  it('a warm-cast row of teeth above the upper lip is teeth above it, seen against the face’s own tone', () => {
    const notched = paint((x, y) =>
      Math.abs(x - CX) <= 6 && y >= CY - 8 && y <= CY - 6 ? WARM_TEETH : warmOpen(x, y),
    );
    const tone = faceTone(base, OPEN_LIPS);
    expect(tone).not.toBeNull();
    for (let x = CX - 6; x < CX + 6; x++) {
      expect(isTeethBright(notched, x, CY - 7), `absolute test at x ${x}`).toBe(false);
      expect(isTeethBright(notched, x, CY - 7, tone), `against the face at x ${x}`).toBe(true);
    }
    expect(teethAboveUpperLip(base, notched, OPEN_LIPS)).toBeGreaterThan(0);
    // (A row laid above the upper lip, over the painted one, reads as a second row too.)
    expect(brokenThresholds(measureArtefacts(base, notched, OPEN_LIPS))).toEqual(
      expect.arrayContaining([expect.stringMatching(/teeth-bright px above the upper lip/)]),
    );
  });

  it('warm-cast teeth inside the opening are one row, and the face’s skin and lips are not teeth against its tone', () => {
    const warm = paint(warmOpen);
    const report = measureArtefacts(base, warm, OPEN_LIPS);
    expect(brokenThresholds(report)).toEqual([]);
    expect(report.teethRows).toBe(1);
    expect(report.teethBelowLowerLip).toBe(0);
    const tone = faceTone(base, OPEN_LIPS);
    // Every pixel but the teeth: skin (lifted by the fade), lips, the dark inside.
    for (let y = 0; y < SIZE; y++)
      for (let x = 0; x < SIZE; x++)
        if (warmOpen(x, y) !== WARM_TEETH) expect(isTeethBright(warm, x, y, tone), `(${x}, ${y})`).toBe(false);
  });

  it('teeth riding on the lower lip are teeth below it', () => {
    const riding = paint((x, y) => (Math.abs(x - CX) <= 6 && y >= CY + 6 && y <= CY + 8 ? TEETH : goodOpen(x, y)));
    expect(teethBelowLowerLip(base, riding, OPEN_LIPS)).toBeGreaterThan(0);
    expect(teethBelowLowerLip(base, good, OPEN_LIPS)).toBe(0);
    // The base's own teeth riding there (a rest face showing them) are not the render's.
    expect(teethBelowLowerLip(riding, riding, OPEN_LIPS)).toBe(0);
  });

  it('on a smile whose inner upper lip sags below its corners, the teeth inside the mouth are not below the lip', () => {
    // The inner corners sit 2–3 px above the inner upper lip's middle (the astronaut's smile, found by the detector).
    const smile: LipGeometry = {
      ...OPEN_LIPS,
      inner_lip: [
        { x: CX - 12, y: CY - 4 },
        { x: CX - 6, y: CY - 2 },
        { x: CX, y: CY - 1 },
        { x: CX + 6, y: CY - 2 },
        { x: CX + 12, y: CY - 4 },
        { x: CX + 6, y: CY + 4 },
        { x: CX, y: CY + 5 },
        { x: CX - 6, y: CY + 4 },
      ],
    };
    const teethInside = paint((x, y) =>
      x >= CX - 8 && x < CX + 8 && y >= CY - 2 && y < CY + 2 ? TEETH : goodOpen(x, y),
    );
    expect(teethBelowLowerLip(base, teethInside, smile)).toBe(0);
    const riding = paint((x, y) => (x >= CX - 6 && x < CX + 6 && y >= CY + 6 && y < CY + 8 ? TEETH : goodOpen(x, y)));
    expect(teethBelowLowerLip(base, riding, smile)).toBeGreaterThan(0);
  });

  it('a second row of teeth under the painted upper teeth counts as two rows', () => {
    const twoRows = paint((x, y) =>
      inEllipse(x, y, CX, CY, 12, 5) && y >= CY + 2 && y <= CY + 4 ? TEETH : goodOpen(x, y),
    );
    expect(teethRows(twoRows, OPEN_LIPS)).toBe(2);
    expect(teethRows(good, OPEN_LIPS)).toBe(1);
    expect(brokenThresholds(measureArtefacts(base, twoRows, OPEN_LIPS))).toEqual(['2 rows of teeth']);
  });

  /**
   * Under the chin, a soft shadow (rows 95–100), the neck (101–108) and a collar's dark edge (109 on): the shadow
   * pressed into a 2-px line just above the collar (a chin squeezed onto its held outline) is a thin line; the same
   * shadow moved down whole is not.
   */
  const CHIN_SHADOW: Record<number, number> = { 95: 130, 96: 105, 97: 90, 98: 90, 99: 105, 100: 130 };
  const underChin =
    (shadowAt: (y: number) => number | undefined) =>
    (_x: number, y: number): number =>
      y >= 109 ? 30 : (shadowAt(y) ?? (y > 100 ? 160 : 150));

  it('a chin shadow squeezed into a thin line above the collar is a thin line under the lips; moved whole it is not', () => {
    const chinBase = lumaFrame(underChin((y) => CHIN_SHADOW[y]));
    const movedWhole = lumaFrame(underChin((y) => CHIN_SHADOW[y - 3]));
    const squeezed = lumaFrame(underChin((y) => (y === 105 || y === 106 ? 95 : y > 106 ? 160 : undefined)));
    expect(thinLinesUnderLips(chinBase, squeezed, OPEN_LIPS).pixels).toBeGreaterThan(MAX_THIN_LINE_PIXELS);
    expect(thinLinesUnderLips(chinBase, movedWhole, OPEN_LIPS).pixels).toBe(0);
    expect(thinLinesUnderLips(chinBase, chinBase, OPEN_LIPS).pixels).toBe(0);
  });

  it('mouth interior painted past the lip corner is dark outside the lips', () => {
    const leaking = paint((x, y) => (x >= CX + 17 && x <= CX + 20 && Math.abs(y - CY) <= 1 ? THROAT : goodOpen(x, y)));
    expect(darkOutsideLips(base, leaking, OPEN_LIPS)).toBeGreaterThan(0);
    expect(darkOutsideLips(base, good, OPEN_LIPS)).toBe(0);
  });
});
