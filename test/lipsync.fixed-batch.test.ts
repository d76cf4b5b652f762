/**
 * Models exported with a fixed batch size: onnxruntime and KServe servers refuse any other batch, so the backends
 * must send exactly that many rows. On the inference pool (`lipsync_b`) a fixed batch of 1 makes every frame its own
 * run; a fixed batch above 1 is refused at the start-up check. On KServe (`lipsync_c`) a fixed batch of N sends
 * requests of exactly N rows, padding the last one by repeating its last frame and dropping the padded answers.
 * Either way every frame comes back as the one a dynamic-batch model renders for the same audio, in request order.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { InferencePool } from '../actors/inference/pool.ts';
import { LocalLipsyncModel } from '../actors/lipsync/local-model.ts';
import type { NeuralLipsyncRenderer } from '../actors/lipsync/neural-renderer.ts';
import { RemoteLipsyncModel } from '../actors/lipsync/remote-model.ts';
import type { AvatarSource, FrameRequest, I420Frame } from '../actors/render/types.ts';
import { CLOSED_MOUTH } from '../actors/render/types.ts';
import { FakeKserveServer } from './fakes/kserve-server.ts';
import { tinyLipsyncModel, writeModelFile } from './helpers/tiny-onnx.ts';

const ASTRONAUT_DIR = path.resolve(import.meta.dirname, '..', 'avatars', 'astronaut');
const astronaut: AvatarSource = {
  id: 'astronaut',
  dir: ASTRONAUT_DIR,
  manifest: JSON.parse(readFileSync(path.join(ASTRONAUT_DIR, 'manifest.json'), 'utf8')),
};

/** Distinct loudness per frame, so a frame answered with another frame's output would show. */
const AMPLITUDES = [0.002, 0.3, 0.01, 0.1, 0.03, 0.2];

function request(frameIdx: number, amplitude: number): FrameRequest {
  let state = 7 + frameIdx;
  const pcm = Int16Array.from({ length: 4000 }, () => {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    return Math.round(amplitude * 32767 * (state / 2 ** 31 - 1));
  });
  return {
    frameIdx,
    ptsMs: frameIdx * 40,
    mouth: CLOSED_MOUTH,
    level: 0,
    speaking: true,
    audio: { sampleRate: 16_000, pcm, leadSamples: 500 },
  };
}

const requests = (count: number, from = 0) =>
  AMPLITUDES.slice(0, count).map((amplitude, i) => request(from + i, amplitude));

/** Largest per-byte difference between two frames. */
function maxDiff(a: I420Frame, b: I420Frame): number {
  let max = 0;
  for (let i = 0; i < a.data.length; i++) max = Math.max(max, Math.abs(a.data[i] - b.data[i]));
  return max;
}

describe('fixed-batch lip-sync models', () => {
  let pool: InferencePool;
  const files: Array<{ path: string; remove(): Promise<void> }> = [];
  const renderers: NeuralLipsyncRenderer[] = [];
  /** The same frames from a dynamic-batch model: what every backend must return. */
  let expected: I420Frame[];

  async function localModel(batch: number | undefined): Promise<LocalLipsyncModel> {
    const file = await writeModelFile(tinyLipsyncModel({ size: 96, batch }), `tiny_b${batch ?? 'dyn'}.onnx`);
    files.push(file);
    return new LocalLipsyncModel({ file: file.path, provider: 'cpu', pool: () => pool });
  }

  beforeAll(async () => {
    // A wide batch window: frames asked for together would be stacked if the model allowed it.
    pool = new InferencePool({ batchWindowMs: 20 });
    const dynamic = await localModel(undefined);
    expect((await dynamic.check()).state).toBe('connected');
    const renderer = await dynamic.open(astronaut);
    renderers.push(renderer);
    expected = await renderer.render(requests(AMPLITUDES.length));
  }, 30_000);

  afterAll(async () => {
    for (const renderer of renderers) renderer.close();
    await pool?.close();
    for (const file of files) await file.remove();
  });

  it('pool, fixed batch 1: connected, every frame is its own run, frames equal the dynamic model’s', async () => {
    const local = await localModel(1);
    const status = await local.check();
    expect(status.state, status.reason).toBe('connected');
    if (status.state !== 'connected') return;
    expect(status.signature.fixedBatch).toBe(1);
    const renderer = await local.open(astronaut);
    renderers.push(renderer);
    const before = pool.stats;
    const frames = await renderer.render(requests(AMPLITUDES.length));
    const after = pool.stats;
    expect(after.items - before.items).toBe(AMPLITUDES.length);
    expect(after.batches - before.batches).toBe(AMPLITUDES.length);
    expect(after.failedBatches).toBe(before.failedBatches);
    frames.forEach((frame, i) => expect(maxDiff(frame, expected[i]), `frame ${i}`).toBe(0));
  });

  it('pool, fixed batch 4: refused at the check with a reason that says how to export it', async () => {
    const local = await localModel(4);
    const status = await local.check();
    expect(status.state).toBe('error');
    expect(status.reason).toMatch(/fixed batch of 4/);
    expect(status.reason).toMatch(/dynamic batch axis/);
    await expect(local.open(astronaut)).rejects.toThrow(/not connected/);
  });

  for (const batch of [4, 1]) {
    it(`KServe, fixed batch ${batch}: requests of exactly ${batch} rows, the last padded; frames equal the dynamic model’s`, async () => {
      const fake = await FakeKserveServer.start({
        model: tinyLipsyncModel({ size: 96, batch }),
        modelName: `wav2lip_b${batch}`,
      });
      try {
        const remote = new RemoteLipsyncModel({ baseUrl: fake.url, model: `wav2lip_b${batch}` });
        expect((await remote.refresh()).state).toBe('connected');
        const renderer = await remote.open(astronaut);
        renderers.push(renderer);
        // The live warm-up at open: one request, of exactly `batch` rows too.
        expect(fake.stats.batches).toEqual([batch]);
        // 3 frames: one request of 4 with one padded row (or 3 requests of 1).
        const three = await renderer.render(requests(3));
        expect(fake.stats.batches.slice(1)).toEqual(batch === 4 ? [4] : [1, 1, 1]);
        three.forEach((frame, i) => expect(maxDiff(frame, expected[i]), `frame ${i}`).toBe(0));
        // 6 frames: 4 + 2 (padded to 4), or 6 of 1.
        const six = await renderer.render(requests(6));
        expect(fake.stats.batches.slice(batch === 4 ? 2 : 4)).toEqual(batch === 4 ? [4, 4] : [1, 1, 1, 1, 1, 1]);
        six.forEach((frame, i) => expect(maxDiff(frame, expected[i]), `frame ${i}`).toBe(0));
        expect(renderer.counts.neural).toBe(9);
        expect(renderer.counts.fallback).toBe(0);
        expect(fake.stats.inferBinary).toBe(fake.stats.batches.length);
      } finally {
        await fake.close();
      }
    });
  }
});
