/**
 * Hostile load: what a few small, nasty requests cost everyone else. The service runs as its own process with
 * one live `rt` session (a wrtc viewer in this process); while each attack below runs, the step reads the
 * event loop's answer time (`GET /healthz` every 50 ms, p99) and the live session's first audio
 * (`first_audio_queued_ms` of short speak turns, from `GET /sessions/{id}/metrics`), beside the same figures
 * with no attack, in one run:
 *
 * - `mp3`: an 8 kb/s MP3 of an hour of audio (~3.6 MB) posted to another session's speak_audio, 2 at a time;
 * - `png`: a PNG of 1×49,000,000 pixels (~95 KB) posted to POST /avatars/custom, 4 at a time;
 * - `preview`: 20 concurrent 1000-character POST /tts/preview calls, over and over.
 *
 *   npm run bench -- hostile
 */
import { startBenchService } from './service.ts';
import { SessionLoad, getJson } from './session-load.ts';
import { lowBitrateMp3 } from './hostile-inputs.ts';
import { blackPng } from '../test/helpers/hostile-images.ts';
import { loadAverage } from './proc.ts';
import { percentile, round } from './stats.ts';

/** How long each phase lasts: long enough for several turns and ~100 probes. */
const PHASE_S = Number(process.env.BENCH_HOSTILE_PHASE_S ?? 12);
const PROBE_INTERVAL_MS = 50;
/** A short sentence: its first audio is what a user waits for. */
const TURN_TEXT = 'Hello, I am still here.';
/** Past this a turn's first audio counts as never (the figure is then the bound). */
const TURN_WAIT_MS = 30_000;
const MP3_SECONDS = 3_600;
const PNG_SHAPE = { width: 1, height: 49_000_000 };
const PREVIEW_TEXT = 'The quick brown fox jumps over the lazy dog. '.repeat(23).slice(0, 1000);

interface Attack {
  name: string;
  workers: number;
  request(signal: AbortSignal): Promise<Response>;
}

interface PhaseResult {
  healthz_p50_ms: number;
  healthz_p99_ms: number;
  healthz_max_ms: number;
  probes: number;
  first_audio_ms_p50: number | null;
  first_audio_ms_max: number | null;
  turns: number;
  /** What the attack's requests were answered, status → count ('error' for network errors and aborts) */
  attack_answers?: Record<string, number>;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function probeHealthz(baseUrl: string, until: number): Promise<number[]> {
  const times: number[] = [];
  while (performance.now() < until) {
    const started = performance.now();
    try {
      await (await fetch(`${baseUrl}/healthz`, { signal: AbortSignal.timeout(TURN_WAIT_MS) })).text();
    } catch {
      // A probe that times out counts at the bound.
    }
    times.push(performance.now() - started);
    await sleep(PROBE_INTERVAL_MS);
  }
  return times;
}

interface TurnFigures {
  turns: Array<{ turn_id: string; first_audio_queued_ms: number | null; outcome: string }>;
}

/** One short turn on the live session; its first audio as the session measured it. */
async function firstAudioOfOneTurn(baseUrl: string, sessionId: string): Promise<number> {
  const res = await fetch(`${baseUrl}/sessions/${sessionId}/speak`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ text: TURN_TEXT }),
    signal: AbortSignal.timeout(TURN_WAIT_MS),
  });
  await res.text();
  const turnId = res.headers.get('x-turn-id');
  if (res.status !== 200 || !turnId) throw new Error(`speak answered ${res.status}`);
  const deadline = performance.now() + TURN_WAIT_MS;
  let firstAudio: number | null = null;
  while (performance.now() < deadline) {
    const turn = (await getJson<TurnFigures>(baseUrl, `/sessions/${sessionId}/metrics`)).turns.find((t) => t.turn_id === turnId);
    firstAudio = turn?.first_audio_queued_ms ?? null;
    if (turn && turn.outcome !== 'running') break;
    await sleep(50);
  }
  // The next turn starts from idle.
  await fetch(`${baseUrl}/sessions/${sessionId}/interrupt`, { method: 'POST' }).then((r) => r.text());
  return firstAudio ?? TURN_WAIT_MS;
}

async function runAttack(attack: Attack, signal: AbortSignal): Promise<Record<string, number>> {
  const answers: Record<string, number> = {};
  await Promise.all(
    Array.from({ length: attack.workers }, async () => {
      while (!signal.aborted) {
        try {
          const res = await attack.request(signal);
          await res.arrayBuffer();
          answers[res.status] = (answers[res.status] ?? 0) + 1;
          // A refused request is retried after a beat, as a persistent attacker would.
          if (res.status >= 400) await sleep(100);
        } catch {
          if (signal.aborted) break;
          answers.error = (answers.error ?? 0) + 1;
          await sleep(100);
        }
      }
    }),
  );
  return answers;
}

async function phase(baseUrl: string, sessionId: string, attack?: Attack): Promise<PhaseResult> {
  const stop = new AbortController();
  const attacking = attack ? runAttack(attack, stop.signal) : Promise.resolve(undefined);
  // Let the attack get going before measuring.
  if (attack) await sleep(1_000);
  const until = performance.now() + PHASE_S * 1000;
  const probing = probeHealthz(baseUrl, until);
  const firstAudio: number[] = [];
  while (performance.now() < until) {
    try {
      firstAudio.push(await firstAudioOfOneTurn(baseUrl, sessionId));
    } catch {
      firstAudio.push(TURN_WAIT_MS);
    }
  }
  const probes = await probing;
  stop.abort();
  const answers = await attacking;
  // Whatever the attack left running in the service settles before the next phase.
  await sleep(2_000);
  return {
    healthz_p50_ms: round(percentile(probes, 50)),
    healthz_p99_ms: round(percentile(probes, 99)),
    healthz_max_ms: round(Math.max(...probes)),
    probes: probes.length,
    first_audio_ms_p50: firstAudio.length ? round(percentile(firstAudio, 50)) : null,
    first_audio_ms_max: firstAudio.length ? round(Math.max(...firstAudio)) : null,
    turns: firstAudio.length,
    ...(answers ? { attack_answers: answers } : {}),
  };
}

function multipart(field: string, file: Buffer, filename: string, type: string, fields: Record<string, string> = {}): FormData {
  const form = new FormData();
  for (const [name, value] of Object.entries(fields)) form.append(name, value);
  form.append(field, new Blob([new Uint8Array(file)], { type }), filename);
  return form;
}

export async function benchHostile(): Promise<Record<string, unknown>> {
  const [mp3, png] = await Promise.all([lowBitrateMp3(MP3_SECONDS), Promise.resolve(blackPng(PNG_SHAPE.width, PNG_SHAPE.height))]);
  const service = await startBenchService();
  const live = new SessionLoad(service.baseUrl, service.pid);
  const target = new SessionLoad(service.baseUrl, service.pid);
  try {
    await live.open('rt', 1);
    // The attacker's own session, started and watched, so its speak_audio is admitted.
    await target.open('rt', 1);
    const liveId = live.sessions[0].id;
    const targetId = target.sessions[0].id;
    const attacks: Attack[] = [
      {
        name: 'mp3',
        workers: 2,
        request: (signal) =>
          fetch(`${service.baseUrl}/sessions/${targetId}/speak_audio`, { method: 'POST', body: multipart('audio', mp3, 'long.mp3', 'audio/mpeg'), signal }),
      },
      {
        name: 'png',
        workers: 4,
        request: (signal) =>
          fetch(`${service.baseUrl}/avatars/custom`, {
            method: 'POST',
            body: multipart('image', png, 'tall.png', 'image/png', { name: 'tall', base_avatar_id: 'astronaut' }),
            signal,
          }),
      },
      {
        name: 'preview',
        workers: 20,
        request: (signal) =>
          fetch(`${service.baseUrl}/tts/preview`, {
            method: 'POST',
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify({ text: PREVIEW_TEXT }),
            signal,
          }),
      },
    ];
    const out: Record<string, unknown> = {
      phase_s: PHASE_S,
      inputs: { mp3_bytes: mp3.length, mp3_seconds: MP3_SECONDS, png_bytes: png.length, png_shape: `${PNG_SHAPE.width}x${PNG_SHAPE.height}` },
    };
    out.unloaded = await phase(service.baseUrl, liveId);
    for (const attack of attacks) {
      out[attack.name] = await phase(service.baseUrl, liveId, attack);
      console.log(`  ${attack.name}: healthz p99 ${(out[attack.name] as PhaseResult).healthz_p99_ms} ms, first audio p50 ${(out[attack.name] as PhaseResult).first_audio_ms_p50} ms`);
    }
    const unloaded = out.unloaded as PhaseResult;
    const preview = out.preview as PhaseResult;
    out.preview_first_audio_ratio =
      unloaded.first_audio_ms_p50 && preview.first_audio_ms_p50 !== null ? round(preview.first_audio_ms_p50 / unloaded.first_audio_ms_p50, 2) : null;
    out.healthz_p99_worst_ms = Math.max(...attacks.map((a) => (out[a.name] as PhaseResult).healthz_p99_ms));
    out.load_average = loadAverage();
    return out;
  } finally {
    await live.close();
    await target.close();
    await service.stop();
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  console.log(JSON.stringify(await benchHostile(), null, 2));
  process.exit(0);
}
