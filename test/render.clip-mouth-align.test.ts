/**
 * How a clip avatar's speaking frame is composed (issue 44, point 2), on synthetic frames where every answer is known:
 * a harvested mouth is aligned to the loop frame's own mouth (centre, width and roll), takes that frame's skin colour,
 * and changes nothing beyond the skin around the lips; a harvest showing too few openings is not laid (the loop
 * frame is warped along its own lips instead); the warp changes nothing at its edge; each says what it changed (what
 * the artefact measures take as the composite).
 */
import { rmSync } from 'node:fs';
import sharp from 'sharp';
import { describe, expect, it } from 'vitest';
import { warpLoopFrame, warpMaskOf } from '../actors/render/clip-warp.ts';
import { i420Size } from '../actors/render/i420.ts';
import {
  HarvestedMouths,
  MOUTH_CELL_CENTER,
  MOUTH_CELL_HEIGHT,
  MOUTH_CELL_WIDTH,
  MOUTH_SAMPLE_WIDTH_PX,
  type MouthSampleIndex,
} from '../actors/render/harvested-mouths.ts';
import { WarpRenderer } from '../actors/render/renderers/warp.ts';
import type { I420Frame, MouthAnimation, Point } from '../actors/render/types.ts';
import { makeClipBundle } from './helpers/clip-bundle.ts';
import { request } from './render.fixtures.ts';

const SIZE = 256;
const SKIN = { y: 150, u: 110, v: 150 };
/** The harvested clip was lit this much brighter (luma levels) than the loop frame. */
const CLIP_BRIGHTER = 25;
/** The mark every harvested cell carries: a dark bar across the mouth, this long (mouth widths), 6 cell px tall. */
const BAR_LENGTH = 0.6;

function skinFrame(): I420Frame {
  const data = new Uint8Array(i420Size(SIZE, SIZE));
  data.fill(SKIN.y, 0, SIZE * SIZE);
  data.fill(SKIN.u, SIZE * SIZE, SIZE * SIZE * 1.25);
  data.fill(SKIN.v, SIZE * SIZE * 1.25);
  return { width: SIZE, height: SIZE, data };
}

/** A face whose mouth is `width` px wide at `centre`, rolled by `roll` radians (eyes and lips alike). */
function faceAt(centre: Point, width: number, roll: number): MouthAnimation {
  const at = (u: number, v: number): Point => ({
    x: centre.x + u * Math.cos(roll) - v * Math.sin(roll),
    y: centre.y + u * Math.sin(roll) + v * Math.cos(roll),
  });
  const ring = (rx: number, ry: number, count: number) =>
    Array.from({ length: count }, (_, i) =>
      at(-rx * Math.cos((i / count) * 2 * Math.PI), -ry * Math.sin((i / count) * 2 * Math.PI)),
    );
  return {
    face_box: { x: centre.x - width, y: centre.y - 2 * width, width: 2 * width, height: 2.6 * width },
    mouth_center: centre,
    mouth_width: width,
    outer_lip: ring(width / 2, width * 0.18, 12),
    inner_lip: ring(width * 0.4, width * 0.02, 8),
    left_eye: at(-0.55 * width, -1.1 * width),
    right_eye: at(0.55 * width, -1.1 * width),
    confidence: 0.9,
    detector: 'synthetic',
  };
}

/** Harvest files of `openings`, every cell the same: brighter skin with the dark bar across its mouth. */
async function harvestOf(openings: number[]): Promise<{ atlasPng: Buffer; index: MouthSampleIndex }> {
  const columns = openings.length;
  const width = columns * MOUTH_CELL_WIDTH;
  const rgba = new Uint8Array(width * MOUTH_CELL_HEIGHT * 4);
  // Skin at SKIN.y + CLIP_BRIGHTER luma (grey-ish RGB with the same luma is enough: chroma is matched the same way).
  const skin = Math.round((SKIN.y + CLIP_BRIGHTER - 16) / 0.8588);
  for (let y = 0; y < MOUTH_CELL_HEIGHT; y++) {
    for (let x = 0; x < width; x++) {
      const cx = x % MOUTH_CELL_WIDTH;
      const inBar =
        Math.abs(cx - MOUTH_CELL_CENTER.x) <= (BAR_LENGTH / 2) * MOUTH_SAMPLE_WIDTH_PX &&
        Math.abs(y - MOUTH_CELL_CENTER.y) <= 3;
      rgba.fill(inBar ? 20 : skin, (y * width + x) * 4, (y * width + x) * 4 + 3);
      rgba[(y * width + x) * 4 + 3] = 255;
    }
  }
  const atlasPng = await sharp(rgba, { raw: { width, height: MOUTH_CELL_HEIGHT, channels: 4 } })
    .png()
    .toBuffer();
  const index: MouthSampleIndex = {
    version: 1,
    cell: {
      width: MOUTH_CELL_WIDTH,
      height: MOUTH_CELL_HEIGHT,
      center: MOUTH_CELL_CENTER,
      mouth_width: MOUTH_SAMPLE_WIDTH_PX,
    },
    columns,
    rest_gap: 0.04,
    samples: openings.map((open, cell) => ({ open, wide: 0, round: 0, cell, frame: cell })),
  };
  return { atlasPng, index };
}

async function mouthsOf(openings: number[]): Promise<HarvestedMouths | null> {
  const { atlasPng, index } = await harvestOf(openings);
  return HarvestedMouths.prepare({ atlasPng, indexJson: Buffer.from(JSON.stringify(index)) });
}

/** Luma pixels `frame` changed from `source`, and how many of them lie outside `claim` (what the renderer says it changed). */
function changedAgainst(source: I420Frame, frame: I420Frame, claim: Uint8Array): { changed: number; outside: number } {
  let changed = 0;
  let outside = 0;
  for (let i = 0; i < SIZE * SIZE; i++) {
    if (frame.data[i] === source.data[i]) continue;
    changed++;
    if (!claim[i]) outside++;
  }
  return { changed, outside };
}

/** The dark pixels' centroid, principal direction (radians) and extent along it. */
function darkShape(frame: I420Frame): { centre: Point; angle: number; length: number; count: number } {
  const points: Point[] = [];
  for (let y = 0; y < SIZE; y++)
    for (let x = 0; x < SIZE; x++) if (frame.data[y * SIZE + x] < 80) points.push({ x, y });
  const cx = points.reduce((s, p) => s + p.x, 0) / points.length;
  const cy = points.reduce((s, p) => s + p.y, 0) / points.length;
  let sxx = 0,
    syy = 0,
    sxy = 0;
  for (const p of points) {
    sxx += (p.x - cx) ** 2;
    syy += (p.y - cy) ** 2;
    sxy += (p.x - cx) * (p.y - cy);
  }
  const angle = 0.5 * Math.atan2(2 * sxy, sxx - syy);
  const along = points.map((p) => (p.x - cx) * Math.cos(angle) + (p.y - cy) * Math.sin(angle));
  return { centre: { x: cx, y: cy }, angle, length: Math.max(...along) - Math.min(...along) + 1, count: points.length };
}

describe('a harvested mouth laid on a clip avatar’s loop frame', () => {
  it('is aligned to the frame’s own mouth by a similarity transform: its centre, width and roll', async () => {
    const mouths = (await mouthsOf([0, 0.25, 0.5, 1]))!;
    expect(mouths).not.toBeNull();
    for (const { centre, width, roll } of [
      { centre: { x: 128, y: 140 }, width: 60, roll: 0 },
      { centre: { x: 120.5, y: 131 }, width: 90, roll: 0.25 },
      { centre: { x: 136, y: 150 }, width: 45, roll: -0.15 },
    ]) {
      const source = skinFrame();
      const frame = skinFrame();
      mouths.lay(frame, source, { open: 0, wide: 0, round: 0 }, faceAt(centre, width, roll));
      const bar = darkShape(frame);
      expect(bar.count).toBeGreaterThan(20);
      expect(Math.abs(bar.centre.x - centre.x)).toBeLessThan(1);
      expect(Math.abs(bar.centre.y - centre.y)).toBeLessThan(1);
      expect(Math.abs(bar.angle - roll)).toBeLessThan(0.03);
      expect(Math.abs(bar.length - BAR_LENGTH * width)).toBeLessThan(3);
    }
  });

  it('takes the frame’s skin colour (the clip was lit brighter) and leaves everything beyond the skin around the lips untouched', async () => {
    const mouths = (await mouthsOf([0, 0.25, 0.5, 1]))!;
    const face = faceAt({ x: 128, y: 140 }, 60, 0.1);
    const source = skinFrame();
    const frame = skinFrame();
    mouths.lay(frame, source, { open: 0, wide: 0, round: 0 }, face);
    let changed = 0;
    let worstSkin = 0;
    const { mouth_center: c, mouth_width: mw } = face;
    for (let y = 0; y < SIZE; y++) {
      for (let x = 0; x < SIZE; x++) {
        const u = (x - c.x) * Math.cos(0.1) + (y - c.y) * Math.sin(0.1);
        const v = -(x - c.x) * Math.sin(0.1) + (y - c.y) * Math.cos(0.1);
        const value = frame.data[y * SIZE + x];
        // Skin anywhere away from the bar's edge: within a level of the frame's own, not the clip's brighter light.
        if (Math.abs(u) > (BAR_LENGTH / 2) * mw + 3 || Math.abs(v) > 6)
          worstSkin = Math.max(worstSkin, Math.abs(value - SKIN.y));
        if (value !== SKIN.y) {
          changed++;
          // Nothing changes beyond the lips' contour grown by margin and feather (0.27 mouth widths).
          expect(Math.abs(u)).toBeLessThan(0.5 * mw + 0.27 * mw + 1);
          expect(Math.abs(v)).toBeLessThan(0.18 * mw + 0.27 * mw + 1);
        }
      }
    }
    expect(worstSkin).toBeLessThanOrEqual(1);
    expect(changed).toBeLessThan(SIZE * SIZE * 0.1);
    // Chroma: matched as well.
    const p = frame.data.subarray(SIZE * SIZE, SIZE * SIZE * 1.25);
    expect(Math.max(...p) - Math.min(...p)).toBeLessThanOrEqual(1);
  });

  it('says what it changed: every pixel the laid mouth and its warp change lies in its claim', async () => {
    const mouths = (await mouthsOf([0, 0.25, 0.5, 1]))!;
    const face = faceAt({ x: 128, y: 120 }, 60, 0.1);
    // Textured skin, so the warp to the sample's opening changes what it moves.
    const source = skinFrame();
    for (let i = 0; i < SIZE * SIZE; i++) source.data[i] = SKIN.y + (((i % SIZE) + Math.floor(i / SIZE)) % 7);
    const frame = { ...source, data: source.data.slice() };
    const pose = { open: 1, wide: 0, round: 0 };
    mouths.lay(frame, source, pose, face);
    const { changed, outside } = changedAgainst(source, frame, mouths.claimOf(source, pose, face));
    expect(changed).toBeGreaterThan(0);
    expect(outside).toBe(0);
  });

  it('is not laid when the harvest shows too few openings: the renderer warps the loop frame along its own lips, as for a clip without mouths', async () => {
    expect(await mouthsOf([0, 0.5, 1])).toBeNull();
    const thin = await harvestOf([0, 0.5, 1]);
    const rich = await harvestOf([0, 0.25, 0.5, 0.75, 1]);
    const withThin = await makeClipBundle({ mouths: thin });
    const withRich = await makeClipBundle({ mouths: rich });
    const without = await makeClipBundle();
    try {
      const renderers = await Promise.all(
        [withThin, withRich, without].map(async ({ source }) => {
          const renderer = new WarpRenderer();
          await renderer.prepare(source);
          return renderer;
        }),
      );
      const [thinRenderer, richRenderer, warpRenderer] = renderers;
      for (const frameIdx of [0, 5]) {
        const speaking = request(frameIdx, { mouth: { open: 0.7, wide: 0, round: 0 }, level: 0.5, speaking: true });
        const warped = warpRenderer.render(speaking);
        expect(Buffer.compare(thinRenderer.render(speaking).data, warped.data)).toBe(0);
        expect(Buffer.compare(richRenderer.render(speaking).data, warped.data)).not.toBe(0);
        // And the warp did open the mouth.
        expect(Buffer.compare(warped.data, warpRenderer.render(request(frameIdx)).data)).not.toBe(0);
      }
    } finally {
      for (const { dir } of [withThin, withRich, without]) rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('the warp of a loop frame along its own lips', () => {
  const centre = { x: 128, y: 110 };
  const mw = 50;
  /** Skin with texture everywhere (so any displacement shows) over a chin shaded into the neck across `blur` px. */
  const chinFrame = (blur: number) => {
    const source = skinFrame();
    const chin = centre.y + 1.1 * mw;
    for (let y = 0; y < SIZE; y++)
      for (let x = 0; x < SIZE; x++)
        source.data[y * SIZE + x] = 160 - 70 * Math.min(1, Math.max(0, (y - chin) / blur + 0.5)) + ((x + y) % 7);
    const frame = { ...source, data: source.data.slice() };
    warpLoopFrame(frame, source, faceAt(centre, mw, 0.05), { open: 1, wide: 0, round: 0 });
    return { source, frame };
  };
  /** The first row under the opening where the neck's shade begins, in column x. */
  const edgeRow = (x: number, plane: Uint8Array) => {
    for (let y = centre.y + 0.7 * mw; y < SIZE; y++) if (plane[y * SIZE + x] < 125) return y;
    return -1;
  };

  it('changes nothing at the edge of the region it warps (no step where it ends) and moves the chin down with the opening', () => {
    const { source, frame } = chinFrame(12);
    // The region's rim (2 px inside its box) is the source exactly.
    let rimChanged = 0;
    for (let y = 0; y < SIZE; y++) {
      for (let x = 0; x < SIZE; x++) {
        const u = (x - centre.x) / mw;
        const v = (y - centre.y) / mw;
        const nearRim =
          (Math.abs(u) > 1.3 && Math.abs(u) < 1.45 && v > -0.8 && v < 1.8) ||
          (v > -0.85 && v < -0.7 && Math.abs(u) < 1.4) ||
          (v > 1.7 && v < 1.85 && Math.abs(u) < 1.4);
        if (nearRim && frame.data[y * SIZE + x] !== source.data[y * SIZE + x]) rimChanged++;
      }
    }
    expect(rimChanged).toBe(0);
    // The chin's shade under the mouth (searched below the opening) moved down with the jaw, and not beside the face.
    expect(edgeRow(centre.x, frame.data) - edgeRow(centre.x, source.data)).toBeGreaterThan(0.15 * mw);
    expect(edgeRow(centre.x + 1.5 * mw, frame.data)).toBe(edgeRow(centre.x + 1.5 * mw, source.data));
  });

  it('says what it changed: every pixel it changes lies in its mask, which goes on below the chin where the drop fades out', () => {
    const { source, frame } = chinFrame(12);
    const pose = { open: 1, wide: 0, round: 0 };
    const mask = warpMaskOf(source, faceAt(centre, mw, 0.05), pose)!;
    const { changed, outside } = changedAgainst(source, frame, mask);
    expect(changed).toBeGreaterThan(0);
    expect(outside).toBe(0);
    // Under the mouth, the mask reaches past the chin's shaded edge (moved by the drop) into the neck below it.
    const masked = (y: number) => mask[y * SIZE + centre.x] === 1;
    expect(masked(edgeRow(centre.x, frame.data) + 4)).toBe(true);
    expect(warpMaskOf(source, faceAt(centre, mw, 0.05), { open: 0, wide: 0, round: 0 })).toBeNull();
  });

  it('leaves a hard edge below the mouth (a collar under the chin) and all beyond it where they are: moved, it was a seam', () => {
    const { source, frame } = chinFrame(1);
    const chin = Math.round(centre.y + 1.1 * mw);
    let changed = 0;
    // The edge's own rows and everything below them (the skin above it takes up the jaw's drop).
    for (let y = chin - 1; y < SIZE; y++)
      for (let x = 0; x < SIZE; x++) if (frame.data[y * SIZE + x] !== source.data[y * SIZE + x]) changed++;
    expect(changed).toBe(0);
    // The mouth still opened above it.
    expect(Buffer.compare(frame.data, source.data)).not.toBe(0);
  });
});
