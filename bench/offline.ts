import { json, post, startTestApp, type TestApp } from '../test/helpers/app.ts';
import { RENDERABLE_AVATARS } from '../src/models.ts';
import type { ModelType } from '../actors/render/types.ts';
import { round } from './stats.ts';

const BENCH_MODELS: ModelType[] = ['mock', 'lipsync', 'rt', 'rt_head'];
/** Seconds of speech per run: long enough that start-up (renderer open, ffmpeg spawn) is a small share. */
const SPEECH_SECONDS = 8;
const SAMPLE_RATE = 16_000;
const POLL_MS = 20;
/** A run slower than this is reported as failed rather than hanging the bench. */
const RUN_TIMEOUT_MS = 120_000;

/** Speech-like audio: a voiced buzz with syllable-rate amplitude modulation and short pauses. */
function speechLikePcmBase64(seconds: number): string {
  const pcm = new Int16Array(seconds * SAMPLE_RATE);
  for (let i = 0; i < pcm.length; i++) {
    const t = i / SAMPLE_RATE;
    const syllable = Math.max(0, Math.sin(2 * Math.PI * 4 * t));
    const pause = Math.floor(t / 1.5) % 3 === 2 && t % 1.5 < 0.3 ? 0 : 1;
    const buzz =
      Math.sin(2 * Math.PI * 140 * t) + 0.5 * Math.sin(2 * Math.PI * 700 * t) + 0.3 * Math.sin(2 * Math.PI * 1200 * t);
    pcm[i] = Math.round(6000 * syllable * pause * buzz);
  }
  return Buffer.from(pcm.buffer).toString('base64');
}

/**
 * Offline rendering speed per renderer, as a multiple of real time (video seconds per wall second, from
 * submission to `complete`, so it includes TTS-free input decoding, rendering, encoding and muxing).
 * Models without a suitable avatar in the repository's catalog are reported as NaN.
 */
export async function benchOffline(existing?: TestApp): Promise<Record<string, number>> {
  const app = existing ?? (await startTestApp());
  const results: Record<string, number> = {};
  try {
    const avatars: Array<{ id: string; model_type: ModelType }> = await json(await fetch(`${app.baseUrl}/avatars`));
    const audio = speechLikePcmBase64(SPEECH_SECONDS);
    // One uncounted 1 s job first: the service's first offline job pays for the first ffmpeg start and cold
    // worker code, which made whichever model ran first (mock) look 30 % slower than when it runs later.
    await warmUp(app.baseUrl, avatars, speechLikePcmBase64(1));
    for (const model of BENCH_MODELS) {
      const key = `offline_${model}_x_realtime`;
      const avatar =
        avatars.find((a) => a.model_type === model) ??
        avatars.find((a) => RENDERABLE_AVATARS[model].includes(a.model_type));
      if (!avatar) {
        results[key] = NaN;
        continue;
      }
      const created = await post(app.baseUrl, '/sessions', { avatar_id: avatar.id, model });
      if (created.status !== 200) {
        results[key] = NaN;
        continue;
      }
      const { session_id } = await json(created);
      const started = performance.now();
      const { job_id } = await json(
        await post(app.baseUrl, `/sessions/${session_id}/rt-offline-bundle`, {
          segments: [{ audio_base64: audio, pause_after_ms: 0 }],
        }),
      );
      let status = 'pending';
      while ((status === 'pending' || status === 'running') && performance.now() - started < RUN_TIMEOUT_MS) {
        await new Promise((resolve) => setTimeout(resolve, POLL_MS));
        status = (await json(await fetch(`${app.baseUrl}/sessions/${session_id}/rt-offline-bundle/${job_id}`))).status;
      }
      const wallSeconds = (performance.now() - started) / 1000;
      results[key] = status === 'complete' ? round(SPEECH_SECONDS / wallSeconds, 2) : NaN;
      await fetch(`${app.baseUrl}/sessions/${session_id}`, { method: 'DELETE' });
    }
  } finally {
    if (!existing) await app.close();
  }
  return results;
}

async function warmUp(
  baseUrl: string,
  avatars: Array<{ id: string; model_type: ModelType }>,
  audio: string,
): Promise<void> {
  const avatar = avatars.find((a) => a.model_type === 'rt') ?? avatars[0];
  if (!avatar) return;
  const created = await post(baseUrl, '/sessions', { avatar_id: avatar.id, model: avatar.model_type });
  if (created.status !== 200) return;
  const { session_id } = await json(created);
  const { job_id } = await json(
    await post(baseUrl, `/sessions/${session_id}/rt-offline-bundle`, {
      segments: [{ audio_base64: audio, pause_after_ms: 0 }],
    }),
  );
  const started = performance.now();
  let status = 'pending';
  while ((status === 'pending' || status === 'running') && performance.now() - started < RUN_TIMEOUT_MS) {
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
    status = (await json(await fetch(`${baseUrl}/sessions/${session_id}/rt-offline-bundle/${job_id}`))).status;
  }
  await fetch(`${baseUrl}/sessions/${session_id}`, { method: 'DELETE' });
}

if (import.meta.url === `file://${process.argv[1]}`) {
  console.log(JSON.stringify(await benchOffline(), null, 2));
}
