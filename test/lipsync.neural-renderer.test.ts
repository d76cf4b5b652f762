/**
 * lipsync_b's renderer on the real inference pool with tiny ONNX models of the Wav2Lip signature
 * (test/helpers/tiny-onnx.ts: the lower half of the face brightens with the mean mel level): the mouth region
 * follows the audio energy, the upper face and frames without speech are the avatar photo byte for byte, frames
 * asked for together run as one batch, and the start-up check says why a model is not usable.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { InferencePool } from '../actors/inference/pool.ts';
import { RenderPool } from '../actors/render/pool.ts';
import { LocalLipsyncModel } from '../actors/lipsync/local-model.ts';
import { faceCropOf } from '../actors/lipsync/face-crop.ts';
import type { NeuralLipsyncRenderer } from '../actors/lipsync/neural-renderer.ts';
import type { AvatarSource, FrameRequest, I420Frame } from '../actors/render/types.ts';
import { CLOSED_MOUTH } from '../actors/render/types.ts';
import { tinyLipsyncModel, wrongSignatureModel, writeModelFile, WRONG_SIGNATURE_KINDS } from './helpers/tiny-onnx.ts';

const ASTRONAUT_DIR = path.resolve(import.meta.dirname, '..', 'avatars', 'astronaut');
const astronaut: AvatarSource = {
  id: 'astronaut',
  dir: ASTRONAUT_DIR,
  manifest: JSON.parse(readFileSync(path.join(ASTRONAUT_DIR, 'manifest.json'), 'utf8')),
};

/** 16 kHz audio around a frame: broadband noise at `amplitude` (0 = silence) over the whole window; null = no audio. */
function request(frameIdx: number, amplitude: number | null): FrameRequest {
  const base: FrameRequest = {
    frameIdx,
    ptsMs: frameIdx * 40,
    mouth: CLOSED_MOUTH,
    level: 0,
    speaking: amplitude !== null,
  };
  if (amplitude === null) return base;
  let state = 99;
  const pcm = Int16Array.from({ length: 4000 }, () => {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    return Math.round(amplitude * 32767 * (state / 2 ** 31 - 1));
  });
  return { ...base, audio: { sampleRate: 16_000, pcm, leadSamples: 500 } };
}

function meanLuma(frame: I420Frame, x0: number, y0: number, x1: number, y1: number): number {
  let sum = 0;
  for (let y = y0; y < y1; y++) for (let x = x0; x < x1; x++) sum += frame.data[y * frame.width + x];
  return sum / ((x1 - x0) * (y1 - y0));
}

describe('lipsync_b renderer on the inference pool', () => {
  let pool: InferencePool;
  let model: { path: string; remove(): Promise<void> };
  let local: LocalLipsyncModel;
  let renderer: NeuralLipsyncRenderer;

  beforeAll(async () => {
    pool = new InferencePool({ batchWindowMs: 20 });
    model = await writeModelFile(
      tinyLipsyncModel({ size: 96, melName: 'audio_sequences', faceName: 'face_sequences', faceFirst: true }),
    );
    local = new LocalLipsyncModel({ file: model.path, provider: 'cpu', pool: () => pool });
    const status = await local.check();
    expect(status.state, status.reason).toBe('connected');
    renderer = await local.open(astronaut);
  });

  afterAll(async () => {
    renderer?.close();
    await pool?.close();
    await model?.remove();
  });

  it('brightens the mouth region with the audio energy and leaves the upper face and idle frames untouched', async () => {
    const amplitudes = [null, 0, 0.003, 0.03, 0.3];
    const frames = await renderer.render(amplitudes.map((amplitude, i) => request(i, amplitude)));
    const [idle] = frames;
    const crop = faceCropOf(astronaut);
    const mouth = {
      x0: crop.x + crop.side * 0.3,
      y0: crop.y + crop.side * 0.65,
      x1: crop.x + crop.side * 0.7,
      y1: crop.y + crop.side * 0.85,
    };
    const lumas = frames.map((frame) =>
      meanLuma(frame, Math.round(mouth.x0), Math.round(mouth.y0), Math.round(mouth.x1), Math.round(mouth.y1)),
    );
    // Louder → brighter, strictly, from silence up.
    for (let i = 2; i < lumas.length; i++)
      expect(lumas[i], `amplitude ${amplitudes[i]}`).toBeGreaterThan(lumas[i - 1] + 1);
    expect(lumas.at(-1)! - lumas[1]).toBeGreaterThan(20);
    // Everything above the crop's midline (eyes, forehead, hair) and every row outside the crop is the photo.
    const upperEnd = (crop.y + crop.side / 2) * idle.width;
    const lowerStart = (crop.y + crop.side) * idle.width;
    for (const frame of frames) {
      expect(
        Buffer.compare(Buffer.from(frame.data.subarray(0, upperEnd)), Buffer.from(idle.data.subarray(0, upperEnd))),
      ).toBe(0);
      expect(
        Buffer.compare(
          Buffer.from(frame.data.subarray(lowerStart, idle.width * idle.height)),
          Buffer.from(idle.data.subarray(lowerStart, idle.width * idle.height)),
        ),
      ).toBe(0);
    }
    expect(renderer.counts.idle).toBeGreaterThanOrEqual(1);
  });

  it('runs frames asked for together as one batch in the pool', async () => {
    const before = pool.stats;
    await renderer.render(Array.from({ length: 8 }, (_, i) => request(100 + i, 0.1)));
    const after = pool.stats;
    expect(after.items - before.items).toBe(8);
    expect(after.batches - before.batches).toBeLessThan(8);
    expect(after.largestBatch).toBeGreaterThan(1);
  });
});

describe('lipsync_b renderer with its mel windows and paste-back in the render pool', () => {
  let pool: InferencePool;
  let renderPool: RenderPool;
  let model: { path: string; remove(): Promise<void> };
  let inline: NeuralLipsyncRenderer;
  let offloaded: NeuralLipsyncRenderer;

  beforeAll(async () => {
    pool = new InferencePool({ batchWindowMs: 5 });
    renderPool = new RenderPool({ threads: 2 });
    model = await writeModelFile(tinyLipsyncModel({ size: 96 }), 'offload.onnx');
    const plain = new LocalLipsyncModel({ file: model.path, provider: 'cpu', pool: () => pool });
    const withWorkers = new LocalLipsyncModel({
      file: model.path,
      provider: 'cpu',
      pool: () => pool,
      offload: renderPool,
    });
    expect((await plain.check()).state).toBe('connected');
    expect((await withWorkers.check()).state).toBe('connected');
    inline = await plain.open(astronaut);
    offloaded = await withWorkers.open(astronaut);
  });

  afterAll(async () => {
    inline?.close();
    offloaded?.close();
    await renderPool?.close();
    await pool?.close();
    await model?.remove();
  });

  it('renders the same frames, byte for byte, as the main-thread stages (idle, silence and speech mixed, in order)', async () => {
    const amplitudes = [0.3, null, 0, 0.01, 0.1, null, 0.003, 0.2];
    const asked = amplitudes.map((amplitude, i) => request(200 + i, amplitude));
    const expected = await inline.render(asked);
    const tasksBefore = renderPool.loadSnapshot.completed;
    const got = await offloaded.render(asked);
    expect(got).toHaveLength(expected.length);
    got.forEach((frame, i) =>
      expect(Buffer.compare(Buffer.from(frame.data), Buffer.from(expected[i].data)), `frame ${i}`).toBe(0),
    );
    expect(offloaded.counts).toEqual(inline.counts);
    // One mel task and one paste-back task for the call.
    expect(renderPool.loadSnapshot.completed - tasksBefore).toBe(2);
  });
});

describe('lipsync_b start-up check', () => {
  let pool: InferencePool;
  beforeAll(() => {
    pool = new InferencePool({ threads: 1 });
  });
  afterAll(async () => {
    await pool?.close();
  });

  it('is not configured without SERVICE_LIPSYNC_B_MODEL, and says which variable to set', async () => {
    const local = new LocalLipsyncModel({ file: null, provider: 'cpu', pool: () => pool });
    expect((await local.check()).state).toBe('not_configured');
    expect(local.status.reason).toContain('SERVICE_LIPSYNC_B_MODEL');
  });

  it('reports a missing file and a file that is not ONNX, without the path', async () => {
    const missing = new LocalLipsyncModel({
      file: path.join(ASTRONAUT_DIR, 'no-such-model.onnx'),
      provider: 'cpu',
      pool: () => pool,
    });
    const status = await missing.check();
    expect(status.state).toBe('error');
    expect(status.reason).toMatch(/does not exist/);
    expect(status.reason).not.toContain(ASTRONAUT_DIR);
    const junk = await writeModelFile(new TextEncoder().encode('not a model'), 'junk.onnx');
    try {
      const bad = new LocalLipsyncModel({ file: junk.path, provider: 'cpu', pool: () => pool });
      const badStatus = await bad.check();
      expect(badStatus.state).toBe('error');
      expect(badStatus.reason).not.toContain(junk.path);
    } finally {
      await junk.remove();
    }
  });

  it.each(WRONG_SIGNATURE_KINDS)(
    'leaves a model with a wrong signature (%s) not connected, with the declared tensors as the reason',
    async (kind) => {
      const file = await writeModelFile(wrongSignatureModel(kind), `${kind}.onnx`);
      try {
        const local = new LocalLipsyncModel({ file: file.path, provider: 'cpu', pool: () => pool });
        const status = await local.check();
        expect(status.state).toBe('error');
        expect(status.reason).toMatch(/Wav2Lip signature/);
        expect(status.reason).toMatch(/\[/);
        expect(status.reason).not.toContain(file.path);
        await expect(local.open(astronaut)).rejects.toThrow(/not connected/);
      } finally {
        await file.remove();
      }
    },
  );
});
