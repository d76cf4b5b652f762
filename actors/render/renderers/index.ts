/** Renderer factory by model type. `lipsync_b` / `lipsync_c` have no local renderer (reported not_configured elsewhere). */
import type { ModelType, Renderer } from '../types.ts';
import { MockRenderer } from './mock.ts';
import { WarpRenderer } from './warp.ts';
import { RtRenderer } from './rt.ts';
import { RtHeadRenderer } from './rt_head.ts';

export const RENDERABLE_MODEL_TYPES: readonly ModelType[] = ['mock', 'lipsync', 'rt', 'rt_head'];

export function createRenderer(modelType: ModelType): Renderer {
  switch (modelType) {
    case 'mock':
      return new MockRenderer();
    case 'lipsync':
      return new WarpRenderer();
    case 'rt':
      return new RtRenderer();
    case 'rt_head':
      return new RtHeadRenderer();
    default:
      throw new Error(`no renderer for model type ${modelType}`);
  }
}
