import { MODEL_TYPES, type ModelType } from '../actors/render/types.ts';

export { MODEL_TYPES };

export type ModelStatus = 'connected' | 'not_configured' | 'error';

export interface ModelInfo {
  id: ModelType;
  connected: boolean;
  status: ModelStatus;
  /** Human explanation of the status. */
  reason: string;
  /** Avatar model types this model can render. */
  renders: ModelType[];
  backend: string;
}

/**
 * Which model renders which avatars. `mock` renders anything (a test card over the avatar image);
 * `lipsync` animates photo avatars through their `metadata.animation`; the `rt` family draws faces from
 * `metadata.face`, so it needs an `rt`/`rt_head` avatar.
 */
export const RENDERABLE_AVATARS: Record<ModelType, ModelType[]> = {
  mock: [...MODEL_TYPES],
  lipsync: ['lipsync'],
  lipsync_b: ['lipsync'],
  lipsync_c: ['lipsync'],
  rt: ['rt', 'rt_head'],
  rt_head: ['rt', 'rt_head'],
};

/**
 * Models whose pictures the viewer's browser can draw (`render: "client"`, issue 47): the CPU renderers, whose frames
 * are composites of cached pieces the render kit carries. The neural models and the test card render on the server only.
 */
export const CLIENT_RENDERED_MODELS: readonly ModelType[] = ['lipsync', 'rt', 'rt_head'];

const BACKENDS: Record<ModelType, string> = {
  mock: 'cpu test card with timecode',
  lipsync: 'cpu mouth-region warping of a photo',
  lipsync_b: 'Wav2Lip-family ONNX model on onnxruntime-node (shared inference pool)',
  lipsync_c: 'Wav2Lip-family model on a KServe v2 / Triton inference server',
  rt: 'cpu drawn-face renderer',
  rt_head: 'cpu drawn-face renderer with prosody head motion',
};

/** What a neural lip-sync model reports about itself (`actors/lipsync/local-model.ts`, `remote-model.ts`). */
export interface NeuralModelSource {
  readonly status: { state: 'not_configured' | 'checking' | 'connected' | 'error'; reason: string };
  /** Re-checks a remote backend (cached by the source); absent for local files, checked once at start-up. */
  refresh?(): Promise<unknown>;
}

export interface ModelRegistryOptions {
  lipsync_b?: NeuralModelSource;
  lipsync_c?: NeuralModelSource;
}

/**
 * Model availability. The bundled renderers run in-process on CPU, so they are `connected` while the service
 * runs; a bundle they cannot prepare fails that session's creation with 502 without taking the model down.
 * The neural lip-sync models report their own state: `not_configured` without their variables, `error` with
 * the reason (no file, wrong signature, server unreachable), `connected` once checked.
 */
export class ModelRegistry {
  constructor(private readonly neural: ModelRegistryOptions = {}) {}

  /** Re-checks remote backends (each source caches its checks), before a `/models` answer. */
  async refresh(): Promise<void> {
    await Promise.all([this.neural.lipsync_b?.refresh?.(), this.neural.lipsync_c?.refresh?.()]);
  }

  /**
   * Whether session creation may try this model. Connected models may; so may a configured remote backend
   * whose last check failed: it is checked again while the session opens, and a failure there is a 502.
   */
  admits(id: ModelType): boolean {
    const info = this.info(id);
    if (info.connected) return true;
    return id === 'lipsync_c' && info.status === 'error' && this.neural.lipsync_c?.refresh !== undefined;
  }

  list(): ModelInfo[] {
    return MODEL_TYPES.map((id) => this.info(id));
  }

  info(id: ModelType): ModelInfo {
    const base = { id, renders: RENDERABLE_AVATARS[id], backend: BACKENDS[id] };
    const source = id === 'lipsync_b' || id === 'lipsync_c' ? this.neural[id] : undefined;
    if (source) {
      const { state, reason } = source.status;
      if (state === 'connected') return { ...base, connected: true, status: 'connected', reason };
      return { ...base, connected: false, status: state === 'not_configured' ? 'not_configured' : 'error', reason };
    }
    if (id === 'lipsync_b' || id === 'lipsync_c') {
      return {
        ...base,
        connected: false,
        status: 'not_configured',
        reason: `no ${id} backend is configured; it needs a neural lip-sync server, not bundled with this release`,
      };
    }
    return { ...base, connected: true, status: 'connected', reason: 'renders on CPU in worker threads' };
  }

  isModel(id: string): id is ModelType {
    return (MODEL_TYPES as readonly string[]).includes(id);
  }

  canRender(model: ModelType, avatarModelType: ModelType): boolean {
    return RENDERABLE_AVATARS[model].includes(avatarModelType);
  }
}
