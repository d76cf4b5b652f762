/**
 * Which backend opens a session's renderer, by model: the neural lip-sync models (`lipsync_b` on the inference
 * pool, `lipsync_c` on a KServe server) open in the main thread and call their backends per frame; every other
 * model renders in the render pool's workers. Live sessions and their reopen-after-failure both come through here.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { FrameRenderer } from '../media/playout.ts';
import type { LocalLipsyncModel } from '../lipsync/local-model.ts';
import type { RemoteLipsyncModel } from '../lipsync/remote-model.ts';
import { BUNDLE_FRAME_PATH } from './image.ts';
import type { RenderPool } from './pool.ts';
import type { AvatarSource, ModelType } from './types.ts';

export interface RendererRouterOptions {
  pool: RenderPool;
  lipsyncB: LocalLipsyncModel;
  lipsyncC: RemoteLipsyncModel;
}

export class RendererRouter {
  constructor(private readonly options: RendererRouterOptions) {}

  async open(avatar: AvatarSource, model: ModelType, signal?: AbortSignal): Promise<FrameRenderer & { close(): void }> {
    if (model === 'lipsync_b' || model === 'lipsync_c') {
      // Read once now, like the render pool does: the session keeps rendering if a custom avatar's files go.
      const source: AvatarSource = { ...avatar, framePng: avatar.framePng ?? new Uint8Array(await readFile(join(avatar.dir, BUNDLE_FRAME_PATH))) };
      return model === 'lipsync_b' ? this.options.lipsyncB.open(source, signal) : this.options.lipsyncC.open(source, signal);
    }
    return this.options.pool.open(avatar, model, signal);
  }
}
