/**
 * Which backend opens a renderer, by model: the neural lip-sync models (`lipsync_b` on the inference pool,
 * `lipsync_c` on a KServe server) open in the main thread and call their backends per frame; every other model
 * renders in the render pool's workers. Live sessions, their reopen-after-failure and offline MP4 jobs
 * (`use: 'offline'`) all come through here, so a job renders with the session's model whatever it is.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { FrameRenderer } from '../media/playout.ts';
import type { LocalLipsyncModel } from '../lipsync/local-model.ts';
import {
  OFFLINE_INFER_TIMEOUT_MS,
  OFFLINE_MAX_FRAMES_WAITING,
  type RemoteLipsyncModel,
} from '../lipsync/remote-model.ts';
import { BUNDLE_FRAME_PATH } from '../render/image.ts';
import type { RenderPool } from '../render/pool.ts';
import type { AvatarSource, ModelType } from '../render/types.ts';

export interface RendererRouterOptions {
  pool: RenderPool;
  lipsyncB: LocalLipsyncModel;
  lipsyncC: RemoteLipsyncModel;
}

/**
 * `live`: frames have a presentation deadline (a session's media clock). `offline`: an MP4 job, no deadline, so
 * a remote backend gets the longer `OFFLINE_INFER_TIMEOUT_MS` per request before the job falls back.
 */
export type RendererUse = 'live' | 'offline';

export class RendererRouter {
  constructor(private readonly options: RendererRouterOptions) {}

  async open(
    avatar: AvatarSource,
    model: ModelType,
    signal?: AbortSignal,
    use: RendererUse = 'live',
  ): Promise<FrameRenderer & { close(): void }> {
    if (model === 'lipsync_b' || model === 'lipsync_c') {
      // Read once now, like the render pool does: the session keeps rendering if a custom avatar's files go.
      const source: AvatarSource = {
        ...avatar,
        framePng: avatar.framePng ?? new Uint8Array(await readFile(join(avatar.dir, BUNDLE_FRAME_PATH))),
      };
      if (model === 'lipsync_b') return this.options.lipsyncB.open(source, signal);
      return this.options.lipsyncC.open(
        source,
        signal,
        use === 'offline'
          ? { inferTimeoutMs: OFFLINE_INFER_TIMEOUT_MS, warmUp: false, maxFramesWaiting: OFFLINE_MAX_FRAMES_WAITING }
          : {},
      );
    }
    // A live session's clock releases every frame it is done with, so its frames may reuse buffers.
    return this.options.pool.open(avatar, model, signal, { reuseFrameBuffers: use === 'live' });
  }
}
