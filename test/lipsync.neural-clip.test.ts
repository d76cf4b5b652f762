/**
 * lipsync_b on a video avatar (Wav2Lip's video path): idle plays the loop, and a speaking frame takes the face
 * crop from the current loop frame's tracked box and pastes the generated face back into that loop frame, both
 * with the stages in this thread and in the render pool's workers. The tiny ONNX model stands in for Wav2Lip.
 */
import { rmSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { InferencePool } from '../actors/inference/pool.ts';
import { faceAt, prepareFace } from '../actors/lipsync/face-crop.ts';
import { LocalLipsyncModel } from '../actors/lipsync/local-model.ts';
import type { NeuralLipsyncRenderer } from '../actors/lipsync/neural-renderer.ts';
import { RenderPool } from '../actors/render/pool.ts';
import { WarpRenderer } from '../actors/render/renderers/warp.ts';
import type { AvatarSource, FrameRequest, I420Frame } from '../actors/render/types.ts';
import { makeClipBundle } from './helpers/clip-bundle.ts';
import { tinyLipsyncModel, writeModelFile } from './helpers/tiny-onnx.ts';
import { lumaDiff, request } from './render.fixtures.ts';

/** Speech under a frame: broadband noise over the whole audio window. */
function speaking(frameIdx: number): FrameRequest {
  let state = 7;
  const pcm = Int16Array.from({ length: 4000 }, () => {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    return Math.round(0.3 * 32767 * (state / 2 ** 31 - 1));
  });
  return { ...request(frameIdx, { speaking: true }), audio: { sampleRate: 16_000, pcm, leadSamples: 500 } };
}

const everything = { x0: 0, y0: 0, x1: 0, y1: 0 };
/** Rows above the face crop's midline on `frame`'s loop frame: never touched by the paste-back. */
const upperRows = (frame: I420Frame, rows: number) => Buffer.from(frame.data.subarray(0, rows * frame.width));

describe('lipsync_b on a video avatar', () => {
  let bundle: { source: AvatarSource; dir: string };
  let pool: InferencePool;
  let renderPool: RenderPool;
  let model: { path: string; remove(): Promise<void> };
  let loop: WarpRenderer;
  const renderers: Record<string, NeuralLipsyncRenderer> = {};

  beforeAll(async () => {
    bundle = await makeClipBundle();
    pool = new InferencePool({ batchWindowMs: 5 });
    renderPool = new RenderPool({ threads: 1 });
    model = await writeModelFile(tinyLipsyncModel({ size: 96 }), 'clip.onnx');
    const inline = new LocalLipsyncModel({ file: model.path, provider: 'cpu', pool: () => pool });
    const offloaded = new LocalLipsyncModel({
      file: model.path,
      provider: 'cpu',
      pool: () => pool,
      offload: renderPool,
    });
    expect((await inline.check()).state).toBe('connected');
    expect((await offloaded.check()).state).toBe('connected');
    // Opened without the loop in memory (as a session's catalog source is): the renderer reads it itself.
    const { clip: _clip, ...withoutLoop } = bundle.source;
    renderers.inline = await inline.open(withoutLoop);
    renderers['render pool'] = await offloaded.open(withoutLoop);
    loop = new WarpRenderer();
    await loop.prepare(bundle.source);
  });

  afterAll(async () => {
    for (const renderer of Object.values(renderers)) renderer.close();
    await renderPool?.close();
    await pool?.close();
    await model?.remove();
    if (bundle) rmSync(bundle.dir, { recursive: true, force: true });
  });

  it('each loop frame has its own face crop, at its tracked box', async () => {
    const face = await prepareFace(bundle.source, 96);
    // The synthetic clip moves the head 1 px right a frame; the crops follow (snapped to even pixels).
    expect(faceAt(face, 6).crop.x - faceAt(face, 0).crop.x).toBeGreaterThanOrEqual(5);
    expect(faceAt(face, 6).crop.x - faceAt(face, 0).crop.x).toBeLessThanOrEqual(7);
    expect(faceAt(face, 6).crop.side).toBe(faceAt(face, 0).crop.side);
    // Ping-pong: frame 16 of a 12-frame loop shows loop frame 6.
    expect(faceAt(face, 16)).toBe(faceAt(face, 6));
  });

  for (const name of ['inline', 'render pool']) {
    it(`${name}: idle plays the loop; speech pastes the generated face into the current loop frame`, async () => {
      const renderer = renderers[name];
      const [idle0, idle6, spoken6] = await renderer.render([request(0), request(6), speaking(6)]);
      // Idle frames are the loop's own frames, not the still.
      expect(lumaDiff(idle6, loop.render(request(6)), everything).outside).toBe(0);
      expect(lumaDiff(idle0, idle6, everything).outside).toBeGreaterThan(1);
      // The speaking frame is loop frame 6 above the face crop's midline (the still would be 6 px off)...
      const crop = faceAt(await prepareFace(bundle.source, 96), 6).crop;
      const rows = crop.y + crop.side / 2;
      expect(Buffer.compare(upperRows(spoken6, rows), upperRows(idle6, rows))).toBe(0);
      // ...and the model's face is pasted below it.
      const mouth = {
        x0: crop.x + crop.side * 0.3,
        y0: crop.y + crop.side * 0.65,
        x1: crop.x + crop.side * 0.7,
        y1: crop.y + crop.side * 0.85,
      };
      expect(lumaDiff(spoken6, idle6, mouth).inside).toBeGreaterThan(2);
      expect(renderer.counts.neural).toBeGreaterThanOrEqual(1);
    });
  }
});
