/**
 * Hostile load: what a few small, nasty requests cost everyone else. The service runs as its own process with
 * one live `rt` session (a wrtc viewer in this process); while each attack below runs, the step reads the
 * event loop's answer time (`GET /healthz` every 50 ms, p99) and the live session's first audio
 * (`first_audio_queued_ms` of short speak turns, from `GET /sessions/{id}/metrics`), beside the same figures
 * with no attack, in one run. The attack runs in a process of its own (`hostile-attacker.ts`), so sending it
 * does not delay the probes:
 *
 * - `mp3`: an 8 kb/s MP3 of an hour of audio (~3.6 MB) posted to another session's speak_audio, 2 at a time;
 * - `png`: a PNG of 1×49,000,000 pixels (~95 KB) posted to POST /avatars/custom, 4 at a time;
 * - `preview`: 20 concurrent 1000-character POST /tts/preview calls, over and over.
 *
 *   npm run bench -- hostile
 */
import { fork } from 'node:child_process';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type { AttackName, AttackOrder } from './hostile-attacker.ts';
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
    const turn = (await getJson<TurnFigures>(baseUrl, `/sessions/${sessionId}/metrics`)).turns.find(
      (t) => t.turn_id === turnId,
    );
    firstAudio = turn?.first_audio_queued_ms ?? null;
    if (turn && turn.outcome !== 'running') break;
    await sleep(50);
  }
  // The next turn starts from idle.
  await fetch(`${baseUrl}/sessions/${sessionId}/interrupt`, { method: 'POST' }).then((r) => r.text());
  return firstAudio ?? TURN_WAIT_MS;
}

/** The attack, forked; `stop()` ends it and resolves to what its requests were answered (status → count). */
function startAttack(order: AttackOrder): { stop(): Promise<Record<string, number>> } {
  const child = fork(path.join(import.meta.dirname, 'hostile-attacker.ts'), [], {
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const result = new Promise<Record<string, number>>((resolve, reject) => {
    child.once('message', (message: { answers?: Record<string, number>; error?: string }) =>
      message.answers ? resolve(message.answers) : reject(new Error(`attacker failed: ${message.error}`)),
    );
    child.once('exit', (code) => reject(new Error(`attacker exited (${code}) without answering`)));
  });
  child.send(order);
  return {
    stop: () => {
      child.send('stop');
      return result;
    },
  };
}

async function phase(baseUrl: string, sessionId: string, attack?: AttackOrder): Promise<PhaseResult> {
  const attacking = attack ? startAttack(attack) : undefined;
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
  const answers = await attacking?.stop();
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

export async function benchHostile(): Promise<Record<string, unknown>> {
  const [mp3, png] = await Promise.all([
    lowBitrateMp3(MP3_SECONDS),
    Promise.resolve(blackPng(PNG_SHAPE.width, PNG_SHAPE.height)),
  ]);
  const inputs = await fs.mkdtemp(path.join(os.tmpdir(), 'bench-hostile-'));
  const [mp3File, pngFile] = [path.join(inputs, 'long.mp3'), path.join(inputs, 'tall.png')];
  await Promise.all([fs.writeFile(mp3File, mp3), fs.writeFile(pngFile, png)]);
  const service = await startBenchService();
  const live = new SessionLoad(service.baseUrl, service.pid);
  const target = new SessionLoad(service.baseUrl, service.pid);
  try {
    await live.open('rt', 1);
    // The attacker's own session, started and watched, so its speak_audio is admitted.
    await target.open('rt', 1);
    const liveId = live.sessions[0].id;
    const targetId = target.sessions[0].id;
    const attacks: AttackName[] = ['mp3', 'png', 'preview'];
    const order = (name: AttackName): AttackOrder => ({
      name,
      baseUrl: service.baseUrl,
      targetSessionId: targetId,
      mp3File,
      pngFile,
      previewText: PREVIEW_TEXT,
    });
    const out: Record<string, unknown> = {
      phase_s: PHASE_S,
      inputs: {
        mp3_bytes: mp3.length,
        mp3_seconds: MP3_SECONDS,
        png_bytes: png.length,
        png_shape: `${PNG_SHAPE.width}x${PNG_SHAPE.height}`,
      },
    };
    out.unloaded = await phase(service.baseUrl, liveId);
    for (const name of attacks) {
      out[name] = await phase(service.baseUrl, liveId, order(name));
      console.log(
        `  ${name}: healthz p99 ${(out[name] as PhaseResult).healthz_p99_ms} ms, first audio p50 ${(out[name] as PhaseResult).first_audio_ms_p50} ms`,
      );
    }
    const unloaded = out.unloaded as PhaseResult;
    const preview = out.preview as PhaseResult;
    out.preview_first_audio_ratio =
      unloaded.first_audio_ms_p50 && preview.first_audio_ms_p50 !== null
        ? round(preview.first_audio_ms_p50 / unloaded.first_audio_ms_p50, 2)
        : null;
    out.healthz_p99_worst_ms = Math.max(...attacks.map((name) => (out[name] as PhaseResult).healthz_p99_ms));
    out.load_average = loadAverage();
    return out;
  } finally {
    await live.close();
    await target.close();
    await service.stop();
    await fs.rm(inputs, { recursive: true, force: true });
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  console.log(JSON.stringify(await benchHostile(), null, 2));
  process.exit(0);
}
