/**
 * Which renderer model may drive which avatar bundle: `mock` renders any avatar (its still frame);
 * `lipsync` animates photo avatars (`lipsync`); the drawn families `rt` and `rt_head` share the
 * face-parameter format, so either renders an `rt` or `rt_head` avatar. `lipsync_b`/`lipsync_c` have
 * no renderer here and never match.
 */
import type { ModelType } from './types.ts';

const DRAWN: ReadonlySet<ModelType> = new Set(['rt', 'rt_head']);

export function canRender(modelType: ModelType, avatarModelType: ModelType): boolean {
  if (modelType === 'mock') return true;
  if (modelType === 'lipsync') return avatarModelType === 'lipsync';
  if (DRAWN.has(modelType)) return DRAWN.has(avatarModelType);
  return false;
}
