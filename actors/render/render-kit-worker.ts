/** The render kit thread's task: read the avatar's bundle, prepare its renderer, pack it (`render-kit.ts`). */
import { move, transferableSymbol, valueSymbol } from 'piscina';
import { readClipSource } from './clip-loop.ts';
import { buildRenderKit } from './render-kit.ts';
import type { AvatarManifest, ModelType } from './types.ts';

export interface RenderKitTask {
  id: string;
  dir: string;
  manifest: AvatarManifest;
  model: ModelType;
}

export default async function buildKitTask(task: RenderKitTask) {
  const { id, dir, manifest, model } = task;
  const clip = await readClipSource(dir, manifest);
  const kit = await buildRenderKit({ id, dir, manifest, ...(clip ? { clip } : {}) }, model);
  // Moved back, not copied: a clip's kit is a few MB.
  return move({ [transferableSymbol]: [kit.buffer], [valueSymbol]: kit });
}
