/**
 * Which harvested mouth a pose gets: the opening decides first. A real clip's harvest holds few samples of each
 * shape, so a pose often has to choose between the right opening in another shape and its own shape barely open.
 */
import sharp from 'sharp';
import { describe, expect, it } from 'vitest';
import {
  HarvestedMouths,
  MOUTH_CELL_CENTER,
  MOUTH_CELL_HEIGHT,
  MOUTH_CELL_WIDTH,
  MOUTH_SAMPLE_WIDTH_PX,
  type MouthSample,
  type MouthSampleIndex,
} from '../actors/render/harvested-mouths.ts';

async function mouthsWith(poses: Array<Omit<MouthSample, 'cell' | 'frame'>>): Promise<HarvestedMouths | null> {
  const columns = poses.length;
  const atlasPng = await sharp({
    create: {
      width: columns * MOUTH_CELL_WIDTH,
      height: MOUTH_CELL_HEIGHT,
      channels: 4,
      background: { r: 170, g: 90, b: 80, alpha: 1 },
    },
  })
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
    rest_gap: 0.03,
    samples: poses.map((pose, cell) => ({ ...pose, cell, frame: cell * 5 })),
  };
  return HarvestedMouths.prepare({ atlasPng, indexJson: Buffer.from(JSON.stringify(index)) });
}

async function usableMouthsWith(poses: Array<Omit<MouthSample, 'cell' | 'frame'>>): Promise<HarvestedMouths> {
  const mouths = await mouthsWith(poses);
  if (!mouths) throw new Error('the harvest was judged too thin to lay');
  return mouths;
}

describe('the harvested mouth laid for a pose', () => {
  it('is the one at the wanted opening in another shape rather than the wanted shape far too closed or open', async () => {
    const mouths = await usableMouthsWith([
      { open: 0, wide: 0, round: 0 },
      { open: 0.2, wide: 0, round: 0 },
      { open: 0.6, wide: 1, round: 0 },
      { open: 0.95, wide: 0, round: 1 },
    ]);
    expect(mouths.nearest({ open: 0.6, wide: 0, round: 0 }).pose).toEqual({ open: 0.6, wide: 1, round: 0 });
    expect(mouths.nearest({ open: 0.9, wide: 0, round: 0 }).pose).toEqual({ open: 0.95, wide: 0, round: 1 });
  });

  it('is the one of the wanted shape when openings are alike, and closed for a closed pose', async () => {
    const mouths = await usableMouthsWith([
      { open: 0, wide: 0, round: 0 },
      { open: 0.25, wide: 0, round: 0 },
      { open: 0.5, wide: 0, round: 0 },
      { open: 0.55, wide: 1, round: 0 },
      { open: 0.45, wide: 0, round: 1 },
      { open: 1, wide: 0, round: 0 },
    ]);
    expect(mouths.nearest({ open: 0.5, wide: 1, round: 0 }).pose).toEqual({ open: 0.55, wide: 1, round: 0 });
    expect(mouths.nearest({ open: 0.5, wide: 0, round: 1 }).pose).toEqual({ open: 0.45, wide: 0, round: 1 });
    expect(mouths.nearest({ open: 0.5, wide: 0, round: 0 }).pose).toEqual({ open: 0.5, wide: 0, round: 0 });
    expect(mouths.nearest({ open: 0, wide: 0, round: 0 }).pose).toEqual({ open: 0, wide: 0, round: 0 });
  });

  it('is none when the harvest shows too few openings to follow speech, or no closed mouth: the renderer warps instead', async () => {
    // Three opening steps (a clip where the person barely speaks): every vowel would get one of three mouths.
    expect(
      await mouthsWith([
        { open: 0, wide: 0, round: 0 },
        { open: 0.5, wide: 0, round: 0 },
        { open: 0.55, wide: 1, round: 0 },
        { open: 1, wide: 0, round: 0 },
      ]),
    ).toBeNull();
    // Openings enough, but never closed: silence and m/b/p would show an open mouth.
    expect(
      await mouthsWith([
        { open: 0.25, wide: 0, round: 0 },
        { open: 0.5, wide: 0, round: 0 },
        { open: 0.75, wide: 0, round: 0 },
        { open: 1, wide: 0, round: 0 },
      ]),
    ).toBeNull();
    expect(
      await mouthsWith([
        { open: 0, wide: 0, round: 0 },
        { open: 0.25, wide: 0, round: 0 },
        { open: 0.5, wide: 0, round: 0 },
        { open: 1, wide: 0, round: 0 },
      ]),
    ).not.toBeNull();
  });
});
