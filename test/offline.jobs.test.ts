import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { randomUUID } from 'node:crypto';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { Store } from '../src/store/db.ts';
import { JobStore, type StoredJob } from '../src/store/jobs.ts';
import { OfflineJobQueue, type OfflineJobsDeps } from '../src/recording/offline-jobs.ts';
import { prepareSegments } from '../src/recording/offline-input.ts';
import { closeBuiltinEngines, createBuiltinProvider } from '../actors/tts/providers/builtin.ts';
import { encodeWav } from '../actors/audio/wav.ts';
import { TimecodeTestRenderer, decodeTestTimecode } from './helpers/timecode-renderer.ts';
import { extractAudio, extractFrames, probeMp4, rms, speechOnsets } from './helpers/mp4.ts';

const SAMPLE_RATE = 16_000;
const FPS = 25;
const FRAME_MS = 1000 / FPS;
const builtin = createBuiltinProvider({ warmUp: false });
afterAll(closeBuiltinEngines);

function pcmOf(parts: Array<{ ms: number; hz?: number }>): Int16Array {
  const total = parts.reduce((sum, p) => sum + Math.round((p.ms * SAMPLE_RATE) / 1000), 0);
  const pcm = new Int16Array(total);
  let at = 0;
  for (const part of parts) {
    const n = Math.round((part.ms * SAMPLE_RATE) / 1000);
    if (part.hz)
      for (let i = 0; i < n; i++) pcm[at + i] = Math.round(9000 * Math.sin((2 * Math.PI * part.hz * i) / SAMPLE_RATE));
    at += n;
  }
  return pcm;
}
const b64 = (pcm: Int16Array) => Buffer.from(pcm.buffer, pcm.byteOffset, pcm.byteLength).toString('base64');

const cleanups: Array<() => Promise<unknown> | void> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

async function setup(overrides: Partial<OfflineJobsDeps> = {}, dataDir?: string) {
  dataDir ??= await fs.mkdtemp(path.join(os.tmpdir(), 'offline-jobs-'));
  const store = await Store.open(dataDir);
  const jobStore = new JobStore(store);
  const renderers: TimecodeTestRenderer[] = [];
  const queue = new OfflineJobQueue({
    dataDir,
    store: jobStore,
    sampleRate: SAMPLE_RATE,
    openRenderer: async () => {
      const renderer = new TimecodeTestRenderer(128, 96, FPS);
      renderers.push(renderer);
      return renderer;
    },
    tts: () => builtin,
    ...overrides,
  });
  await queue.recover();
  const close = async () => {
    await queue.close();
    await store.close();
  };
  cleanups.push(close);
  return { dataDir, store, jobStore, queue, renderers, close };
}

const spec = async (segments: Parameters<typeof prepareSegments>[0]) => ({
  sessionId: randomUUID(),
  avatarId: 'a',
  model: 'mock',
  ttsProvider: 'builtin',
  voice: null,
  ttsModel: null,
  segments: await prepareSegments(segments, SAMPLE_RATE),
});

describe('offline bundle jobs', () => {
  it('renders audio segments to an MP4 whose speech frames start within one frame of the audio onsets', async () => {
    const { queue, renderers } = await setup();
    const wav = encodeWav(pcmOf([{ ms: 300, hz: 660 }]), SAMPLE_RATE);
    const job = await queue.submit(
      await spec([
        { audio_base64: b64(pcmOf([{ ms: 600 }, { ms: 400, hz: 440 }])), sample_rate: 16000 },
        { audio_base64: Buffer.from(wav).toString('base64'), pause_after_ms: 500 },
      ]),
    );
    expect(job.status).toBe('pending');
    await queue.whenSettled(job.job_id);
    const done = (await queue.get(job.job_id))!;
    expect(done).toMatchObject({ status: 'complete', progress: 1, error: null });
    expect(renderers[0].closed).toBe(true);

    const file = queue.artifactPath(job.job_id);
    const probe = await probeMp4(file);
    expect(probe.streams.map((s) => `${s.kind}:${s.codec}`)).toEqual(['Video:h264', 'Audio:aac']);
    expect([probe.streams[0].width, probe.streams[0].height, probe.streams[0].fps]).toEqual([128, 96, 25]);
    const frames = await extractFrames(file, 128, 96);
    const audio = await extractAudio(file, SAMPLE_RATE);
    // 600 + 400 + 300 (default pause) + 300 + 500 ms of timeline.
    expect(frames.length).toBe(Math.ceil((2100 / 1000) * FPS));
    expect(Math.abs((audio.length * 1000) / SAMPLE_RATE - frames.length * FRAME_MS)).toBeLessThanOrEqual(FRAME_MS);
    const onsets = speechOnsets(audio, SAMPLE_RATE);
    expect(onsets.map(Math.round)).toHaveLength(2);
    expect(Math.abs(onsets[0] - 600)).toBeLessThanOrEqual(5);
    expect(Math.abs(onsets[1] - 1300)).toBeLessThanOrEqual(5);
    const codes = frames.map((frame) => decodeTestTimecode(frame, 128));
    codes.forEach((code, j) => expect(code.frameIdx).toBe(j));
    const speakingStarts = codes.flatMap((code, j) => (code.voiced && !codes[j - 1]?.voiced ? [j * FRAME_MS] : []));
    expect(speakingStarts).toHaveLength(2);
    for (let k = 0; k < 2; k++) expect(Math.abs(speakingStarts[k] - onsets[k])).toBeLessThanOrEqual(FRAME_MS);
  }, 20_000);

  it('speaks text through the TTS provider; status goes pending → running → complete with growing progress, one job at a time', async () => {
    const { queue } = await setup();
    const first = await queue.submit(await spec([{ text: 'Hello there. This is an offline video.' }]));
    const second = await queue.submit(await spec([{ text: 'Second one.' }]));
    expect(second.status).toBe('pending');
    const seen: StoredJob[] = [];
    const secondSeen = new Set<string>();
    while ((await queue.get(second.job_id))!.status !== 'complete') {
      // Second read first: if the first job is still unfinished afterwards, the second cannot have started.
      const b = (await queue.get(second.job_id))!;
      const a = (await queue.get(first.job_id))!;
      seen.push(a);
      secondSeen.add(b.status);
      if (a.status !== 'complete') expect(b.status, JSON.stringify(a)).toBe('pending');
      expect(b.status).not.toBe('failed');
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    // On a slow host the first read can come before the queue picked the first job up: a leading
    // 'pending' is allowed, but the statuses only ever move forward and pass through 'running'.
    const firstStatuses = [...new Set(seen.map((job) => job.status))];
    expect(firstStatuses.filter((status) => status !== 'pending')).toEqual(['running', 'complete']);
    expect(firstStatuses.indexOf('pending')).toBeLessThanOrEqual(0);
    expect(secondSeen.has('pending')).toBe(true);
    expect(secondSeen.has('running')).toBe(true);
    for (let i = 1; i < seen.length; i++) expect(seen[i].progress).toBeGreaterThanOrEqual(seen[i - 1].progress);
    const audio = await extractAudio(queue.artifactPath(first.job_id), SAMPLE_RATE);
    expect(rms(audio)).toBeGreaterThan(300);
  }, 25_000);

  it('marks a failing render failed with the reason and leaves no file', async () => {
    const { queue, dataDir } = await setup({
      openRenderer: async () => {
        throw new Error('renderer exploded');
      },
    });
    const job = await queue.submit(await spec([{ audio_base64: b64(pcmOf([{ ms: 200, hz: 300 }])) }]));
    await queue.whenSettled(job.job_id);
    expect(await queue.get(job.job_id)).toMatchObject({ status: 'failed', error: 'renderer exploded' });
    expect(await fs.readdir(path.join(dataDir, 'bundles'))).toEqual([]);
  }, 10_000);

  it('after a restart: a finished job is still downloadable, unfinished ones are failed with a reason, expired ones are swept', async () => {
    const first = await setup();
    const done = await first.queue.submit(await spec([{ audio_base64: b64(pcmOf([{ ms: 200, hz: 300 }])) }]));
    await first.queue.whenSettled(done.job_id);
    const now = new Date().toISOString();
    const orphan = (status: 'pending' | 'running'): StoredJob => ({
      job_id: randomUUID(),
      session_id: randomUUID(),
      status,
      progress: status === 'running' ? 0.4 : 0,
      error: null,
      created_at: now,
      updated_at: now,
    });
    const [running, pending] = [orphan('running'), orphan('pending')];
    await first.jobStore.put(running);
    await first.jobStore.put(pending);
    await first.close();

    const second = await setup({}, first.dataDir);
    expect(await second.queue.get(done.job_id)).toMatchObject({ status: 'complete', progress: 1 });
    await fs.access(second.queue.artifactPath(done.job_id));
    for (const job of [running, pending]) {
      const after = (await second.queue.get(job.job_id))!;
      expect(after.status).toBe('failed');
      expect(after.error).toBe('interrupted by restart');
      expect(after.progress).toBe(job.progress);
    }
    await second.queue.sweep(Date.now() + 25 * 3600 * 1000);
    expect(await second.queue.get(done.job_id)).toBeUndefined();
    await expect(fs.access(second.queue.artifactPath(done.job_id))).rejects.toThrow();
  }, 15_000);
});
