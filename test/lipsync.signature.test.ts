/**
 * The Wav2Lip-family signature check (actors/lipsync/model-signature.ts) on tiny ONNX models loaded in real
 * onnxruntime-node, under the input names real exports use and several face sizes, and on KServe-style metadata.
 */
import ort from 'onnxruntime-node';
import { afterAll, describe, expect, it } from 'vitest';
import {
  inspectLipsyncModel,
  inspectOnnxSession,
  tensorSpecsFromKserve,
  type LipsyncSignatureProblem,
} from '../actors/lipsync/model-signature.ts';
import {
  tinyLipsyncModel,
  tinyLipsyncReference,
  WRONG_SIGNATURE_KINDS,
  wrongSignatureModel,
  writeModelFile,
  type WrongSignatureKind,
} from './helpers/tiny-onnx.ts';

const sessions: ort.InferenceSession[] = [];
async function load(model: Uint8Array | string): Promise<ort.InferenceSession> {
  const session =
    typeof model === 'string' ? await ort.InferenceSession.create(model) : await ort.InferenceSession.create(model);
  sessions.push(session);
  return session;
}
afterAll(async () => {
  await Promise.all(sessions.map((session) => session.release()));
});

/** A face batch whose reference channels are mid-grey; the masked channels hold noise the model must ignore. */
function faceOf(batch: number, size: number): Float32Array {
  const face = new Float32Array(batch * 6 * size * size);
  for (let i = 0; i < face.length; i++) face[i] = Math.floor(i / (size * size)) % 6 >= 3 ? 0.5 : (i % 7) / 7;
  return face;
}

function meanOfRows(image: Float32Array, size: number, channel: number, rows: [number, number]): number {
  let sum = 0;
  for (let y = rows[0]; y < rows[1]; y++)
    for (let x = 0; x < size; x++) sum += image[channel * size * size + y * size + x];
  return sum / ((rows[1] - rows[0]) * size);
}

describe('a tiny Wav2Lip-shaped ONNX model in onnxruntime-node', () => {
  const exports = [
    { melName: 'mel', faceName: 'face', size: 96, faceFirst: false },
    { melName: 'audio', faceName: 'video_frames', size: 256, faceFirst: true },
    { melName: 'source', faceName: 'target', size: 288, faceFirst: false },
    { melName: 'mel_spectrogram', faceName: 'face_sequences', size: 96, faceFirst: true },
  ];
  for (const names of exports) {
    it(`is recognised by shape with inputs named ${names.melName}/${names.faceName} at S = ${names.size}`, async () => {
      const session = await load(tinyLipsyncModel({ ...names, outputName: `${names.faceName}_out` }));
      const check = inspectOnnxSession(session);
      expect(check).toEqual({
        ok: true,
        signature: {
          melInput: names.melName,
          faceInput: names.faceName,
          output: `${names.faceName}_out`,
          size: names.size,
          fixedBatch: null,
        },
      });
    });
  }

  it('brightens the mouth region with speech, leaves the upper face alone, and matches the JS reference', async () => {
    const size = 96;
    const session = await load(tinyLipsyncModel({ size }));
    const face = faceOf(2, size);
    const mel = new Float32Array(2 * 80 * 16);
    mel.fill(-4, 0, 80 * 16); // item 0: silence
    mel.fill(-0.5, 80 * 16); // item 1: speech
    const result = await session.run({
      mel: new ort.Tensor('float32', mel, [2, 1, 80, 16]),
      face: new ort.Tensor('float32', face, [2, 6, size, size]),
    });
    const output = result.output;
    expect(output.dims).toEqual([2, 3, size, size]);
    const pixels = output.data as Float32Array;
    const reference = tinyLipsyncReference(mel, face, 2, size);
    let worst = 0;
    for (let i = 0; i < pixels.length; i++) worst = Math.max(worst, Math.abs(pixels[i] - reference[i]));
    expect(worst).toBeLessThan(1e-5);

    const silent = pixels.subarray(0, 3 * size * size);
    const speaking = pixels.subarray(3 * size * size);
    for (const channel of [0, 1, 2]) {
      expect(meanOfRows(silent, size, channel, [0, size])).toBeCloseTo(0.5, 5); // sigmoid(0) on a mid-grey reference
      expect(meanOfRows(speaking, size, channel, [0, size / 2])).toBeCloseTo(0.5, 5);
      expect(meanOfRows(speaking, size, channel, [size / 2, size])).toBeGreaterThan(0.8); // sigmoid(0.5 · 3.5) ≈ 0.85
    }
    expect(pixels.every((v) => v >= 0 && v <= 1)).toBe(true);
  });

  it('reports a fixed batch size when the export fixed one', async () => {
    const check = inspectOnnxSession(await load(tinyLipsyncModel({ batch: 1 })));
    expect(check.ok && check.signature.fixedBatch).toBe(1);
  });

  it('loads from a file written to a temp directory', async () => {
    const file = await writeModelFile(tinyLipsyncModel({ size: 128 }));
    try {
      const check = inspectOnnxSession(await load(file.path));
      expect(check.ok && check.signature.size).toBe(128);
    } finally {
      await file.remove();
    }
  });
});

describe('models whose signature does not fit', () => {
  const expected: Record<WrongSignatureKind, { problem: LipsyncSignatureProblem; mentions: string }> = {
    missing_mel_input: { problem: 'mel_input_missing', mentions: 'inputs: face FP32 [batch, 6, 96, 96]' },
    mel_rank_3: { problem: 'mel_input_missing', mentions: 'mel FP32 [batch, 80, 16]' },
    mel_wrong_width: { problem: 'mel_input_missing', mentions: 'mel FP32 [batch, 1, 80, 20]' },
    face_not_square: { problem: 'face_not_square', mentions: 'face FP32 [batch, 6, 96, 64]' },
    output_six_channels: { problem: 'output_missing', mentions: 'output FP32 [batch, 6, 96, 96]' },
    face_size_dynamic: { problem: 'face_size_unknown', mentions: 'face FP32 [batch, 6, height, width]' },
  };
  for (const kind of WRONG_SIGNATURE_KINDS) {
    it(`are refused with a typed reason: ${kind}`, async () => {
      const session = await load(wrongSignatureModel(kind));
      // The model is valid ONNX: onnxruntime loaded it. Only its signature is wrong.
      const check = inspectOnnxSession(session);
      expect(check.ok).toBe(false);
      if (check.ok) return;
      expect(check.problem).toBe(expected[kind].problem);
      expect(check.reason).toContain(expected[kind].mentions);
    });
  }
});

describe('the same check on KServe v2 model metadata', () => {
  const tensor = (name: string, datatype: string, shape: number[]) => ({ name, datatype, shape });

  it('accepts −1 batch dimensions and finds the tensors whatever their order', () => {
    const check = inspectLipsyncModel(
      tensorSpecsFromKserve([
        tensor('video_frames', 'FP32', [-1, 6, 256, 256]),
        tensor('audio', 'FP32', [-1, 1, 80, 16]),
      ]),
      tensorSpecsFromKserve([tensor('aux', 'FP32', [-1, 1]), tensor('generated', 'FP32', [-1, 3, 256, 256])]),
    );
    expect(check).toEqual({
      ok: true,
      signature: { melInput: 'audio', faceInput: 'video_frames', output: 'generated', size: 256, fixedBatch: null },
    });
  });

  it('refuses half-precision tensors: the client speaks FP32 only', () => {
    const check = inspectLipsyncModel(
      tensorSpecsFromKserve([tensor('mel', 'FP16', [-1, 1, 80, 16]), tensor('face', 'FP16', [-1, 6, 96, 96])]),
      tensorSpecsFromKserve([tensor('out', 'FP16', [-1, 3, 96, 96])]),
    );
    expect(check).toMatchObject({ ok: false, problem: 'datatype' });
  });

  it('refuses an extra input it could not feed', () => {
    const check = inspectLipsyncModel(
      tensorSpecsFromKserve([
        tensor('mel', 'FP32', [-1, 1, 80, 16]),
        tensor('face', 'FP32', [-1, 6, 96, 96]),
        tensor('speaker', 'INT64', [-1, 1]),
      ]),
      tensorSpecsFromKserve([tensor('out', 'FP32', [-1, 3, 96, 96])]),
    );
    expect(check).toMatchObject({ ok: false, problem: 'extra_inputs' });
  });

  it('refuses tensors that fix different batch sizes', () => {
    const check = inspectLipsyncModel(
      tensorSpecsFromKserve([tensor('mel', 'FP32', [1, 1, 80, 16]), tensor('face', 'FP32', [4, 6, 96, 96])]),
      tensorSpecsFromKserve([tensor('out', 'FP32', [-1, 3, 96, 96])]),
    );
    expect(check).toMatchObject({ ok: false, problem: 'batch_mismatch' });
  });

  it('refuses an output of another size than the face', () => {
    const check = inspectLipsyncModel(
      tensorSpecsFromKserve([tensor('mel', 'FP32', [-1, 1, 80, 16]), tensor('face', 'FP32', [-1, 6, 96, 96])]),
      tensorSpecsFromKserve([tensor('out', 'FP32', [-1, 3, 192, 192])]),
    );
    expect(check).toMatchObject({ ok: false, problem: 'output_missing' });
  });
});
