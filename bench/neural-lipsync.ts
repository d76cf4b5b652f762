/**
 * Neural lip-sync cost on this machine, with the tiny Wav2Lip-shaped ONNX model of the tests (its own compute is
 * a few element-wise ops, so these figures are the service's overhead; a real model adds its own run time, which
 * `run_ms_per_item` shows for whatever model is measured):
 *
 * - the shared inference pool per batch size B: frames/s with every worker busy, and the latency a batch adds
 *   (submit → last answer on an idle pool), both at S = 96 and S = 256 (the face tensor grows with S²);
 * - the per-frame pipeline: the mel window (16 kHz conversion + 16 FFT columns) and the paste-back (scaling,
 *   feathered blend, I420 of the lower half of the crop); and the whole-clip mel spectrogram the offline path
 *   computes once per job, per 200 ms of audio (best of 7 runs over 5 s: the code's cost, not the host's load);
 * - live: N `lipsync_b` sessions speaking at once against N CPU `lipsync` ones — late frames and the service's
 *   event-loop delay (`live_*` rows; `BENCH_SESSIONS`, `BENCH_LIPSYNC_WINDOW_S`).
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { InferencePool } from '../actors/inference/pool.ts';
import { LocalLipsyncModel } from '../actors/lipsync/local-model.ts';
import { composeFace, prepareFace } from '../actors/lipsync/face-crop.ts';
import { melWindowFromStream, wav2lipMelSpectrogram } from '../actors/lipsync/mel.ts';
import { streamWindowOf } from '../actors/lipsync/neural-renderer.ts';
import { tensor } from '../actors/inference/tensors.ts';
import type { AvatarSource } from '../actors/render/types.ts';
import { REPO_AVATARS } from '../test/helpers/app.ts';
import { tinyLipsyncModel, writeModelFile } from '../test/helpers/tiny-onnx.ts';
import { whiteNoise } from '../test/helpers/vad-fixture.ts';
import { round } from './stats.ts';
import { startBenchService } from './service.ts';
import { SessionLoad, warmUp } from './session-load.ts';

const BATCHES = [1, 2, 4, 8, 16];
const ROUNDS = 30;
const PIPELINE_FRAMES = 200;

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)];
}

/** `file`: a real model to measure instead of the tiny one (BENCH_LIPSYNC_MODEL); its S comes from the file. */
async function poolFigures(tinySize: number, file?: string, prefix = ''): Promise<Record<string, number>> {
  const model = file
    ? { path: file, remove: async () => undefined }
    : await writeModelFile(tinyLipsyncModel({ size: tinySize }), `tiny_${tinySize}.onnx`);
  const pool = new InferencePool({ batchWindowMs: 1 });
  const out: Record<string, number> = {};
  try {
    const local = new LocalLipsyncModel({ file: model.path, provider: 'cpu', pool: () => pool });
    const status = await local.check();
    if (status.state !== 'connected') throw new Error(status.reason);
    const size = status.signature.size;
    const { melInput, faceInput } = status.signature;
    const key = local.poolKey;
    const mel = new Float32Array(80 * 16).fill(-1);
    const face = new Float32Array(6 * size * size).fill(0.5);
    const item = () => ({
      [melInput]: tensor('float32', mel, [1, 1, 80, 16]),
      [faceInput]: tensor('float32', face, [1, 6, size, size]),
    });
    const batch = (count: number) => Promise.all(Array.from({ length: count }, () => pool.infer(key, item())));
    await pool.warmUp(key);
    for (let i = 0; i < 5; i++) await batch(4);
    for (const count of BATCHES) {
      const latencies: number[] = [];
      const runBefore = pool.stats.runMs;
      for (let r = 0; r < ROUNDS; r++) {
        const started = performance.now();
        await batch(count);
        latencies.push(performance.now() - started);
      }
      const runMs = (pool.stats.runMs - runBefore) / ROUNDS;
      // Saturated: one loop per worker, each sending its next batch when the last came back.
      const started = performance.now();
      await Promise.all(
        Array.from({ length: pool.threadCount }, async () => {
          for (let r = 0; r < ROUNDS; r++) await batch(count);
        }),
      );
      const seconds = (performance.now() - started) / 1000;
      out[`${prefix}s${size}_b${count}_frames_per_s`] = round((count * ROUNDS * pool.threadCount) / seconds, 0);
      out[`${prefix}s${size}_b${count}_latency_ms`] = round(median(latencies), 2);
      out[`${prefix}s${size}_b${count}_run_ms_per_item`] = round(runMs / count, 3);
    }
  } finally {
    await pool.close();
    await model.remove();
  }
  return out;
}

async function pipelineFigures(): Promise<Record<string, number>> {
  const dir = path.join(REPO_AVATARS, 'astronaut');
  const avatar: AvatarSource = {
    id: 'astronaut',
    dir,
    manifest: JSON.parse(readFileSync(path.join(dir, 'manifest.json'), 'utf8')),
  };
  const out: Record<string, number> = {};
  let state = 1;
  const pcm = Int16Array.from({ length: 4000 }, () => {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    return (state >> 20) - 2048;
  });
  for (const rate of [16_000, 48_000]) {
    const audio = {
      sampleRate: rate,
      pcm: rate === 16_000 ? pcm : Int16Array.from({ length: 12_000 }, (_, i) => pcm[Math.floor(i / 3)]),
      leadSamples: rate === 16_000 ? 500 : 1500,
    };
    for (let i = 0; i < 20; i++) melWindowFromStream(streamWindowOf(audio));
    const started = performance.now();
    for (let i = 0; i < PIPELINE_FRAMES; i++) melWindowFromStream(streamWindowOf(audio));
    out[`mel_window_ms_per_frame_${rate / 1000}k`] = round((performance.now() - started) / PIPELINE_FRAMES, 3);
  }
  const noise = whiteNoise(5 * 16_000, -20, 3);
  wav2lipMelSpectrogram(noise.subarray(0, 16_000));
  let best = Infinity;
  for (let run = 0; run < 7; run++) {
    const started = performance.now();
    wav2lipMelSpectrogram(noise);
    best = Math.min(best, performance.now() - started);
  }
  out.mel_spectrogram_ms_per_200ms = round(best / (5 / 0.2), 3);
  for (const size of [96, 256]) {
    const face = await prepareFace(avatar, size);
    const output = new Float32Array(3 * size * size).fill(0.6);
    for (let i = 0; i < 20; i++) composeFace(face, output);
    const started = performance.now();
    for (let i = 0; i < PIPELINE_FRAMES; i++) composeFace(face, output);
    out[`paste_back_ms_per_frame_s${size}`] = round((performance.now() - started) / PIPELINE_FRAMES, 3);
    out.crop_side_px = face.crop.side;
  }
  return out;
}

/** Sessions speaking at once in the live rows, as in `session_cpu`. */
const LIVE_SESSIONS = Number(process.env.BENCH_SESSIONS ?? 3);
const LIVE_WINDOW_S = Number(process.env.BENCH_LIPSYNC_WINDOW_S ?? 15);
const LIVE_WARMUP_S = 5;

/** `avatar_nodejs_eventloop_lag_*_seconds` from the service's Prometheus text, in ms. Reading it resets the monitor. */
async function eventLoopLag(baseUrl: string): Promise<{ p50: number; p99: number; max: number; mean: number }> {
  const text = await (await fetch(`${baseUrl}/metrics`)).text();
  const read = (name: string) => {
    const match = new RegExp(`^avatar_nodejs_eventloop_lag_${name}_seconds (\\S+)$`, 'm').exec(text);
    return match ? round(Number(match[1]) * 1000, 2) : NaN;
  };
  return { p50: read('p50'), p99: read('p99'), max: read('max'), mean: read('mean') };
}

/**
 * What the neural pipeline costs the real-time sessions: N sessions speaking continuously on a service process
 * (wrtc receivers in this one), `lipsync_b` with the tiny S = 96 model against the CPU `lipsync` renderer on the
 * same photo, each on a fresh service: late frames (the service's own count) and the service main thread's
 * event-loop delay over the window (its Prometheus monitor, 10 ms sampling).
 */
export async function liveFigures(
  variants: ReadonlyArray<'lipsync' | 'lipsync_b'> = ['lipsync', 'lipsync_b'],
): Promise<Record<string, number>> {
  const model = await writeModelFile(tinyLipsyncModel({ size: 96 }), 'tiny_live_96.onnx');
  const out: Record<string, number> = {};
  try {
    for (const variant of variants) {
      const service = await startBenchService({
        env: variant === 'lipsync_b' ? { SERVICE_LIPSYNC_B_MODEL: model.path } : {},
      });
      const load = new SessionLoad(service.baseUrl, service.pid);
      try {
        await warmUp(service.baseUrl, service.pid, variant);
        await load.open(variant, LIVE_SESSIONS);
        load.startSpeaking();
        await new Promise((r) => setTimeout(r, LIVE_WARMUP_S * 1000));
        await eventLoopLag(service.baseUrl);
        const window = await load.measure(LIVE_WINDOW_S * 1000);
        const lag = await eventLoopLag(service.baseUrl);
        const key = `live_${variant}_${LIVE_SESSIONS}`;
        out[`${key}_late_percent`] = window.late_percent;
        out[`${key}_fps_per_session`] = window.fps_per_session;
        out[`${key}_loop_delay_p50_ms`] = lag.p50;
        out[`${key}_loop_delay_p99_ms`] = lag.p99;
        out[`${key}_loop_delay_max_ms`] = lag.max;
        out[`${key}_cpu_ms_per_session_second`] = window.cpu_ms_per_session_second;
        out[`${key}_main_thread_cpu_ms_per_s`] = round(
          (window.cpu_ms_by_thread['main (JS event loop)'] ?? NaN) / window.window_s,
          0,
        );
        console.log(
          `  ${key}: ${JSON.stringify({ late: window.late_percent, fps: window.fps_per_session, lag, threads: window.cpu_ms_by_thread })}`,
        );
      } finally {
        await load.close();
        await service.stop();
      }
    }
  } finally {
    await model.remove();
  }
  return out;
}

export async function benchNeuralLipsync(): Promise<Record<string, number>> {
  const out: Record<string, number> = { ...(await pipelineFigures()) };
  Object.assign(out, await liveFigures());
  Object.assign(out, await poolFigures(96), await poolFigures(256));
  // A real model, when given: `BENCH_LIPSYNC_MODEL=<file.onnx> npm run bench -- neural_lipsync` adds model_* rows.
  const real = process.env.BENCH_LIPSYNC_MODEL;
  if (real) Object.assign(out, await poolFigures(0, real, 'model_'));
  // Main-thread work per frame at 16 kHz and S = 96, plus what the pool adds to a lone frame beyond the model run.
  out.pipeline_overhead_ms_per_frame_s96 = round(
    out['mel_window_ms_per_frame_16k'] +
      out.paste_back_ms_per_frame_s96 +
      out.s96_b1_latency_ms -
      out.s96_b1_run_ms_per_item,
    2,
  );
  return out;
}
