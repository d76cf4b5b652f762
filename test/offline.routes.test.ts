import fs from 'node:fs/promises';
import path from 'node:path';
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decodeTimecode } from '../actors/render/timecode.ts';
import { JobStore } from '../src/store/jobs.ts';
import { json, makeAvatarBundle, post, startTestApp, tempDir, type TestApp } from './helpers/app.ts';
import { extractAudio, extractFrames, probeMp4, rms, speechOnsets } from './helpers/mp4.ts';
import { parseVtt } from './helpers/vtt.ts';

const SAMPLE_RATE = 16_000;
const W = 256; // mock timecode blocks are width/22 px: wide enough to survive H.264
const H = 192;
const FPS = 25;
const FRAME_MS = 1000 / FPS;

let app: TestApp;
let avatarsDir: string;
beforeAll(async () => {
  avatarsDir = await tempDir('off-avatars-');
  await makeAvatarBundle(avatarsDir, 'off-mock', { model_type: 'mock', width: W, height: H, fps: FPS });
  app = await startTestApp({ avatarsDir });
}, 30_000);
afterAll(() => app?.close());

const get = (p: string) => fetch(`${app.baseUrl}${p}`);
async function newSession(): Promise<string> {
  const res = await post(app.baseUrl, '/sessions', { avatar_id: 'off-mock', model: 'mock' });
  expect(res.status).toBe(200);
  return (await json(res)).session_id;
}
function pcm(parts: Array<{ ms: number; hz?: number }>): string {
  const out: number[] = [];
  for (const part of parts) {
    const n = Math.round((part.ms * SAMPLE_RATE) / 1000);
    for (let i = 0; i < n; i++)
      out.push(part.hz ? Math.round(9000 * Math.sin((2 * Math.PI * part.hz * i) / SAMPLE_RATE)) : 0);
  }
  return Buffer.from(new Int16Array(out).buffer).toString('base64');
}
async function waitDone(id: string, jobId: string): Promise<any> {
  let last = -1;
  for (;;) {
    const status = await json(await get(`/sessions/${id}/rt-offline-bundle/${jobId}`));
    expect(status.progress).toBeGreaterThanOrEqual(last);
    last = status.progress;
    if (status.status === 'complete' || status.status === 'failed') return status;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}
async function download(id: string, jobId: string): Promise<string> {
  const res = await get(`/sessions/${id}/rt-offline-bundle/${jobId}/download`);
  expect(res.status).toBe(200);
  expect(res.headers.get('content-type')).toBe('video/mp4');
  const file = path.join(await tempDir('off-dl-'), 'b.mp4');
  await fs.writeFile(file, Buffer.from(await res.arrayBuffer()));
  return file;
}

/** A short 16-bit mono WAV whose header claims `rate` Hz (the upload rules allow 8000-48000). */
function wavAtRate(rate: number): string {
  const data = Buffer.alloc(3200);
  const header = Buffer.alloc(44);
  header.write('RIFF', 0);
  header.writeUInt32LE(36 + data.length, 4);
  header.write('WAVEfmt ', 8);
  header.writeUInt32LE(16, 16);
  header.writeUInt16LE(1, 20);
  header.writeUInt16LE(1, 22);
  header.writeUInt32LE(rate, 24);
  header.writeUInt32LE((rate * 2) >>> 0, 28);
  header.writeUInt16LE(2, 32);
  header.writeUInt16LE(16, 34);
  header.write('data', 36);
  header.writeUInt32LE(data.length, 40);
  return Buffer.concat([header, data]).toString('base64');
}

describe('offline bundle over HTTP', () => {
  it('renders text through the session TTS into a non-silent MP4 at the avatar size and fps', async () => {
    const id = await newSession();
    const res = await post(app.baseUrl, `/sessions/${id}/rt-offline-bundle`, {
      text: 'Hello from the offline renderer. It runs faster than real time.',
    });
    expect(res.status).toBe(200);
    const { job_id, status } = await json(res);
    expect(status).toBe('pending');
    expect(await waitDone(id, job_id)).toEqual({ job_id, status: 'complete', progress: 1, error: null });
    const file = await download(id, job_id);
    const probe = await probeMp4(file);
    expect(probe.streams.map((s) => `${s.kind}:${s.codec}`)).toEqual(['Video:h264', 'Audio:aac']);
    expect([probe.streams[0].width, probe.streams[0].height, probe.streams[0].fps]).toEqual([W, H, FPS]);
    const frames = await extractFrames(file, W, H);
    const audio = await extractAudio(file, SAMPLE_RATE);
    expect(Math.abs((audio.length * 1000) / SAMPLE_RATE - frames.length * FRAME_MS)).toBeLessThanOrEqual(FRAME_MS);
    expect(rms(audio)).toBeGreaterThan(300);

    // The captions beside it: one cue per sentence, in order, inside the MP4, each from its speech onset (past the
    // sentence's leading near-silence) — the same rule the live clock's SSE `caption` follows.
    const vtt = await get(`/sessions/${id}/rt-offline-bundle/${job_id}/captions.vtt`);
    expect(vtt.status).toBe(200);
    expect(vtt.headers.get('content-type')).toMatch(/^text\/vtt/);
    const cues = parseVtt(await vtt.text());
    expect(cues.map((c) => c.text)).toEqual(['Hello from the offline renderer.', 'It runs faster than real time.']);
    const durationMs = frames.length * FRAME_MS;
    expect(cues[0].fromMs).toBeGreaterThan(0);
    expect(cues[0].toMs).toBeLessThanOrEqual(cues[1].fromMs);
    expect(cues[1].toMs).toBeLessThanOrEqual(durationMs);
    // Each cue starts where its audio in the MP4 becomes loud (AAC smears an onset by a frame or so).
    const onsets = speechOnsets(audio, SAMPLE_RATE, 600, 60);
    for (const cue of cues)
      expect(
        Math.min(...onsets.map((o) => Math.abs(o - cue.fromMs))),
        `${cue.text} at ${cue.fromMs}: ${onsets}`,
      ).toBeLessThanOrEqual(60);
  }, 30_000);

  it('keeps sync: the mock frame shown at each audio onset carries that time', async () => {
    const id = await newSession();
    const res = await post(app.baseUrl, `/sessions/${id}/rt-offline-bundle`, {
      segments: [
        { audio_base64: pcm([{ ms: 600 }, { ms: 400, hz: 440 }]), pause_after_ms: 700 },
        { audio_base64: pcm([{ ms: 300, hz: 660 }]) },
      ],
    });
    const { job_id } = await json(res);
    expect((await waitDone(id, job_id)).status).toBe('complete');
    const file = await download(id, job_id);
    const frames = await extractFrames(file, W, H);
    const audio = await extractAudio(file, SAMPLE_RATE);
    const onsets = speechOnsets(audio, SAMPLE_RATE, 600, 60);
    expect(onsets).toHaveLength(2);
    expect(Math.abs(onsets[0] - 600)).toBeLessThanOrEqual(5);
    expect(Math.abs(onsets[1] - 1700)).toBeLessThanOrEqual(5);
    for (const onset of onsets) {
      const code = decodeTimecode({ width: W, height: H, data: frames[Math.floor(onset / FRAME_MS)] });
      expect(code).not.toBeNull();
      expect(Math.abs(code!.ptsMs - onset)).toBeLessThanOrEqual(FRAME_MS);
    }
  }, 30_000);

  it('answers 400 for bad bodies, 404 for unknown session/job, 409 until complete', async () => {
    const id = await newSession();
    const bundle = `/sessions/${id}/rt-offline-bundle`;
    for (const body of [
      {},
      { text: 'a', segments: [{ text: 'b' }] },
      { text: '   ' },
      { segments: [] },
      { text: 'x'.repeat(5001) },
      {
        segments: [
          { audio_base64: Buffer.from('this is definitely plain text and not audio at all').toString('base64') },
        ],
      },
      { text: 'hi', tts_provider: 'nope' },
      { segments: [{ audio_base64: wavAtRate(1) }] },
      { segments: [{ audio_base64: wavAtRate(2 ** 32 - 1) }] },
      { segments: [{ audio_base64: wavAtRate(7999) }] },
      { segments: [{ audio_base64: wavAtRate(48001) }] },
    ]) {
      const res = await post(app.baseUrl, bundle, body);
      expect(res.status, JSON.stringify(body).slice(0, 80)).toBe(400);
      expect(typeof (await json(res)).detail).toBe('string');
    }
    expect((await post(app.baseUrl, `/sessions/${randomUUID()}/rt-offline-bundle`, { text: 'hi' })).status).toBe(404);
    expect((await get(`${bundle}/${randomUUID()}`)).status).toBe(404);
    expect((await get(`${bundle}/${randomUUID()}/download`)).status).toBe(404);
    expect((await get(`${bundle}/not-a-uuid/download`)).status).toBe(404);
    const { job_id } = await json(
      await post(app.baseUrl, bundle, { segments: [{ audio_base64: pcm([{ ms: 4000, hz: 300 }]) }] }),
    );
    expect((await get(`${bundle}/${job_id}/download`)).status).toBe(409);
    expect((await get(`${bundle}/${job_id}/captions.vtt`)).status).toBe(409);
    expect((await get(`${bundle}/${randomUUID()}/captions.vtt`)).status).toBe(404);
    const other = await newSession();
    expect((await get(`/sessions/${other}/rt-offline-bundle/${job_id}`)).status).toBe(404);
    await waitDone(id, job_id);
    expect((await get(`${bundle}/${job_id}/download`)).status).toBe(200);
  }, 30_000);

  it('after a restart a finished job is still downloadable and an unfinished one is failed with a reason', async () => {
    const id = await newSession();
    const { job_id: finished } = await json(
      await post(app.baseUrl, `/sessions/${id}/rt-offline-bundle`, {
        segments: [{ audio_base64: pcm([{ ms: 300, hz: 300 }]) }],
      }),
    );
    await waitDone(id, finished);
    const crashed = randomUUID();
    const now = new Date().toISOString();
    // A job a crashed process left `running` (a clean shutdown fails its jobs itself).
    await new JobStore(app.services.store).put({
      job_id: crashed,
      session_id: id,
      status: 'running',
      progress: 0.5,
      error: null,
      created_at: now,
      updated_at: now,
    });
    const dataDir = app.dataDir;
    await app.close();
    app = await startTestApp({ avatarsDir, dataDir });
    expect(await json(await get(`/sessions/${id}/rt-offline-bundle/${finished}`))).toMatchObject({
      status: 'complete',
      progress: 1,
    });
    await download(id, finished);
    const failed = await json(await get(`/sessions/${id}/rt-offline-bundle/${crashed}`));
    expect(failed).toMatchObject({ status: 'failed', progress: 0.5 });
    expect(failed.error).toBe('interrupted by restart');
    expect((await get(`/sessions/${id}/rt-offline-bundle/${crashed}/download`)).status).toBe(409);
  }, 40_000);
});
