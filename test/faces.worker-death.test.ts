/** A face detector worker thread that dies fails (or re-runs) the detection it held, never hangs it or the service. */
import sharp from 'sharp';
import { afterAll, describe, expect, it } from 'vitest';
import { closeFaceDetector, detectMouth, faceDetectorWorkers } from '../actors/faces/detector.ts';
import { eventually } from './helpers/conversation.ts';
import { PORTRAIT_FIXTURE } from './helpers/fixtures.ts';

async function portrait() {
  const { data, info } = await sharp(PORTRAIT_FIXTURE).ensureAlpha().raw().toBuffer({ resolveWithObject: true });
  return { rgba: new Uint8Array(data), width: info.width, height: info.height };
}

/** Far longer than a cold detection (~2–5 s here); a hung detection would run into it. */
const NO_HANG_MS = 30_000;

function within<T>(work: Promise<T>, ms: number): Promise<T | 'timed out'> {
  return Promise.race([
    work,
    new Promise<'timed out'>((resolve) => setTimeout(() => resolve('timed out'), ms).unref()),
  ]);
}

describe('face detector: a worker thread that dies', () => {
  afterAll(async () => closeFaceDetector());

  it('before it is ready does not strand the detection: it runs on a fresh thread', async () => {
    await closeFaceDetector();
    const detection = detectMouth(await portrait());
    expect(faceDetectorWorkers()).toHaveLength(1);
    await faceDetectorWorkers()[0].terminate();
    const result = await within(detection, NO_HANG_MS);
    expect(result).toMatchObject({ ok: true });
  }, 60_000);

  it('mid-detection fails that detection with reason error; the next detection succeeds', async () => {
    const image = await portrait();
    await detectMouth(image); // warm: the worker is ready and has its models
    const detection = detectMouth(image);
    expect(await eventually(() => faceDetectorWorkers().length === 1, 5_000)).toBe(true);
    await faceDetectorWorkers()[0].terminate();
    expect(await within(detection, NO_HANG_MS)).toMatchObject({
      ok: false,
      reason: 'error',
      detail: expect.stringMatching(/worker exited/),
    });
    expect(await within(detectMouth(image), NO_HANG_MS)).toMatchObject({ ok: true });
  }, 60_000);

  it('between tasks is not an uncaught error; the next detection succeeds', async () => {
    const image = await portrait();
    await detectMouth(image);
    const [worker] = faceDetectorWorkers();
    // What Node reports for an exception thrown inside an idle worker thread: piscina re-emits it on the pool.
    expect(() => worker.emit('error', new Error('uncaught inside the worker'))).not.toThrow();
    expect(await within(detectMouth(image), NO_HANG_MS)).toMatchObject({ ok: true });
  }, 60_000);
});
