/**
 * `lipsync_b`: a Wav2Lip-family ONNX file the user brings (`SERVICE_LIPSYNC_B_MODEL`), run in the shared
 * inference pool (`actors/inference/pool.ts`) on the configured execution provider (`SERVICE_ONNX_PROVIDER`).
 *
 * `check()` runs once at start-up: the file must exist and its declared tensors must have the Wav2Lip signature
 * (`model-signature.ts`: inputs by shape, S from the model). Until then, or when it fails, the model is not
 * connected and `status` says why, in words that name tensors and shapes but never the file's path.
 * `open(avatar)` prepares the avatar's face once (`face-crop.ts`) and returns a `NeuralLipsyncRenderer` whose
 * frames go through `pool.infer` one item each; the pool stacks items of every session into batches.
 */
import { createHash } from 'node:crypto';
import { access, constants } from 'node:fs/promises';
import type { ExecutionProviderName, ModelDefinition } from '../inference/models.ts';
import type { InferencePool } from '../inference/pool.ts';
import { tensor } from '../inference/tensors.ts';
import type { AvatarSource } from '../render/types.ts';
import { inspectOnnxSession, type LipsyncSignature } from './model-signature.ts';
import { NeuralLipsyncRenderer, type LipsyncInference } from './neural-renderer.ts';
import { RenderPoolStages } from './neural-stages.ts';
import type { RenderPool } from '../render/pool.ts';
import { PreparedFaceCache } from './prepared-faces.ts';

export const LIPSYNC_B_MODEL_KEY = 'lipsync_b';
/**
 * Items per pool run. Wav2Lip 96 costs ~10–20 ms per item on one CPU core, so 16 frames is about a frame
 * period's worth of work per core at most; bigger batches only delay the first frame in them.
 */
export const LIPSYNC_MAX_BATCH = 16;

export type LocalModelStatus =
  | { state: 'not_configured'; reason: string }
  | { state: 'checking'; reason: string }
  | { state: 'connected'; reason: string; signature: LipsyncSignature }
  | { state: 'error'; reason: string };

export interface LocalLipsyncModelOptions {
  /** Null when SERVICE_LIPSYNC_B_MODEL is not set. */
  file: string | null;
  provider: ExecutionProviderName;
  /** The shared pool, started on first call (never, while no file is configured). */
  pool: () => InferencePool;
  /** Runs the mel windows and the paste-back in these workers (`neural-stages.ts`); without it, in the main thread. */
  offload?: RenderPool;
}

export class LocalLipsyncModel {
  private current: LocalModelStatus;
  private readonly faces = new PreparedFaceCache();
  private modelKey = LIPSYNC_B_MODEL_KEY;

  constructor(private readonly options: LocalLipsyncModelOptions) {
    this.current = options.file
      ? { state: 'checking', reason: 'the model file is being checked' }
      : {
          state: 'not_configured',
          reason: 'set SERVICE_LIPSYNC_B_MODEL to a Wav2Lip-family ONNX file to enable lipsync_b',
        };
  }

  get status(): LocalModelStatus {
    return this.current;
  }

  /** The key frames go to the inference pool under (set by a successful `check`). */
  get poolKey(): string {
    return this.modelKey;
  }

  /** Checks the file and its signature and registers it with the pool; never throws. */
  async check(signal?: AbortSignal): Promise<LocalModelStatus> {
    const { file, provider } = this.options;
    if (!file) return this.current;
    const pool = this.options.pool();
    try {
      await access(file, constants.R_OK);
    } catch {
      return (this.current = {
        state: 'error',
        reason: 'the file SERVICE_LIPSYNC_B_MODEL names does not exist or cannot be read',
      });
    }
    const executionProviders: ExecutionProviderName[] = provider === 'cuda' ? ['cuda', 'cpu'] : ['cpu'];
    // Keys are bound to one file in the pool, so a digest of the path is part of them (tests check several files
    // on one pool); the path itself stays out of keys, which pool errors quote.
    const fileTag = createHash('sha1').update(file).digest('hex').slice(0, 12);
    const probeKey = `${LIPSYNC_B_MODEL_KEY}:describe:${fileTag}`;
    this.modelKey = `${LIPSYNC_B_MODEL_KEY}:${fileTag}`;
    try {
      pool.register(probeKey, { file, inputs: {}, outputs: {}, maxBatch: 1, executionProviders });
      const description = await pool.describe(probeKey, signal);
      const check = inspectOnnxSession({ inputMetadata: description.inputs, outputMetadata: description.outputs });
      if (!check.ok)
        return (this.current = {
          state: 'error',
          reason: `the model does not have the Wav2Lip signature: ${check.reason}`,
        });
      const { signature } = check;
      if (signature.fixedBatch !== null && signature.fixedBatch !== 1) {
        return (this.current = {
          state: 'error',
          reason: `the model was exported with a fixed batch of ${signature.fixedBatch}; export it with a dynamic batch axis (or batch 1)`,
        });
      }
      const definition: ModelDefinition = {
        file,
        inputs: { [signature.melInput]: { batchAxis: 0 }, [signature.faceInput]: { batchAxis: 0 } },
        outputs: { [signature.output]: { batchAxis: 0 } },
        maxBatch: signature.fixedBatch ?? LIPSYNC_MAX_BATCH,
        executionProviders,
      };
      pool.register(this.modelKey, definition);
      return (this.current = {
        state: 'connected',
        reason: `ONNX model with face size ${signature.size} on ${provider}`,
        signature,
      });
    } catch (error) {
      // onnxruntime's load errors quote the path; only say what kind of failure it was.
      const cuda = provider === 'cuda' ? ' (SERVICE_ONNX_PROVIDER=cuda needs the GPU build of onnxruntime-node)' : '';
      return (this.current = {
        state: 'error',
        reason: `onnxruntime could not load the model${cuda}: ${loadErrorKind(error)}`,
      });
    }
  }

  async open(avatar: AvatarSource & { cacheKey?: string }, signal?: AbortSignal): Promise<NeuralLipsyncRenderer> {
    const status = this.current;
    if (status.state !== 'connected') throw new Error(`lipsync_b is not connected: ${status.reason}`);
    const face = await this.faces.get(avatar, status.signature.size);
    const stages = this.options.offload
      ? await RenderPoolStages.open(this.options.offload, avatar, status.signature.size, signal)
      : undefined;
    signal?.throwIfAborted();
    return new NeuralLipsyncRenderer({
      face,
      fps: avatar.manifest.fps,
      backend: new PoolInference(this.options.pool(), this.modelKey, status.signature),
      stages,
    });
  }
}

/** One frame = one pool item; the pool batches. */
class PoolInference implements LipsyncInference {
  readonly size: number;

  constructor(
    private readonly pool: InferencePool,
    private readonly modelKey: string,
    private readonly signature: LipsyncSignature,
  ) {
    this.size = signature.size;
  }

  async infer(mel: Float32Array, face: Float32Array, signal: AbortSignal): Promise<Float32Array> {
    const { melInput, faceInput, output, size } = this.signature;
    const outputs = await this.pool.infer(
      this.modelKey,
      { [melInput]: tensor('float32', mel, [1, 1, 80, 16]), [faceInput]: tensor('float32', face, [1, 6, size, size]) },
      signal,
    );
    return outputs[output].data as Float32Array;
  }

  close(): void {
    // The pool is shared; nothing per session to release.
  }
}

function loadErrorKind(error: unknown): string {
  const message = error instanceof Error ? error.message : String(error);
  if (/protobuf|parse|invalid model|load model/i.test(message)) return 'not a valid ONNX model';
  if (/provider|cuda/i.test(message)) return 'execution provider unavailable';
  return 'load failed';
}
