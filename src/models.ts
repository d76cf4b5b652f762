import { MODEL_TYPES, type ModelType } from '../actors/render/types.ts';

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

const BACKENDS: Record<ModelType, string> = {
  mock: 'cpu test card with timecode',
  lipsync: 'cpu mouth-region warping of a photo',
  lipsync_b: 'neural lip-sync backend (not bundled)',
  lipsync_c: 'neural lip-sync backend (not bundled)',
  rt: 'cpu drawn-face renderer',
  rt_head: 'cpu drawn-face renderer with prosody head motion',
};

/**
 * Model availability. The bundled renderers run in-process on CPU, so they are `connected` while the service
 * runs; a bundle they cannot prepare fails that session's creation with 502 without taking the model down.
 * `error` is reserved for external backends that fail their health check (none is bundled in this release).
 */
export class ModelRegistry {
  list(): ModelInfo[] {
    return MODEL_TYPES.map((id) => this.info(id));
  }

  info(id: ModelType): ModelInfo {
    const base = { id, renders: RENDERABLE_AVATARS[id], backend: BACKENDS[id] };
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
