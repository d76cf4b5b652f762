/**
 * A video avatar's idle loop for the renderers: its frames and per-frame face track (`metadata.clip`,
 * docs/avatars.md). The session side reads the bundle once into shared memory (`readClipSource`), so a session
 * keeps its loop if the avatar is deleted; a render worker decodes the frames to I420 once at prepare
 * (`decodeClipLoop`), within `CLIP_FRAME_CACHE_BYTES`. The loop plays forwards then backwards (`loopFrameIndex`),
 * indexed by the session-wide frame index, so it never jumps and its position carries across turns.
 */
import { join } from 'node:path';
import sharp from 'sharp';
import { rgbaToI420 } from './i420.ts';
import { readShared } from './image.ts';
import type { AvatarManifest, AvatarSource, I420Frame, MouthAnimation } from './types.ts';

/**
 * Decoded loop frames one prepared avatar holds in a render worker. 64 MiB keeps the whole 150-frame loop of a
 * 512² avatar (59 MB); a loop that would take more (a larger avatar, a longer loop from a bundle made elsewhere)
 * keeps every 2nd, 3rd, … frame instead, so the loop keeps its length and motion at a lower frame rate. Render
 * workers keep up to 6 prepared avatars, so this bounds a worker's loops to ~400 MB in the worst case.
 */
export const CLIP_FRAME_CACHE_BYTES = 64 * 1024 * 1024;

/** What a session hands the render workers: the loop's PNGs and the track's JSON, both in shared memory. */
export type ClipSource = NonNullable<AvatarSource['clip']>;

export interface ClipLoop {
  /** Loop frames as listed in the bundle. */
  count: number;
  /** Every `stride`th frame, decoded. */
  stride: number;
  frames: I420Frame[];
  track: MouthAnimation[];
}

/** The loop frame shown at session frame `frameIdx`: 0, 1, …, count-1, count-2, …, 1, 0, 1, … */
export function loopFrameIndex(frameIdx: number, count: number): number {
  if (count <= 1) return 0;
  const period = 2 * count - 2;
  const phase = ((frameIdx % period) + period) % period;
  return phase < count ? phase : period - phase;
}

/** Reads a video avatar's loop frames, track and harvested mouths into shared memory; undefined for any other avatar. */
export async function readClipSource(dir: string, manifest: AvatarManifest): Promise<ClipSource | undefined> {
  const clip = manifest.metadata.clip;
  if (!clip) return undefined;
  const framePngs: Uint8Array[] = [];
  for (let i = 0; i < clip.frame_count; i++) framePngs.push(await readShared(join(dir, 'frames', `frame_${String(i).padStart(5, '0')}.png`)));
  const trackJson = await readShared(join(dir, clip.track_file));
  if (!clip.mouths) return { framePngs, trackJson };
  const mouths = { atlasPng: await readShared(join(dir, clip.mouths.atlas_file)), indexJson: await readShared(join(dir, clip.mouths.index_file)) };
  return { framePngs, trackJson, mouths };
}

/** Decodes the loop (the held frames, see `CLIP_FRAME_CACHE_BYTES`) to I420 at the avatar's size and parses its track. */
export async function decodeClipLoop(clip: ClipSource, width: number, height: number): Promise<ClipLoop> {
  const track = JSON.parse(Buffer.from(clip.trackJson).toString('utf8')) as MouthAnimation[];
  const count = Math.min(clip.framePngs.length, track.length);
  if (count === 0) throw new Error('video avatar has no loop frames');
  const frameBytes = (width * height * 3) / 2;
  const stride = Math.max(1, Math.ceil((count * frameBytes) / CLIP_FRAME_CACHE_BYTES));
  const frames: I420Frame[] = [];
  for (let i = 0; i < count; i += stride) {
    const { data } = await sharp(Buffer.from(clip.framePngs[i])).resize(width, height, { fit: 'cover' }).ensureAlpha().raw().toBuffer({ resolveWithObject: true });
    frames.push(rgbaToI420(new Uint8Array(data.buffer, data.byteOffset, data.length), width, height));
  }
  return { count, stride, frames, track };
}

/** The held frame and its face for session frame `frameIdx`. */
export function loopFrameAt(loop: ClipLoop, frameIdx: number): { frame: I420Frame; face: MouthAnimation; held: number } {
  const held = Math.floor(loopFrameIndex(frameIdx, loop.count) / loop.stride);
  return { frame: loop.frames[held], face: loop.track[held * loop.stride], held };
}
