import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { randomUUID } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { PlayoutClock } from '../actors/media/playout.ts';
import { newPlayoutTurn } from '../actors/media/turn-playout.ts';
import { RecordingConflictError, RecordingRegistry } from '../src/recording/registry.ts';
import { TimecodeTestRenderer, decodeTestTimecode } from './helpers/timecode-renderer.ts';
import { extractAudio, extractFrames, probeMp4, rms, speechOnsets } from './helpers/mp4.ts';

const SAMPLE_RATE = 16_000;
const FPS = 25;
const FRAME_MS = 1000 / FPS;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

function tone(ms: number, hz = 440, amplitude = 9000): Int16Array {
  const pcm = new Int16Array(Math.round((ms * SAMPLE_RATE) / 1000));
  for (let i = 0; i < pcm.length; i++) pcm[i] = Math.round(amplitude * Math.sin((2 * Math.PI * hz * i) / SAMPLE_RATE));
  return pcm;
}
const openMouth = (durationMs: number) => ({
  durationMs,
  poseAt: () => ({ open: 0.8, wide: 0.2, round: 0 }),
  levelAt: () => 0.7,
});

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

async function setup() {
  const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'recording-sync-'));
  const renderer = new TimecodeTestRenderer(128, 96, FPS);
  const clock = new PlayoutClock(renderer, SAMPLE_RATE);
  clock.start();
  const registry = new RecordingRegistry(dataDir);
  cleanups.push(() => fs.rm(dataDir, { recursive: true, force: true }));
  cleanups.push(() => registry.close());
  cleanups.push(() => clock.close());
  return {
    dataDir,
    renderer,
    clock,
    registry,
    media: { playout: clock, width: renderer.width, height: renderer.height },
  };
}

describe('recording a live playout clock', () => {
  it('writes H.264 + AAC at the avatar size and fps, every clock frame once, and speech onsets within one frame of the video', async () => {
    const { clock, registry, media } = await setup();
    const id = randomUUID();
    await sleep(150);
    expect((await registry.status(id)).state).toBe('idle');
    await registry.start(id, media);
    expect((await registry.status(id)).state).toBe('recording');
    await sleep(330);
    clock.enqueue(newPlayoutTurn('t1'), tone(400), openMouth(400));
    await sleep(900);
    clock.enqueue(newPlayoutTurn('t2'), tone(300, 660), openMouth(300));
    await sleep(700);
    const done = await registry.stop(id);
    expect(done.state).toBe('complete');
    expect((await registry.status(id)).state).toBe('complete');

    const file = (await registry.artifactPath(id))!;
    expect(file).toBeTruthy();
    const probe = await probeMp4(file);
    expect(probe.streams.map((s) => `${s.kind}:${s.codec}`)).toEqual(['Video:h264', 'Audio:aac']);
    const video = probe.streams[0];
    expect([video.width, video.height, video.fps, video.pixFmt]).toEqual([128, 96, 25, 'yuv420p']);

    const frames = await extractFrames(file, 128, 96);
    const audio = await extractAudio(file, SAMPLE_RATE);
    const videoMs = frames.length * FRAME_MS;
    const audioMs = (audio.length * 1000) / SAMPLE_RATE;
    expect(Math.abs(done.duration_ms - videoMs)).toBeLessThanOrEqual(1);
    expect(Math.abs(audioMs - videoMs)).toBeLessThanOrEqual(FRAME_MS);
    expect(videoMs).toBeGreaterThan(1800);

    // Every clock frame exactly once, in order.
    const codes = frames.map((frame) => decodeTestTimecode(frame, 128));
    for (let j = 1; j < codes.length; j++) expect(codes[j].frameIdx).toBe(codes[0].frameIdx + j);

    // Speech in the audio where it was played, and the frames that show it start within one frame of it.
    const onsets = speechOnsets(audio, SAMPLE_RATE);
    expect(onsets).toHaveLength(2);
    expect(rms(audio, Math.round((onsets[0] + 100) * 16), Math.round((onsets[0] + 300) * 16))).toBeGreaterThan(3000);
    const speakingStarts = codes.flatMap((code, j) => (code.voiced && !codes[j - 1]?.voiced ? [j * FRAME_MS] : []));
    expect(speakingStarts).toHaveLength(2);
    for (let k = 0; k < 2; k++) expect(Math.abs(speakingStarts[k] - onsets[k])).toBeLessThanOrEqual(FRAME_MS);
  }, 20_000);

  it('answers conflicts: start while recording, stop while idle or after complete', async () => {
    const { registry, media } = await setup();
    const id = randomUUID();
    await expect(registry.stop(id)).rejects.toBeInstanceOf(RecordingConflictError);
    await registry.start(id, media);
    await expect(registry.start(id, media)).rejects.toBeInstanceOf(RecordingConflictError);
    await sleep(300);
    await registry.stop(id);
    await expect(registry.stop(id)).rejects.toBeInstanceOf(RecordingConflictError);
  }, 15_000);

  it('a new start discards the previous artifact; the new one has its own length', async () => {
    const { registry, media } = await setup();
    const id = randomUUID();
    await registry.start(id, media);
    await sleep(1200);
    const first = await registry.stop(id);
    await registry.start(id, media);
    expect(await registry.artifactPath(id)).toBeNull();
    await sleep(400);
    const second = await registry.stop(id);
    expect(second.duration_ms).toBeLessThan(first.duration_ms - 400);
    const frames = await extractFrames((await registry.artifactPath(id))!, 128, 96);
    expect(Math.abs(frames.length * FRAME_MS - second.duration_ms)).toBeLessThanOrEqual(1);
  }, 15_000);

  it('finalises the file when the session ends (hook) and when the clock just stops (watchdog)', async () => {
    const { registry, media, clock } = await setup();
    const hooked = randomUUID();
    let onEnd: () => void = () => undefined;
    await registry.start(hooked, media, (finalise) => (onEnd = finalise));
    const orphan = randomUUID();
    await registry.start(orphan, media);
    await sleep(500);
    onEnd();
    clock.close();
    await expect.poll(async () => (await registry.status(hooked)).state, { timeout: 5_000 }).toBe('complete');
    await expect.poll(async () => (await registry.status(orphan)).state, { timeout: 5_000 }).toBe('complete');
    for (const id of [hooked, orphan]) {
      const probe = await probeMp4((await registry.artifactPath(id))!);
      expect(probe.streams).toHaveLength(2);
    }
  }, 15_000);

  it('survives a restart: a finished recording is still reported complete from disk', async () => {
    const { registry, media, dataDir } = await setup();
    const id = randomUUID();
    await registry.start(id, media);
    await sleep(400);
    const done = await registry.stop(id);
    const again = new RecordingRegistry(dataDir);
    cleanups.push(() => again.close());
    expect(await again.status(id)).toEqual(done);
    expect(await again.artifactPath(id)).toBeTruthy();
    await again.sweep(Date.now() + 25 * 3600 * 1000);
    expect((await again.status(id)).state).toBe('idle');
  }, 15_000);
});
