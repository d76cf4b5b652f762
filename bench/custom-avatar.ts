import fs from 'node:fs/promises';
import { closeFaceDetector } from '../actors/faces/detector.ts';
import { startTestApp, tempDir, type TestApp } from '../test/helpers/app.ts';
import { landscapeMp4, speakingClipMp4 } from '../test/helpers/clips.ts';
import { probeClip } from '../actors/faces/video-clip.ts';
import { round } from './stats.ts';

import { PORTRAIT_FIXTURE as FIXTURE } from '../test/helpers/fixtures.ts';
/** Warm runs averaged; each costs ~1 s on the 2-core target, so a handful gives a stable figure. */
const WARM_RUNS = 3;

/** The figure: a 10 s clip becomes an avatar in ≤ 30 s on 2 cores (3 s per clip-second). */
const BENCH_CLIP_SECONDS = 10;

/** `POST /avatars/custom` on the astronaut base with a portrait (`image`) or a clip (`video`): the new id and the wall time. */
export async function postCustomAvatar(
  baseUrl: string,
  bytes: Buffer,
  name: string,
  field: 'image' | 'video' = 'image',
): Promise<{ id: string; ms: number }> {
  const body = new FormData();
  body.append('name', name);
  body.append('base_avatar_id', 'astronaut');
  body.append(
    field,
    new Blob([new Uint8Array(bytes)], { type: field === 'image' ? 'image/png' : 'video/mp4' }),
    field === 'image' ? 'portrait.png' : 'clip.mp4',
  );
  const started = performance.now();
  const res = await fetch(`${baseUrl}/avatars/custom`, { method: 'POST', body });
  const ms = performance.now() - started;
  if (res.status !== 200) throw new Error(`POST /avatars/custom answered ${res.status}: ${await res.text()}`);
  const { id } = (await res.json()) as { id: string };
  return { id, ms };
}

async function createOnce(
  app: TestApp,
  image: Buffer,
  name: string,
  field: 'image' | 'video' = 'image',
): Promise<number> {
  const { id, ms } = await postCustomAvatar(app.baseUrl, image, name, field);
  await fetch(`${app.baseUrl}/avatars/${id}`, { method: 'DELETE' });
  return ms;
}

/**
 * Wall time of `POST /avatars/custom` with the 512×512 astronaut portrait: cold (detector thread,
 * wasm backend and model weights loaded on the way) and warm (mean of the next runs); and a video avatar's
 * creation, in seconds per clip-second, from a 10 s clip whose mouth never moves (no harvest) and from a clip of
 * the face speaking (mouths harvested).
 */
export async function benchCustomAvatar(): Promise<Record<string, number>> {
  await closeFaceDetector();
  const app = await startTestApp();
  try {
    const image = await fs.readFile(FIXTURE);
    const cold = await createOnce(app, image, 'bench cold');
    let warm = 0;
    for (let i = 0; i < WARM_RUNS; i++) warm += await createOnce(app, image, `bench warm ${i}`);
    // A video avatar from a 10 s clip animated from the same portrait (test/helpers/clips.ts), detector warm.
    const clips = await tempDir('bench-clips-');
    const clip = await fs.readFile(await landscapeMp4(clips, BENCH_CLIP_SECONDS));
    const clipMs = await createOnce(app, clip, 'bench clip', 'video');
    // A clip that really speaks (test/helpers/clips.ts: flite driving our renderer), so its mouths are harvested too.
    const speakingFile = await speakingClipMp4(clips);
    const speakingSeconds = (await probeClip(speakingFile)).durationS;
    const speakingMs = await createOnce(app, await fs.readFile(speakingFile), 'bench speaking clip', 'video');
    await fs.rm(clips, { recursive: true, force: true });
    return {
      custom_avatar_cold_ms: round(cold),
      custom_avatar_warm_ms: round(warm / WARM_RUNS),
      video_avatar_s_per_clip_s: round(clipMs / 1000 / BENCH_CLIP_SECONDS, 2),
      video_avatar_speaking_s_per_clip_s: round(speakingMs / 1000 / speakingSeconds, 2),
      video_avatar_speaking_clip_s: round(speakingSeconds, 2),
    };
  } finally {
    await app.close();
    await closeFaceDetector();
  }
}

if (process.argv[1]?.endsWith('custom-avatar.ts')) console.log(await benchCustomAvatar());
