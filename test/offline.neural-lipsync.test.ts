/**
 * Offline MP4 jobs on the neural lip-sync models: a session on `lipsync_b` (a tiny Wav2Lip-shaped ONNX model in the
 * real inference pool) or `lipsync_c` (the same model behind the loopback KServe v2 server) submits an offline
 * bundle; the job renders through the same renderer routing as live sessions, so its MP4 (decoded with ffmpeg)
 * shows the mouth region brightening with the speech in it and the eyes untouched, and its progress only grows.
 * For `lipsync_c`, a server killed in the middle of the job does not fail it: the remaining speech frames come
 * from the CPU `lipsync` renderer and the job completes with every frame.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RENDER_SHARE, TTS_SHARE } from '../src/recording/offline-jobs.ts';
import { FakeKserveServer } from './fakes/kserve-server.ts';
import { json, post, startTestApp, tempDir, type TestApp } from './helpers/app.ts';
import { extractAudio, extractFrames, probeMp4, rms } from './helpers/mp4.ts';
import { astronautSource, faceRegions, type Region } from './helpers/neural-lipsync.ts';
import { tinyLipsyncModel, writeModelFile } from './helpers/tiny-onnx.ts';

const SAMPLE_RATE = 16_000;
const SIZE = 512; // the astronaut photo avatar
const FRAME_MS = 40; // 25 fps
/** Each segment: this much broadband noise (speech-like energy across the mel bands), then a pause as long. */
const SPEECH_MS = 1000;
const PAUSE_MS = 1000;

/** Noise at a fixed level, deterministic (LCG), as raw PCM16 base64. */
function noise(ms: number, seed: number): string {
  let state = seed >>> 0;
  const samples = Int16Array.from({ length: Math.round((ms * SAMPLE_RATE) / 1000) }, () => {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    return ((state >>> 16) & 0x3fff) - 0x2000;
  });
  return Buffer.from(samples.buffer).toString('base64');
}

function bundleBody(segments: number) {
  return {
    segments: Array.from({ length: segments }, (_, k) => ({
      audio_base64: noise(SPEECH_MS, k + 1),
      sample_rate: SAMPLE_RATE,
      pause_after_ms: PAUSE_MS,
    })),
  };
}

function lumaOf(frame: Uint8Array, region: Region): number {
  let sum = 0;
  for (let y = region.y0; y < region.y1; y++) for (let x = region.x0; x < region.x1; x++) sum += frame[y * SIZE + x];
  return sum / ((region.x1 - region.x0) * (region.y1 - region.y0));
}

/**
 * Frames whose whole mel window (25 ms before to 212.5 ms after) lies in a segment's speech, and frames whose window
 * lies in its pause (those carry no audio: the photo itself).
 */
function frameKinds(frameCount: number, segments: number): { speech: number[]; pause: number[] } {
  const speech: number[] = [];
  const pause: number[] = [];
  for (let i = 0; i < frameCount; i++) {
    const pts = i * FRAME_MS;
    const k = Math.floor(pts / (SPEECH_MS + PAUSE_MS));
    if (k >= segments) continue;
    const at = pts - k * (SPEECH_MS + PAUSE_MS);
    if (at >= 40 && at + 220 <= SPEECH_MS) speech.push(i);
    else if (at >= SPEECH_MS + 80 && at + 220 <= SPEECH_MS + PAUSE_MS) pause.push(i);
  }
  return { speech, pause };
}

/** Polls the job until it settles; every status seen must have a progress no smaller than the one before. */
async function waitSettled(
  t: TestApp,
  sessionId: string,
  jobId: string,
  onStatus?: (status: { progress: number }) => Promise<void>,
) {
  const seen: number[] = [];
  for (;;) {
    const status = await json(await fetch(`${t.baseUrl}/sessions/${sessionId}/rt-offline-bundle/${jobId}`));
    seen.push(status.progress);
    await onStatus?.(status);
    if (status.status === 'complete' || status.status === 'failed') return { status, seen };
    await new Promise((resolve) => setTimeout(resolve, 30));
  }
}

async function download(t: TestApp, sessionId: string, jobId: string): Promise<string> {
  const res = await fetch(`${t.baseUrl}/sessions/${sessionId}/rt-offline-bundle/${jobId}/download`);
  expect(res.status).toBe(200);
  const file = path.join(await tempDir('off-neural-'), 'bundle.mp4');
  await fs.writeFile(file, Buffer.from(await res.arrayBuffer()));
  return file;
}

interface Rendered {
  frames: Uint8Array[];
  mouth: number[];
  eyes: number[];
  kinds: { speech: number[]; pause: number[] };
  progress: number[];
}

/** Submits `segments` segments on a new session of `model`, waits for the job, decodes its MP4. */
async function renderJob(
  t: TestApp,
  model: string,
  segments: number,
  onStatus?: (status: { progress: number }) => Promise<void>,
): Promise<Rendered> {
  const created = await post(t.baseUrl, '/sessions', { avatar_id: 'astronaut', model });
  expect(created.status).toBe(200);
  const sessionId = (await json(created)).session_id;
  const submitted = await post(t.baseUrl, `/sessions/${sessionId}/rt-offline-bundle`, bundleBody(segments));
  expect(submitted.status).toBe(200);
  const { job_id } = await json(submitted);
  const { status, seen } = await waitSettled(t, sessionId, job_id, onStatus);
  expect(status).toEqual({ job_id, status: 'complete', progress: 1, error: null });
  for (let i = 1; i < seen.length; i++) expect(seen[i]).toBeGreaterThanOrEqual(seen[i - 1]);
  const file = await download(t, sessionId, job_id);
  const probe = await probeMp4(file);
  expect(probe.streams.map((s) => `${s.kind}:${s.codec}`)).toEqual(['Video:h264', 'Audio:aac']);
  expect([probe.streams[0].width, probe.streams[0].height, probe.streams[0].fps]).toEqual([SIZE, SIZE, 25]);
  const frames = await extractFrames(file, SIZE, SIZE);
  const audio = await extractAudio(file, SAMPLE_RATE);
  const totalMs = segments * (SPEECH_MS + PAUSE_MS);
  expect(Math.abs(frames.length * FRAME_MS - totalMs)).toBeLessThanOrEqual(2 * FRAME_MS);
  expect(rms(audio)).toBeGreaterThan(300);
  const regions = faceRegions(astronautSource(t.avatarsDir));
  return {
    frames,
    mouth: frames.map((frame) => lumaOf(frame, regions.mouth)),
    eyes: frames.map((frame) => lumaOf(frame, regions.eyes)),
    kinds: frameKinds(frames.length, segments),
    progress: seen,
  };
}

const mean = (values: number[]) => values.reduce((a, b) => a + b, 0) / values.length;

/** Speech frames are brighter in the mouth than the pause frames (the photo), every one of them; eyes never move. */
function expectMouthFollowsSpeech(r: Rendered, label: string, speechFrames = r.kinds.speech): void {
  const idleMouth = mean(r.kinds.pause.map((i) => r.mouth[i]));
  const idleEyes = mean(r.kinds.pause.map((i) => r.eyes[i]));
  const speechMouth = speechFrames.map((i) => r.mouth[i]);
  console.log(
    `${label}: ${r.frames.length} frames, pause mouth ${idleMouth.toFixed(1)}, speech mouth ${Math.min(...speechMouth).toFixed(1)}–${Math.max(...speechMouth).toFixed(1)}, ` +
      `eyes Δmax ${Math.max(...[...speechFrames, ...r.kinds.pause].map((i) => Math.abs(r.eyes[i] - idleEyes))).toFixed(2)}, progress polls ${r.progress.length}`,
  );
  expect(speechFrames.length).toBeGreaterThan(10);
  for (const i of speechFrames) expect(r.mouth[i] - idleMouth, `frame ${i}`).toBeGreaterThan(15);
  for (const i of r.kinds.pause) expect(Math.abs(r.mouth[i] - idleMouth), `frame ${i}`).toBeLessThan(3);
  // (Only where the model rendered or the photo shows: the CPU fallback blinks.)
  for (const i of [...speechFrames, ...r.kinds.pause])
    expect(Math.abs(r.eyes[i] - idleEyes), `frame ${i}`).toBeLessThan(2.5);
}

/**
 * One service for the file with both neural models configured: lipsync_b on the tiny ONNX model, lipsync_c on the
 * loopback KServe server. Each job runs on a session of its own; the server is killed only by the last test.
 */
let t: TestApp;
let model: { path: string; remove(): Promise<void> };
let fake: FakeKserveServer;

beforeAll(async () => {
  [model, fake] = await Promise.all([
    writeModelFile(tinyLipsyncModel({ size: 96 }), 'wav2lip_96.onnx'),
    FakeKserveServer.start({ modelName: 'wav2lip_96' }),
  ]);
  t = await startTestApp({
    env: {
      SERVICE_LIPSYNC_B_MODEL: model.path,
      SERVICE_LIPSYNC_C_URL: fake.url,
      SERVICE_LIPSYNC_C_MODEL: 'wav2lip_96',
    },
  });
}, 60_000);

afterAll(async () => {
  await t?.close();
  await fake?.close();
  await model?.remove();
});

describe('offline bundle on lipsync_b (local ONNX in the inference pool)', () => {
  it('renders an MP4 whose mouth region brightens with the speech and whose eyes stay still, progress only growing', async () => {
    const r = await renderJob(t, 'lipsync_b', 2);
    expectMouthFollowsSpeech(r, 'offline lipsync_b');
    expect(t.services.inference().stats.items).toBeGreaterThan(0);
  }, 90_000);
});

describe('offline bundle on lipsync_c (KServe v2)', () => {
  it('renders an MP4 through the server (binary tensors) whose mouth region brightens with the speech', async () => {
    const before = fake.stats.inferBinary;
    const r = await renderJob(t, 'lipsync_c', 2);
    expectMouthFollowsSpeech(r, 'offline lipsync_c');
    expect(fake.stats.inferBinary - before).toBeGreaterThan(5);
  }, 90_000);

  it('a server killed mid-job: the rest of the speech renders on the CPU lipsync renderer and the job completes', async () => {
    // Slow answers stretch the job so the kill lands in its middle.
    fake.behaviour.inferDelayMs = 150;
    const batchesBefore = fake.stats.batches.length;
    const segments = 6;
    const frameCount = (segments * (SPEECH_MS + PAUSE_MS)) / FRAME_MS;
    // The first segment's speech frames: the kill waits until the job has written all of them.
    const neural = frameKinds(frameCount, segments).speech.filter((i) => i * FRAME_MS < SPEECH_MS);
    let killedAtProgress = -1;
    const r = await renderJob(t, 'lipsync_c', segments, async (status) => {
      // Keyed to frames written, not to requests seen by the server: with two requests in flight, the sixth
      // arriving does not mean the fifth was answered, and which frames the one still in flight carries depends
      // on the order the render workers finish their mel windows (on a slow host it carried frames 16–23, which
      // then failed and rendered on the fallback). A written frame was rendered and can no longer change.
      // Progress counts speech synthesis first (up to TTS_SHARE): the frames' part starts after it.
      const written = ((status.progress - TTS_SHARE) / RENDER_SHARE) * frameCount;
      if (killedAtProgress < 0 && written > Math.max(...neural)) {
        killedAtProgress = status.progress;
        await fake.close();
      }
    });
    expect(killedAtProgress).toBeGreaterThan(0);
    expect(killedAtProgress).toBeLessThan(1);
    // Frames the server answered come first; the last segments' speech is all fallback.
    const served = fake.stats.batches.slice(batchesBefore).reduce((a, b) => a + b, 0);
    const late = r.kinds.speech.filter((i) => i * FRAME_MS >= (segments - 2) * (SPEECH_MS + PAUSE_MS));
    expect(served).toBeLessThan(r.frames.length);
    expectMouthFollowsSpeech(r, 'offline lipsync_c before the kill', neural);
    const idleMouth = mean(r.kinds.pause.map((i) => r.mouth[i]));
    const lateMouth = late.map((i) => r.mouth[i]);
    console.log(
      `offline lipsync_c after the kill: ${late.length} speech frames, mouth ${Math.min(...lateMouth).toFixed(1)}–${Math.max(...lateMouth).toFixed(1)} (pause ${idleMouth.toFixed(1)}), ${served} frames served`,
    );
    // The CPU renderer opens the mouth (darker inside), it never brightens it the way the model does.
    expect(late.length).toBeGreaterThan(10);
    for (const m of lateMouth) expect(m - idleMouth).toBeLessThan(8);
    // …and it does animate: the mouth moves with the speech rather than staying the photo.
    expect(Math.max(...lateMouth.map((m) => Math.abs(m - idleMouth)))).toBeGreaterThan(1);
  }, 120_000);
});
