import fs from 'node:fs/promises';
import path from 'node:path';
import sharp from 'sharp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { closeFaceDetector } from '../actors/faces/detector.ts';
import { MAX_HARVESTED_MOUTHS, MIN_HARVESTED_OPENINGS, MOUTH_ATLAS_COLUMNS } from '../actors/faces/mouth-harvest.ts';
import type { MouthSampleIndex } from '../actors/render/harvested-mouths.ts';
import { json, startTestApp, tempDir, type TestApp } from './helpers/app.ts';
import { landscapeMp4, speakingClipMp4 } from './helpers/clips.ts';

/** The speaking clip is made (flite, ~100 rendered frames) and detected on ~20 frames: 195 s seen with twice that on a core shared by four engineers (load 21). */
const CREATION_TIMEOUT_MS = 600_000;

async function createFromClip(
  baseUrl: string,
  file: string,
  name: string,
): Promise<{ id: string; manifest: { metadata: { clip: Record<string, unknown> } } }> {
  const body = new FormData();
  body.append('name', name);
  body.append('base_avatar_id', 'astronaut');
  body.append('video', new Blob([new Uint8Array(await fs.readFile(file))], { type: 'video/mp4' }), path.basename(file));
  const res = await fetch(`${baseUrl}/avatars/custom`, { method: 'POST', body });
  const summary = await json(res);
  expect(res.status, JSON.stringify(summary)).toBe(200);
  return { id: summary.id, manifest: await json(await fetch(`${baseUrl}/avatars/${summary.id}`)) };
}

describe('mouth harvesting when a clip becomes a video avatar (real app, real ffmpeg, real detector)', () => {
  let t: TestApp;
  let clips: string;

  beforeAll(async () => {
    t = await startTestApp();
    clips = await tempDir('clips-');
  }, 60_000);

  afterAll(async () => {
    await t?.close();
    await closeFaceDetector();
    if (clips) await fs.rm(clips, { recursive: true, force: true });
  });

  it(
    'a clip of the person speaking stores their mouths at several openings (mouths/ atlas and index, metadata.clip.mouths), cut at the tracked mouth',
    async () => {
      const { id, manifest } = await createFromClip(t.baseUrl, await speakingClipMp4(clips), 'Speaking Person');
      expect(manifest.metadata.clip.mouths).toEqual({
        count: expect.any(Number),
        index_file: 'mouths/index.json',
        atlas_file: 'mouths/atlas.png',
      });
      const dir = path.join(t.avatarsDir, id);
      const index: MouthSampleIndex = JSON.parse(await fs.readFile(path.join(dir, 'mouths', 'index.json'), 'utf8'));
      const { samples } = index;
      expect(samples).toHaveLength((manifest.metadata.clip.mouths as { count: number }).count);
      expect(samples.length).toBeGreaterThanOrEqual(MIN_HARVESTED_OPENINGS + 1);
      expect(samples.length).toBeLessThanOrEqual(MAX_HARVESTED_MOUTHS);
      // Openings spread from closed to the clip's widest, with several steps between.
      const openings = samples.map((s) => s.open).sort((a, b) => a - b);
      console.log(`harvested ${samples.length} mouths, openings ${openings.join(' ')}`);
      expect(openings[0]).toBeLessThan(0.15);
      expect(openings.at(-1)).toBeGreaterThan(0.85);
      expect(new Set(openings.map((o) => Math.round(o * 5))).size).toBeGreaterThanOrEqual(MIN_HARVESTED_OPENINGS + 1);
      // The atlas holds one cell per sample; a wider-open sample shows more dark mouth inside its cell's middle.
      const atlas = await sharp(path.join(dir, 'mouths', 'atlas.png'))
        .raw()
        .toBuffer({ resolveWithObject: true });
      expect(atlas.info.width).toBe(MOUTH_ATLAS_COLUMNS * index.cell.width);
      expect(atlas.info.height).toBe(Math.ceil(samples.length / MOUTH_ATLAS_COLUMNS) * index.cell.height);
      const darkInMouth = (cell: number) => {
        const left = (cell % index.columns) * index.cell.width;
        const top = Math.floor(cell / index.columns) * index.cell.height;
        let dark = 0;
        for (let y = Math.round(index.cell.center.y - 8); y < index.cell.center.y + 24; y++) {
          for (let x = Math.round(index.cell.center.x - 24); x < index.cell.center.x + 24; x++) {
            const o = ((top + y) * atlas.info.width + left + x) * atlas.info.channels;
            if (atlas.data[o] + atlas.data[o + 1] + atlas.data[o + 2] < 180) dark++;
          }
        }
        return dark;
      };
      const closed = samples.reduce((a, b) => (b.open < a.open ? b : a));
      const widest = samples.reduce((a, b) => (b.open > a.open ? b : a));
      expect(darkInMouth(widest.cell)).toBeGreaterThan(darkInMouth(closed.cell) + 100);
    },
    CREATION_TIMEOUT_MS,
  );

  it(
    'a clip whose mouth never opens harvests nothing: no mouths/ in the bundle, no metadata.clip.mouths (the renderer warps)',
    async () => {
      const { id, manifest } = await createFromClip(t.baseUrl, await landscapeMp4(clips, 2), 'Silent Person');
      expect(manifest.metadata.clip).toBeDefined();
      expect(manifest.metadata.clip.mouths).toBeUndefined();
      expect(await fs.readdir(path.join(t.avatarsDir, id))).not.toContain('mouths');
    },
    CREATION_TIMEOUT_MS,
  );
});
