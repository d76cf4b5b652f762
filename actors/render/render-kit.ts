/**
 * The render kit of an avatar (issue 47): what a browser needs to draw a client-rendered session's face with the
 * server's own renderer. The kit IS the CPU renderer's prepared state: a renderer is prepared here exactly as a
 * session's is (`renderers/*.ts`), every mouth pose a photo draws is built, and its fields are packed
 * (`kit-state.ts`): base frames, pose patches and their placement, eyelid patches, a drawn face's layers and
 * sprites, a video avatar's face track and harvested mouths, head-motion regions. The browser rebuilds the same
 * classes from it and runs the same `render(FrameRequest) → I420` (`client/face-renderer.ts`), so the canvas shows
 * the server's picture by construction. The one thing not sent as it is held: a video avatar's decoded loop frames
 * (59 MB for 150 frames at 512²) go as one VP9 stream (`LOOP_VIDEO_CRF`), which the browser decodes with WebCodecs.
 *
 * The kit file: gzip of `packState({format, avatar, version, model, width, height, fps, renderer})`.
 * Built in its own worker thread (`render-kit-pool.ts`), once per avatar version and model (the service caches it).
 */
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import { gzipSync } from 'node:zlib';
import { createRenderer } from './renderers/index.ts';
import { WarpRenderer, OPEN_STEPS, SHAPE_STEPS } from './renderers/warp.ts';
import { packState } from './kit-state.ts';
import { i420Size } from './i420.ts';
import type { ClipLoop } from './clip-loop.ts';
import type { AvatarSource, ModelType, Renderer } from './types.ts';

/** The models a browser can draw: the CPU compositors. `lipsync_b`/`lipsync_c` run networks; `mock` is a test bar. */
export const CLIENT_RENDER_MODELS: readonly ModelType[] = ['lipsync', 'rt', 'rt_head'];
/** The kit's layout version; the browser refuses another. */
export const RENDER_KIT_FORMAT = 1;
/** Size budgets (docs/avatars.md), checked by `test/render-kit.routes.test.ts`: a photo's kit, a 10 s clip's. */
export const PHOTO_KIT_BUDGET_BYTES = 2 * 1024 * 1024;
export const CLIP_KIT_BUDGET_BYTES = 6 * 1024 * 1024;
/**
 * VP9 constant quality of a video avatar's loop in the kit. 20 keeps the decoded loop within ~1 luma level of the
 * server's frames over the face (the pixel-parity test allows 3) at ~2–4 MB for a 150-frame 512² loop.
 */
const LOOP_VIDEO_CRF = 20;
/** Encoding 150 frames of 512² takes a few seconds on one core; a stuck ffmpeg must not hold the build forever. */
const LOOP_ENCODE_DEADLINE_MS = 120_000;
/** The loop's stream can never be larger than the clip kit's whole budget (ffmpeg is killed past it). */
const MAX_LOOP_VIDEO_BYTES = CLIP_KIT_BUDGET_BYTES;

const FFMPEG_PATH: string = (createRequire(import.meta.url)('@ffmpeg-installer/ffmpeg') as { path: string }).path;

/** What the kit's JSON says about itself, beside the renderer's state. */
export interface RenderKitHeader {
  format: number;
  avatar: string;
  version: string;
  model: ModelType;
  width: number;
  height: number;
  fps: number;
}

/** A video avatar's loop frames as the kit carries them: one VP9 stream in IVF, `frames` frames of width × height. */
export interface KitLoopVideo {
  $loopVideo: { codec: 'vp09.00.10.08'; width: number; height: number; frames: number; ivf: Uint8Array };
}

/**
 * Every mouth pose of a photo built now (the renderer builds them on first use, from fields the kit leaves out):
 * one render per quantised pose, through the renderer's own entry point.
 */
function buildEveryMouthPose(renderer: Renderer): void {
  for (let open = 0; open < OPEN_STEPS; open++)
    for (let wide = 0; wide < SHAPE_STEPS; wide++)
      for (let round = 0; round < SHAPE_STEPS; round++)
        renderer.render({
          frameIdx: 0,
          ptsMs: 0,
          level: 0,
          speaking: true,
          mouth: { open: open / (OPEN_STEPS - 1), wide: wide / (SHAPE_STEPS - 1), round: round / (SHAPE_STEPS - 1) },
        });
}

/** The loop's held frames as one VP9 stream (ffmpeg, a child process, bounded in time and output). */
function encodeLoop(loop: ClipLoop, fps: number): Promise<Uint8Array> {
  const { width, height } = loop.frames[0];
  return new Promise((resolve, reject) => {
    const child = spawn(
      FFMPEG_PATH,
      [
        ...['-hide_banner', '-nostdin', '-loglevel', 'error'],
        ...['-f', 'rawvideo', '-pix_fmt', 'yuv420p', '-s', `${width}x${height}`, '-r', String(fps), '-i', 'pipe:0'],
        ...['-c:v', 'libvpx-vp9', '-crf', String(LOOP_VIDEO_CRF), '-b:v', '0', '-deadline', 'good', '-cpu-used', '4'],
        ...['-threads', '1', '-g', String(loop.frames.length), '-pix_fmt', 'yuv420p', '-f', 'ivf', 'pipe:1'],
      ],
      { stdio: ['pipe', 'pipe', 'ignore'] },
    );
    const chunks: Buffer[] = [];
    let bytes = 0;
    let failure: Error | undefined;
    const stop = (error: Error) => {
      failure ??= error;
      child.kill('SIGKILL');
    };
    const timer = setTimeout(() => stop(new Error('render kit: loop encoding timed out')), LOOP_ENCODE_DEADLINE_MS);
    child.stdout.on('data', (chunk: Buffer) => {
      bytes += chunk.length;
      if (bytes > MAX_LOOP_VIDEO_BYTES) stop(new Error('render kit: loop video over its budget'));
      else chunks.push(chunk);
    });
    child.stdin.on('error', () => {}); // a killed ffmpeg closes its input: the exit below reports why
    child.on('error', stop);
    child.on('close', (code) => {
      clearTimeout(timer);
      if (failure) reject(failure);
      else if (code !== 0) reject(new Error(`render kit: ffmpeg exited with ${code}`));
      else resolve(new Uint8Array(Buffer.concat(chunks)));
    });
    // Written in one go: the frames are already in memory, and stdin's buffering follows ffmpeg's pace.
    const size = i420Size(width, height);
    for (const frame of loop.frames) child.stdin.write(frame.data.subarray(0, size));
    child.stdin.end();
  });
}

/** Prepares `modelType`'s renderer for `avatar` (with its clip's PNGs, if any) and packs it into a kit file. */
export async function buildRenderKit(avatar: AvatarSource, modelType: ModelType): Promise<Uint8Array> {
  if (!CLIENT_RENDER_MODELS.includes(modelType)) throw new Error(`model ${modelType} cannot render in a browser`);
  const renderer = createRenderer(modelType);
  await renderer.prepare(avatar);
  const { manifest } = avatar;
  const fps = manifest.fps > 0 ? manifest.fps : 25;
  const replacements = new Map<object, unknown>();
  const loop = renderer instanceof WarpRenderer ? renderer.clipLoop : null;
  if (loop) {
    const video: KitLoopVideo = {
      $loopVideo: {
        codec: 'vp09.00.10.08',
        width: loop.frames[0].width,
        height: loop.frames[0].height,
        frames: loop.frames.length,
        ivf: await encodeLoop(loop, fps),
      },
    };
    replacements.set(loop.frames, video);
  } else if (renderer instanceof WarpRenderer) {
    buildEveryMouthPose(renderer);
  }
  const header: RenderKitHeader = {
    format: RENDER_KIT_FORMAT,
    avatar: avatar.id,
    version: manifest.version,
    model: modelType,
    width: manifest.width,
    height: manifest.height,
    fps,
  };
  return new Uint8Array(gzipSync(packState({ ...header, renderer }, replacements), { level: 9 }));
}
