/**
 * Tiny ONNX models with the Wav2Lip-family signature, built in memory with onnx-proto, for tests that need a real
 * model in real onnxruntime (or served over KServe) without shipping weights.
 *
 * The lip-sync function (opset 13: Slice, Sub, Mul, ReduceMean, Add, Sigmoid):
 *
 *   output[b, c, y, x] = sigmoid(CONTRAST · (face[b, 3 + c, y, x] − 0.5) + GAIN · (mean(mel[b]) + 4) · mouth[y, x])
 *
 * `mouth` is 1 on the lower half of the face and 0 above, so silence (mel ≡ −4) returns a contrast curve of the
 * reference face, and speech brightens the mouth region in proportion to its mean mel level.
 * `tinyLipsyncReference` computes the same thing in JavaScript.
 *
 * `wrongSignatureModel(kind)` builds valid, runnable models whose signature does not fit (missing input, mel of
 * rank 3, mel of the wrong width, non-square face, six output channels, dynamic face size).
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import onnxProto from 'onnx-proto';

const { onnx } = onnxProto;

export const TINY_CONTRAST = 4;
export const TINY_GAIN = 0.5;
/** The opset the graphs are written for (ReduceMean takes `axes` as an attribute up to opset 17). */
const OPSET = 13;
/** IR version 7 goes with opset 13 and is read by every onnxruntime since 1.6. */
const IR_VERSION = 7;

type Dim = number | string;

export interface TinyLipsyncModelOptions {
  /** Face side S (default 96). */
  size?: number;
  melName?: string;
  faceName?: string;
  outputName?: string;
  /** Declare the face input first (exports differ; the signature check must not care). */
  faceFirst?: boolean;
  /** A fixed batch size instead of the symbolic `batch` dimension. */
  batch?: number;
}

export type WrongSignatureKind =
  | 'missing_mel_input'
  | 'mel_rank_3'
  | 'mel_wrong_width'
  | 'face_not_square'
  | 'output_six_channels'
  | 'face_size_dynamic';

export const WRONG_SIGNATURE_KINDS: readonly WrongSignatureKind[] = [
  'missing_mel_input',
  'mel_rank_3',
  'mel_wrong_width',
  'face_not_square',
  'output_six_channels',
  'face_size_dynamic',
];

interface GraphSpec {
  melName: string;
  faceName: string;
  outputName: string;
  /** null: the model has no mel input at all. */
  melDims: Dim[] | null;
  faceDims: Dim[];
  /** Mask height and width (the face size the graph computes with, even when the declaration is dynamic). */
  height: number;
  width: number;
  faceFirst: boolean;
  /** Output every face channel through the sigmoid instead of the reference three. */
  allChannels: boolean;
}

export function tinyLipsyncModel(options: TinyLipsyncModelOptions = {}): Uint8Array {
  const size = options.size ?? 96;
  const batch: Dim = options.batch ?? 'batch';
  return encodeModel({
    melName: options.melName ?? 'mel',
    faceName: options.faceName ?? 'face',
    outputName: options.outputName ?? 'output',
    melDims: [batch, 1, 80, 16],
    faceDims: [batch, 6, size, size],
    height: size,
    width: size,
    faceFirst: options.faceFirst ?? false,
    allChannels: false,
  });
}

export function wrongSignatureModel(kind: WrongSignatureKind): Uint8Array {
  const base: GraphSpec = {
    melName: 'mel',
    faceName: 'face',
    outputName: 'output',
    melDims: ['batch', 1, 80, 16],
    faceDims: ['batch', 6, 96, 96],
    height: 96,
    width: 96,
    faceFirst: false,
    allChannels: false,
  };
  switch (kind) {
    case 'missing_mel_input':
      return encodeModel({ ...base, melDims: null });
    case 'mel_rank_3':
      return encodeModel({ ...base, melDims: ['batch', 80, 16] });
    case 'mel_wrong_width':
      return encodeModel({ ...base, melDims: ['batch', 1, 80, 20] });
    case 'face_not_square':
      return encodeModel({ ...base, faceDims: ['batch', 6, 96, 64], width: 64 });
    case 'output_six_channels':
      return encodeModel({ ...base, allChannels: true });
    case 'face_size_dynamic':
      return encodeModel({ ...base, faceDims: ['batch', 6, 'height', 'width'] });
  }
}

/** What the tiny model computes, in float64: mel [B·1·80·16], face [B·6·S·S] → [B·3·S·S]. */
export function tinyLipsyncReference(mel: Float32Array, face: Float32Array, batch: number, size: number): Float32Array {
  const plane = size * size;
  const melPerItem = mel.length / batch;
  const out = new Float32Array(batch * 3 * plane);
  for (let b = 0; b < batch; b++) {
    let sum = 0;
    for (let i = 0; i < melPerItem; i++) sum += mel[b * melPerItem + i];
    const lift = TINY_GAIN * (sum / melPerItem + 4);
    for (let c = 0; c < 3; c++) {
      for (let y = 0; y < size; y++) {
        for (let x = 0; x < size; x++) {
          const reference = face[(b * 6 + 3 + c) * plane + y * size + x];
          const logit = TINY_CONTRAST * (reference - 0.5) + (y >= size / 2 ? lift : 0);
          out[(b * 3 + c) * plane + y * size + x] = 1 / (1 + Math.exp(-logit));
        }
      }
    }
  }
  return out;
}

/** Writes the model to a fresh temp directory; `remove()` deletes the directory again. */
export async function writeModelFile(
  bytes: Uint8Array,
  fileName = 'model.onnx',
): Promise<{ path: string; remove(): Promise<void> }> {
  const dir = await mkdtemp(join(tmpdir(), 'tiny-onnx-'));
  const path = join(dir, fileName);
  await writeFile(path, bytes);
  return { path, remove: () => rm(dir, { recursive: true, force: true }) };
}

// ---------------------------------------------------------------------------------------------------------------

function valueInfo(name: string, dims: Dim[]) {
  return {
    name,
    type: {
      tensorType: {
        elemType: onnx.TensorProto.DataType.FLOAT,
        shape: { dim: dims.map((dim) => (typeof dim === 'number' ? { dimValue: dim } : { dimParam: dim })) },
      },
    },
  };
}

const floatTensor = (name: string, dims: number[], values: ArrayLike<number>) => ({
  name,
  dataType: onnx.TensorProto.DataType.FLOAT,
  dims,
  floatData: Array.from(values),
});

const int64Tensor = (name: string, values: number[]) => ({
  name,
  dataType: onnx.TensorProto.DataType.INT64,
  dims: [values.length],
  int64Data: values,
});

const node = (opType: string, input: string[], output: string[], attribute: object[] = []) => ({
  opType,
  input,
  output,
  name: output[0],
  attribute,
});

function encodeModel(spec: GraphSpec): Uint8Array {
  const initializer: object[] = [floatTensor('half', [], [0.5]), floatTensor('contrast', [], [TINY_CONTRAST])];
  const nodes: object[] = [];
  let faceTerm = spec.faceName;
  if (!spec.allChannels) {
    initializer.push(int64Tensor('ref_start', [3]), int64Tensor('ref_end', [6]), int64Tensor('channel_axis', [1]));
    nodes.push(node('Slice', [spec.faceName, 'ref_start', 'ref_end', 'channel_axis'], ['reference']));
    faceTerm = 'reference';
  }
  nodes.push(node('Sub', [faceTerm, 'half'], ['centred']), node('Mul', ['centred', 'contrast'], ['face_logit']));
  if (spec.melDims) {
    const mouth = new Float32Array(spec.height * spec.width);
    mouth.fill(1, Math.ceil(spec.height / 2) * spec.width);
    initializer.push(
      floatTensor('four', [], [4]),
      floatTensor('gain', [], [TINY_GAIN]),
      floatTensor('mouth', [1, 1, spec.height, spec.width], mouth),
    );
    // Rank 4 mel: per-item mean, kept as [B,1,1,1] so it broadcasts over the face. Anything else: one scalar mean.
    const perItem = spec.melDims.length === 4;
    const reduce = perItem
      ? node(
          'ReduceMean',
          [spec.melName],
          ['mel_mean'],
          [{ name: 'axes', type: onnx.AttributeProto.AttributeType.INTS, ints: [1, 2, 3] }],
        )
      : node(
          'ReduceMean',
          [spec.melName],
          ['mel_mean'],
          [{ name: 'keepdims', type: onnx.AttributeProto.AttributeType.INT, i: 0 }],
        );
    nodes.push(
      reduce,
      node('Add', ['mel_mean', 'four'], ['energy']),
      node('Mul', ['energy', 'gain'], ['lift']),
      node('Mul', ['lift', 'mouth'], ['mouth_lift']),
      node('Add', ['face_logit', 'mouth_lift'], ['logit']),
      node('Sigmoid', ['logit'], [spec.outputName]),
    );
  } else {
    nodes.push(node('Sigmoid', ['face_logit'], [spec.outputName]));
  }
  const melInput = spec.melDims ? [valueInfo(spec.melName, spec.melDims)] : [];
  const faceInput = [valueInfo(spec.faceName, spec.faceDims)];
  const outputDims: Dim[] = [spec.faceDims[0], spec.allChannels ? 6 : 3, spec.faceDims[2], spec.faceDims[3]];
  const model = onnx.ModelProto.create({
    irVersion: IR_VERSION,
    producerName: 'tiny-onnx test helper',
    opsetImport: [{ domain: '', version: OPSET }],
    graph: {
      name: 'tiny_lipsync',
      node: nodes,
      initializer,
      input: spec.faceFirst ? [...faceInput, ...melInput] : [...melInput, ...faceInput],
      output: [valueInfo(spec.outputName, outputDims)],
    },
  });
  return onnx.ModelProto.encode(model).finish();
}
