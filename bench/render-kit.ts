/**
 * Render kits (issue 47): per avatar and model, the kit's build time (the first `GET /avatars/{id}/render-kit`, a
 * cold build in the kit thread) and size against its budget (photo ≤ 2 MB, a 10 s clip's ≤ 6 MB), and in headless
 * Chromium the kit's load and decode, then per frame the renderer's cost and putting its frame on screen by 2D
 * canvas (what `client/face-canvas.ts` ships) and by WebGL (`render-kit.page.ts`), medians over 100 frames.
 *
 *   npm run bench -- render_kit
 */
import fs from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';
import { chromium } from 'playwright-core';
import { closeFaceDetector } from '../actors/faces/detector.ts';
import { blinkClosure } from '../actors/render/idle-motion.ts';
import type { FrameRequest } from '../actors/render/types.ts';
import { CLIP_KIT_BUDGET_BYTES, PHOTO_KIT_BUDGET_BYTES } from '../actors/render/render-kit.ts';
import { nodeOnlyStubs } from '../src/ui/client-bundles.ts';
import { landscapeMp4 } from '../test/helpers/clips.ts';
import { startTestApp, tempDir } from '../test/helpers/app.ts';

const FRAMES = 100;
const CLIP_SECONDS = 10;

/** 4 s of a session: speech with moving mouth and prosody for 2 s, then silence (blinks, sway). */
function poses(): FrameRequest[] {
  return Array.from({ length: FRAMES }, (_, frameIdx) => {
    const speaking = frameIdx < FRAMES / 2;
    const phase = frameIdx / 3;
    return {
      frameIdx,
      ptsMs: frameIdx * 40,
      speaking,
      level: speaking ? 0.5 : 0,
      mouth: speaking
        ? { open: 0.5 + 0.5 * Math.sin(phase), wide: 0.5 + 0.5 * Math.cos(phase / 2), round: (frameIdx % 7) / 6 }
        : { open: 0, wide: 0, round: 0 },
      prosody: speaking ? { fast: 0.5 + 0.3 * Math.sin(phase), slow: 0.35 } : { fast: 0, slow: 0 },
    };
  });
}

export async function benchRenderKit(): Promise<Record<string, unknown>> {
  const t = await startTestApp();
  const clips = await tempDir('bench-kit-clips-');
  const browser = await chromium.launch({ executablePath: '/usr/bin/chromium', args: ['--no-sandbox'] });
  try {
    const form = new FormData();
    form.append('name', 'Bench clip');
    form.append('base_avatar_id', 'astronaut');
    const video = await fs.readFile(await landscapeMp4(clips, CLIP_SECONDS));
    form.append('video', new Blob([new Uint8Array(video)], { type: 'video/mp4' }), 'clip.mp4');
    const created = await fetch(`${t.baseUrl}/avatars/custom`, { method: 'POST', body: form });
    const clipId = ((await created.json()) as { id: string }).id;
    const page = (
      await build({
        entryPoints: [fileURLToPath(new URL('./render-kit.page.ts', import.meta.url))],
        bundle: true,
        format: 'esm',
        write: false,
        target: ['es2022'],
        logLevel: 'silent',
        plugins: [nodeOnlyStubs],
      })
    ).outputFiles[0]!.text;
    const rows: Record<string, unknown> = {};
    for (const [label, avatar, model, budget] of [
      ['photo', 'astronaut', 'lipsync', PHOTO_KIT_BUDGET_BYTES],
      ['clip_10s', clipId, 'lipsync', CLIP_KIT_BUDGET_BYTES],
      ['rt', 'demo-rt', 'rt', PHOTO_KIT_BUDGET_BYTES],
      ['rt_head', 'demo-rt-head', 'rt_head', PHOTO_KIT_BUDGET_BYTES],
    ] as const) {
      const started = performance.now();
      const redirect = await fetch(`${t.baseUrl}/avatars/${avatar}/render-kit?model=${model}`, { redirect: 'manual' });
      const buildMs = Math.round(performance.now() - started);
      const location = redirect.headers.get('location')!;
      const bytes = (await (await fetch(`${t.baseUrl}${location}`)).arrayBuffer()).byteLength;
      const tab = await browser.newPage();
      await tab.goto(`${t.baseUrl}/avatars`);
      const drawn = await tab.evaluate(
        async ({ page, kitUrl, poses }) => {
          const url = URL.createObjectURL(new Blob([page], { type: 'text/javascript' }));
          const load = new Function('url', 'return import(url)') as (url: string) => Promise<unknown>;
          const { measure } = (await load(url)) as typeof import('./render-kit.page.ts');
          return measure(kitUrl, poses);
        },
        { page, kitUrl: location, poses: poses() },
      );
      await tab.close();
      rows[label] = {
        build_ms: buildMs,
        kit_mb: Math.round((bytes / 1e6) * 100) / 100,
        budget_mb: Math.round((budget / 1e6) * 100) / 100,
        within_budget: bytes <= budget,
        ...drawn,
      };
    }
    // A blink lands in the silent half (the renderers' own clock): the frames measured include eyelids.
    rows.blink_frames = Array.from({ length: FRAMES }, (_, i) => i).filter((i) => blinkClosure(i, 25) > 0).length;
    return rows;
  } finally {
    await browser.close();
    await t.close();
    await closeFaceDetector();
    await fs.rm(clips, { recursive: true, force: true });
  }
}
