import fs from 'node:fs/promises';
import path from 'node:path';
import { createRenderer } from '../actors/render/renderers/index.ts';
import type { AvatarManifest, ModelType } from '../actors/render/types.ts';
import { REPO_AVATARS } from '../test/helpers/app.ts';
import { round } from './stats.ts';

const FRAMES = 200;

/**
 * A photo's speaking frame with the request's prosody set, as live speech sends it: the head bobs and tilts
 * (`photo-head.ts`), which the plain rows above, without prosody, never ask for.
 */
function speakingPhotoMs(renderer: ReturnType<typeof createRenderer>): number {
  const request = (i: number) => ({
    frameIdx: i,
    ptsMs: i * 40,
    mouth: { open: Math.abs(Math.sin(i / 3)), wide: (i % 5) / 4, round: (i % 3) / 2 },
    level: 0.5,
    speaking: true,
    prosody: { fast: 0.5 + 0.4 * Math.sin(i / 5), slow: 0.6 },
  });
  for (let i = 0; i < 20; i++) renderer.render(request(i));
  const start = performance.now();
  for (let i = 0; i < FRAMES; i++) renderer.render(request(i));
  return round((performance.now() - start) / FRAMES, 2);
}

/** Milliseconds per frame for each renderer, rendered inline (one core), on the built-in avatars. */
export async function benchRenderers(): Promise<Record<string, number>> {
  const pairs: Array<[ModelType, string]> = [
    ['mock', 'demo-rt'],
    ['lipsync', 'astronaut'],
    ['rt', 'demo-rt'],
    ['rt_head', 'demo-rt-head'],
  ];
  const out: Record<string, number> = {};
  for (const [model, avatarId] of pairs) {
    const dir = path.join(REPO_AVATARS, avatarId);
    let manifest: AvatarManifest;
    try {
      manifest = JSON.parse(await fs.readFile(path.join(dir, 'manifest.json'), 'utf8'));
    } catch {
      out[`render_${model}_ms_per_frame`] = NaN;
      continue;
    }
    const renderer = createRenderer(model);
    await renderer.prepare({ id: avatarId, dir, manifest });
    for (let i = 0; i < 20; i++)
      renderer.render({
        frameIdx: i,
        ptsMs: i * 40,
        mouth: { open: (i % 8) / 7, wide: 0.3, round: 0.1 },
        level: 0.4,
        speaking: true,
      });
    const start = performance.now();
    for (let i = 0; i < FRAMES; i++) {
      renderer.render({
        frameIdx: i,
        ptsMs: i * 40,
        mouth: { open: Math.abs(Math.sin(i / 3)), wide: (i % 5) / 4, round: (i % 3) / 2 },
        level: 0.5,
        speaking: i % 10 !== 0,
      });
    }
    out[`render_${model}_ms_per_frame`] = round((performance.now() - start) / FRAMES, 2);
    out[`render_${model}_size`] = manifest.width;
    if (model === 'lipsync') out.render_lipsync_speaking_ms_per_frame = speakingPhotoMs(renderer);
  }
  return out;
}
