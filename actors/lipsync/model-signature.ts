/**
 * Decides whether a model has the Wav2Lip-family signature, and which tensor is which, from its declared shapes
 * alone: exports name the inputs `mel`/`audio`/`source` and `face`/`video_frames`/`target`, so names prove nothing.
 *
 *   mel window  [B, 1, 80, 16]   the 16 mel columns (200 ms) of one video frame, values in [−4, 4]
 *   face        [B, 6, S, S]     channels 0–2 the face with its lower half blanked, 3–5 the reference face, in [0, 1]
 *   output      [B, 3, S, S]     the generated face, in [0, 1]
 *
 * S comes from the model (96 for Wav2Lip, 256 or 288 for later members). B may be dynamic or fixed.
 * The same check serves onnxruntime-node session metadata and KServe v2 model metadata.
 */
import type { InferenceSession } from 'onnxruntime-node';

/** A declared dimension: a size, or dynamic (KServe writes −1, ONNX a symbolic name, absent → null). */
export type DeclaredDim = number | string | null;

/** One input or output as a model declares it; datatypes use KServe's names (FP32, FP16, INT64…). */
export interface TensorSpec {
  name: string;
  datatype: string;
  shape: readonly DeclaredDim[];
}

export interface LipsyncSignature {
  melInput: string;
  faceInput: string;
  output: string;
  /** Face side in pixels. */
  size: number;
  /** Set when the model was exported with a fixed batch size; null when the batch dimension is dynamic. */
  fixedBatch: number | null;
}

export type LipsyncSignatureProblem =
  | 'mel_input_missing'
  | 'face_input_missing'
  | 'extra_inputs'
  | 'face_not_square'
  | 'face_size_unknown'
  | 'output_missing'
  | 'datatype'
  | 'batch_mismatch';

export type LipsyncSignatureCheck =
  | { ok: true; signature: LipsyncSignature }
  /** `reason` describes the declared tensors (names and shapes), never where the model came from. */
  | { ok: false; problem: LipsyncSignatureProblem; reason: string };

export const MEL_INPUT_DIMS = [1, 80, 16] as const;
export const FACE_CHANNELS = 6;
export const OUTPUT_CHANNELS = 3;
/** The only tensor type the service feeds and reads. */
export const LIPSYNC_DATATYPE = 'FP32';

const isFixed = (dim: DeclaredDim): dim is number => typeof dim === 'number' && dim >= 0;

export function formatShape(shape: readonly DeclaredDim[]): string {
  return `[${shape.map((dim) => (isFixed(dim) ? String(dim) : typeof dim === 'string' && dim !== '' ? dim : '?')).join(', ')}]`;
}

const describe = (tensor: TensorSpec): string => `${tensor.name} ${tensor.datatype} ${formatShape(tensor.shape)}`;
const fail = (problem: LipsyncSignatureProblem, reason: string): LipsyncSignatureCheck => ({
  ok: false,
  problem,
  reason,
});

function looksLikeMel(tensor: TensorSpec): boolean {
  return tensor.shape.length === 4 && MEL_INPUT_DIMS.every((size, i) => tensor.shape[i + 1] === size);
}

function looksLikeFace(tensor: TensorSpec): boolean {
  return tensor.shape.length === 4 && tensor.shape[1] === FACE_CHANNELS;
}

/** Fixed batch size agreed by every tensor that fixes one; undefined when two disagree. */
function agreedBatch(tensors: TensorSpec[]): number | null | undefined {
  let batch: number | null = null;
  for (const tensor of tensors) {
    const dim = tensor.shape[0];
    if (!isFixed(dim)) continue;
    if (batch !== null && batch !== dim) return undefined;
    batch = dim;
  }
  return batch;
}

export function inspectLipsyncModel(
  inputs: readonly TensorSpec[],
  outputs: readonly TensorSpec[],
): LipsyncSignatureCheck {
  const inputList = inputs.map(describe).join('; ') || 'none';
  const melCandidates = inputs.filter(looksLikeMel);
  if (melCandidates.length !== 1) {
    return fail(
      'mel_input_missing',
      `expected exactly one input shaped [batch, 1, 80, 16] (the mel window); inputs: ${inputList}`,
    );
  }
  const faceCandidates = inputs.filter(looksLikeFace);
  if (faceCandidates.length !== 1) {
    return fail(
      'face_input_missing',
      `expected exactly one input shaped [batch, 6, S, S] (masked face + reference); inputs: ${inputList}`,
    );
  }
  const [mel] = melCandidates;
  const [face] = faceCandidates;
  if (inputs.length > 2) {
    return fail('extra_inputs', `the model wants inputs besides the mel window and the face; inputs: ${inputList}`);
  }
  const [height, width] = [face.shape[2], face.shape[3]];
  if (!isFixed(height) || !isFixed(width) || height === 0) {
    return fail('face_size_unknown', `the face input does not declare its size: ${describe(face)}`);
  }
  if (height !== width) return fail('face_not_square', `the face input is not square: ${describe(face)}`);
  const size = height;

  const output = outputs.find(
    (tensor) =>
      tensor.shape.length === 4 &&
      tensor.shape[1] === OUTPUT_CHANNELS &&
      [tensor.shape[2], tensor.shape[3]].every((dim) => !isFixed(dim) || dim === size),
  );
  if (!output) {
    return fail(
      'output_missing',
      `expected an output shaped [batch, 3, ${size}, ${size}]; outputs: ${outputs.map(describe).join('; ') || 'none'}`,
    );
  }
  const wrongType = [mel, face, output].find((tensor) => tensor.datatype !== LIPSYNC_DATATYPE);
  if (wrongType) return fail('datatype', `tensors must be ${LIPSYNC_DATATYPE}: ${describe(wrongType)}`);
  const fixedBatch = agreedBatch([mel, face, output]);
  if (fixedBatch === undefined) {
    return fail(
      'batch_mismatch',
      `the tensors fix different batch sizes: ${[mel, face, output].map(describe).join('; ')}`,
    );
  }
  return { ok: true, signature: { melInput: mel.name, faceInput: face.name, output: output.name, size, fixedBatch } };
}

/** onnxruntime's tensor element types → KServe datatype names. */
const ONNX_TO_KSERVE_DATATYPE: Record<string, string> = {
  float32: 'FP32',
  float16: 'FP16',
  float64: 'FP64',
  bfloat16: 'BF16',
  int8: 'INT8',
  int16: 'INT16',
  int32: 'INT32',
  int64: 'INT64',
  uint8: 'UINT8',
  uint16: 'UINT16',
  uint32: 'UINT32',
  uint64: 'UINT64',
  bool: 'BOOL',
  string: 'BYTES',
};

/**
 * onnxruntime-node (≥ 1.22) `session.inputMetadata` / `outputMetadata`: `{name, isTensor, type: 'float32',
 * shape: (number | string)[]}` with symbolic dimensions as strings. A non-tensor value (sequence, map) becomes
 * datatype `NON_TENSOR` with no shape, which no rule accepts.
 */
export function tensorSpecsFromOnnx(metadata: readonly InferenceSession.ValueMetadata[]): TensorSpec[] {
  return metadata.map((value) =>
    value.isTensor
      ? {
          name: value.name,
          datatype: ONNX_TO_KSERVE_DATATYPE[value.type] ?? value.type.toUpperCase(),
          shape: [...value.shape],
        }
      : { name: value.name, datatype: 'NON_TENSOR', shape: [] },
  );
}

/** The tensor entries of KServe v2 model metadata (`GET /v2/models/{name}`): −1 marks a dynamic dimension. */
export interface KserveTensorMetadata {
  name: string;
  datatype: string;
  shape: number[];
}

export function tensorSpecsFromKserve(tensors: readonly KserveTensorMetadata[]): TensorSpec[] {
  return tensors.map((tensor) => ({
    name: tensor.name,
    datatype: tensor.datatype,
    shape: tensor.shape.map((dim) => (dim < 0 ? null : dim)),
  }));
}

/** Convenience for an onnxruntime session (or anything exposing the same two metadata lists). */
export function inspectOnnxSession(
  session: Pick<InferenceSession, 'inputMetadata' | 'outputMetadata'>,
): LipsyncSignatureCheck {
  return inspectLipsyncModel(tensorSpecsFromOnnx(session.inputMetadata), tensorSpecsFromOnnx(session.outputMetadata));
}
