import type { ModelType, Renderer } from '../types.ts';
import { LipsyncRenderer } from './lipsync.ts';
import { MockRenderer } from './mock.ts';
import { RtHeadRenderer } from './rt-head.ts';
import { RtRenderer } from './rt.ts';

/** One renderer per model type; `lipsync_b`/`lipsync_c` need neural backends this release does not bundle. */
export function createRenderer(modelType: ModelType): Renderer {
  switch (modelType) {
    case 'mock':
      return new MockRenderer();
    case 'lipsync':
      return new LipsyncRenderer();
    case 'rt':
      return new RtRenderer();
    case 'rt_head':
      return new RtHeadRenderer();
    default:
      throw new Error(`model ${modelType} has no renderer in this release`);
  }
}
