import fs from 'node:fs/promises';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { RenderPool } from '../actors/render/pool.ts';
import type { AvatarManifest } from '../actors/render/types.ts';
import { REPO_AVATARS, tempDir } from './helpers/app.ts';

describe('render pool and deleted bundles', () => {
  const pool = new RenderPool({ threads: 2 });
  afterAll(() => pool.close());

  it('keeps rendering a session whose avatar files were deleted, on every worker', async () => {
    const dir = path.join(await tempDir('deleted-avatar-'), 'astronaut');
    await fs.cp(path.join(REPO_AVATARS, 'astronaut'), dir, { recursive: true });
    const manifest: AvatarManifest = JSON.parse(await fs.readFile(path.join(dir, 'manifest.json'), 'utf8'));
    const handle = await pool.open({ id: 'astronaut-copy', dir, manifest }, 'lipsync');
    await fs.rm(dir, { recursive: true });
    // Large batches are spread over both threads, so the second worker prepares after the deletion.
    for (let round = 0; round < 4; round++) {
      const requests = Array.from({ length: 16 }, (_, i) => ({
        frameIdx: round * 16 + i,
        ptsMs: (round * 16 + i) * 40,
        mouth: { open: (i % 4) / 3, wide: 0, round: 0 },
        level: 0.5,
        speaking: true,
      }));
      const frames = await handle.render(requests);
      expect(frames).toHaveLength(16);
      expect(frames.every((f) => f.width === 512 && f.data.length === (512 * 512 * 3) / 2)).toBe(true);
    }
    expect(pool.workers.length).toBe(2);
    handle.close();
  });
});
