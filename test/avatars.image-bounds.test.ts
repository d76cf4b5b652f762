/**
 * Issue 25 row 2: the pixel limit alone did not bound the work of extreme shapes. A 48 KB PNG of
 * 49,000,000×1 cost ~1 GB per request, a 95 KB PNG of 1×49,000,000 a minute of CPU on the libuv threads that
 * also serve file reads. Now each side is bounded too and checked from the header, and the pixels are decoded
 * in a bounded number of image processes with a deadline, which shutdown and aborts kill at once.
 */
import fs from 'node:fs/promises';
import sharp from 'sharp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { closeFaceDetector } from '../actors/faces/detector.ts';
import {
  IMAGE_JOBS_RETRY_AFTER_S,
  ImageJobFailedError,
  ImageJobsBusyError,
  MAX_RUNNING_IMAGE_JOBS,
  MAX_WAITING_IMAGE_JOBS,
  closeImageJobs,
  imageProcessPids,
  withImageProcess,
} from '../actors/faces/image-jobs.ts';
import { MAX_PORTRAIT_SIDE } from '../actors/faces/portrait.ts';
import { eventually } from './helpers/conversation.ts';
import { PORTRAIT_FIXTURE } from './helpers/fixtures.ts';
import { blackPng } from './helpers/hostile-images.ts';
import { json, startTestApp, type TestApp } from './helpers/app.ts';

/**
 * A refusal from the header takes milliseconds (multipart read + sharp metadata). The bound is generous for a
 * loaded, half-speed host (and a cold first request); decoding 1×49,000,000 took a minute of CPU.
 */
const HEADER_REFUSAL_BOUND_MS = 10_000;
/** GET /avatars reads the catalog; with the thread pool free it answers in milliseconds. Starved, it took ~2 min. */
const PROMPT_ANSWER_BOUND_MS = 10_000;

function upload(baseUrl: string, image: Buffer, signal?: AbortSignal): Promise<Response> {
  const body = new FormData();
  body.append('name', 'Hostile');
  body.append('base_avatar_id', 'astronaut');
  body.append('image', new Blob([new Uint8Array(image)]), 'portrait.png');
  return fetch(`${baseUrl}/avatars/custom`, { method: 'POST', body, signal });
}

async function timed<T>(work: Promise<T>): Promise<{ value: T; ms: number }> {
  const started = performance.now();
  const value = await work;
  return { value, ms: performance.now() - started };
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** The pid of the one image process, once the job has taken its slot and forked it. */
async function imageProcessPid(): Promise<number> {
  expect(await eventually(() => imageProcessPids().length === 1, 5_000)).toBe(true);
  return imageProcessPids()[0];
}

/** Holds one image-job slot (with its process started) until `release` is called. */
function holdSlot(): { release: () => void; settled: Promise<unknown> } {
  let release!: () => void;
  const held = new Promise<void>((resolve) => (release = resolve));
  const settled = withImageProcess(() => held).catch((error: unknown) => error);
  return { release, settled };
}

describe('POST /avatars/custom: extreme shapes are refused from the header', () => {
  let t: TestApp;
  const wide = blackPng(49_000_000, 1);
  const tall = blackPng(1, 49_000_000);

  beforeAll(async () => {
    t = await startTestApp();
  });
  afterAll(async () => {
    await t?.close();
    await closeFaceDetector();
  });

  it('a 48 KB PNG of 49,000,000×1 gets 400 {detail} naming the side limit, quickly', async () => {
    expect(wide.length).toBeLessThan(64 * 1024);
    const { value: res, ms } = await timed(upload(t.baseUrl, wide));
    expect(res.status).toBe(400);
    expect(await json(res)).toEqual({ detail: `image is larger than ${MAX_PORTRAIT_SIDE} px on a side` });
    expect(ms).toBeLessThan(HEADER_REFUSAL_BOUND_MS);
    // Refused before any decoding: no image process is running (none has been started in this file yet).
    expect(imageProcessPids()).toEqual([]);
  }, 60_000);

  it('a 95 KB PNG of 1×49,000,000 gets 400 {detail} naming the side limit, quickly', async () => {
    expect(tall.length).toBeLessThan(128 * 1024);
    const { value: res, ms } = await timed(upload(t.baseUrl, tall));
    expect(res.status).toBe(400);
    expect(await json(res)).toEqual({ detail: `image is larger than ${MAX_PORTRAIT_SIDE} px on a side` });
    expect(ms).toBeLessThan(HEADER_REFUSAL_BOUND_MS);
    // Refused before any decoding: no image process is running (none has been started in this file yet).
    expect(imageProcessPids()).toEqual([]);
  }, 60_000);

  it('while four of each are in flight, GET /avatars and a preview still answer promptly', async () => {
    const attacks = [...Array(4).fill(wide), ...Array(4).fill(tall)].map((image: Buffer) =>
      upload(t.baseUrl, image).then(async (res) => ({ status: res.status, body: await json(res) })),
    );
    const list = await timed(fetch(`${t.baseUrl}/avatars`));
    expect(list.value.status).toBe(200);
    expect(list.ms).toBeLessThan(PROMPT_ANSWER_BOUND_MS);
    const preview = await timed(fetch(`${t.baseUrl}/avatars/astronaut/preview`));
    expect(preview.value.status).toBe(200);
    await preview.value.arrayBuffer();
    expect(preview.ms).toBeLessThan(PROMPT_ANSWER_BOUND_MS);
    // Each is refused from its header, or, while every creation place is taken by the others, before its body is read.
    const answers = await Promise.all(attacks);
    for (const answer of answers) {
      expect([
        { status: 400, body: { detail: expect.stringContaining('px on a side') } },
        { status: 503, body: { detail: expect.stringContaining('retry') } },
      ]).toContainEqual(answer);
    }
    expect(answers.filter((answer) => answer.status === 400).length).toBeGreaterThanOrEqual(
      MAX_RUNNING_IMAGE_JOBS + MAX_WAITING_IMAGE_JOBS,
    );
  }, 60_000);

  it(`a portrait of exactly ${MAX_PORTRAIT_SIDE} px on its long side is accepted; one more pixel is refused`, async () => {
    const atLimit = await sharp({
      create: { width: MAX_PORTRAIT_SIDE, height: 64, channels: 3, background: '#c8a08c' },
    })
      .png()
      .toBuffer();
    expect((await upload(t.baseUrl, atLimit)).status).toBe(200);
    const overLimit = await sharp({
      create: { width: 64, height: MAX_PORTRAIT_SIDE + 1, channels: 3, background: '#c8a08c' },
    })
      .png()
      .toBuffer();
    const res = await upload(t.baseUrl, overLimit);
    expect(res.status).toBe(400);
    expect((await json(res)).detail).toContain('px on a side');
  }, 120_000);

  it('when every image slot is busy and the queue is full, an upload gets 503 {detail} with Retry-After', async () => {
    const held = Array.from({ length: MAX_RUNNING_IMAGE_JOBS + MAX_WAITING_IMAGE_JOBS }, holdSlot);
    try {
      const res = await upload(t.baseUrl, await fs.readFile(PORTRAIT_FIXTURE));
      expect(res.status).toBe(503);
      expect(res.headers.get('retry-after')).toBe(String(IMAGE_JOBS_RETRY_AFTER_S));
      expect((await json(res)).detail).toMatch(/retry/);
    } finally {
      for (const slot of held) slot.release();
      await Promise.all(held.map((slot) => slot.settled));
    }
  }, 60_000);
});

describe('image jobs: bounded, with a deadline, killed at once', () => {
  afterAll(() => closeImageJobs());

  it('a step past its deadline fails with ImageJobFailedError and its process is gone', async () => {
    const image = new Uint8Array(await fs.readFile(PORTRAIT_FIXTURE));
    let pid = 0;
    const outcome = await withImageProcess(
      async (images) => {
        [pid] = imageProcessPids();
        return images.request({ type: 'decode', image, maxPixels: 50_000_000, detectionMaxSide: 1024 });
      },
      { stepDeadlineMs: 1 },
    ).catch((error: unknown) => error);
    expect(outcome).toBeInstanceOf(ImageJobFailedError);
    expect((outcome as Error).message).toMatch(/took longer than/);
    expect(await eventually(() => !alive(pid), 5_000)).toBe(true);
    expect(imageProcessPids()).toEqual([]);
  }, 30_000);

  it('closeImageJobs kills the running process at once and refuses the waiting uploads', async () => {
    const running = withImageProcess(() => new Promise(() => undefined)).catch((error: unknown) => error);
    const waiting = withImageProcess(async () => 'ran').catch((error: unknown) => error);
    const pid = await imageProcessPid();
    closeImageJobs();
    expect(await running).toBeInstanceOf(ImageJobsBusyError);
    expect(await waiting).toBeInstanceOf(ImageJobsBusyError);
    expect(await eventually(() => !alive(pid), 5_000)).toBe(true);
    // Later uploads start afresh.
    expect(await withImageProcess(async () => 'ran')).toBe('ran');
  }, 30_000);

  it('an abort while waiting frees the place in the queue; one while running kills the process', async () => {
    const running = new AbortController();
    const first = withImageProcess(() => new Promise(() => undefined), { signal: running.signal }).catch(
      (error: unknown) => error,
    );
    const pid = await imageProcessPid();
    const queued = new AbortController();
    const second = withImageProcess(async () => 'ran', { signal: queued.signal }).catch((error: unknown) => error);
    queued.abort(new Error('client left while waiting'));
    expect(await second).toMatchObject({ message: 'client left while waiting' });
    running.abort(new Error('client left'));
    expect(await first).toMatchObject({ message: 'client left' });
    expect(await eventually(() => !alive(pid), 5_000)).toBe(true);
    expect(imageProcessPids()).toEqual([]);
  }, 30_000);
});
