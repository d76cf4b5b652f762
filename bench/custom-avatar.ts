import fs from 'node:fs/promises';
import { closeFaceDetector } from '../actors/faces/detector.ts';
import { startTestApp, type TestApp } from '../test/helpers/app.ts';
import { round } from './stats.ts';

import { PORTRAIT_FIXTURE as FIXTURE } from '../test/helpers/fixtures.ts';
/** Warm runs averaged; each costs ~1 s on the 2-core target, so a handful gives a stable figure. */
const WARM_RUNS = 3;

async function createOnce(app: TestApp, image: Buffer, name: string): Promise<number> {
  const body = new FormData();
  body.append('name', name);
  body.append('base_avatar_id', 'astronaut');
  body.append('image', new Blob([new Uint8Array(image)], { type: 'image/png' }), 'portrait.png');
  const started = performance.now();
  const res = await fetch(`${app.baseUrl}/avatars/custom`, { method: 'POST', body });
  const elapsed = performance.now() - started;
  if (res.status !== 200) throw new Error(`POST /avatars/custom answered ${res.status}`);
  const { id } = (await res.json()) as { id: string };
  await fetch(`${app.baseUrl}/avatars/${id}`, { method: 'DELETE' });
  return elapsed;
}

/**
 * Wall time of `POST /avatars/custom` with the 512×512 astronaut portrait: cold (detector thread,
 * wasm backend and model weights loaded on the way) and warm (mean of the next runs).
 */
export async function benchCustomAvatar(): Promise<Record<string, number>> {
  await closeFaceDetector();
  const app = await startTestApp();
  try {
    const image = await fs.readFile(FIXTURE);
    const cold = await createOnce(app, image, 'bench cold');
    let warm = 0;
    for (let i = 0; i < WARM_RUNS; i++) warm += await createOnce(app, image, `bench warm ${i}`);
    return { custom_avatar_cold_ms: round(cold), custom_avatar_warm_ms: round(warm / WARM_RUNS) };
  } finally {
    await app.close();
    await closeFaceDetector();
  }
}

if (process.argv[1]?.endsWith('custom-avatar.ts')) console.log(await benchCustomAvatar());
