/**
 * A video avatar's idle loop for the renderers: its frames and per-frame face track (`metadata.clip`,
 * docs/avatars.md). The render pool decodes the loop once per avatar into shared memory (`shared-clip-loops.ts`,
 * `decodeClipFramesInto` in a render worker) and every worker renders from views of it (`clipLoopView`). The loop
 * plays forwards then backwards (`loopFrameIndex`), indexed by the session-wide frame index, so it never jumps and
 * its position carries across turns.
 */
import { join } from 'node:path';
import sharp from 'sharp';
import { i420Size, rgbaToI420 } from './i420.ts';
import { readShared } from './image.ts';
import { holdStaticBlocks } from './static-hold.ts';
import type { AvatarManifest, AvatarSource, I420Frame, MouthAnimation, SharedClipLoopData } from './types.ts';

/**
 * Decoded loop frames held for one avatar. 64 MiB keeps the whole 150-frame loop of a 512² avatar (59 MB); a loop
 * that would take more (a larger avatar, a longer loop from a bundle made elsewhere) keeps every 2nd, 3rd, … frame
 * instead, so the loop keeps its length and motion at a lower frame rate.
 */
export const CLIP_LOOP_AVATAR_BYTES = 64 * 1024 * 1024;
/**
 * Decoded loops held at once, over all avatars with a session open: four whole 512² loops. The loops live in
 * shared memory V8 does not count, so without this bound avatars opened side by side would grow the process
 * without limit; an avatar opened past it holds fewer frames (a larger stride), or only its reference still
 * when not one frame fits.
 */
export const CLIP_LOOP_TOTAL_BYTES = 4 * CLIP_LOOP_AVATAR_BYTES;

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
  for (let i = 0; i < clip.frame_count; i++)
    framePngs.push(await readShared(join(dir, 'frames', `frame_${String(i).padStart(5, '0')}.png`)));
  const trackJson = await readShared(join(dir, clip.track_file));
  if (!clip.mouths) return { framePngs, trackJson };
  const mouths = {
    atlasPng: await readShared(join(dir, clip.mouths.atlas_file)),
    indexJson: await readShared(join(dir, clip.mouths.index_file)),
  };
  return { framePngs, trackJson, mouths };
}

/** Which frames of a `count`-frame loop fit in `budget` bytes: every `stride`th, `held` of them; null when none does. */
export function loopLayout(
  count: number,
  width: number,
  height: number,
  budget: number,
): { stride: number; held: number } | null {
  const frameBytes = i420Size(width, height);
  const fitting = Math.floor(budget / frameBytes);
  if (count <= 0 || fitting < 1) return null;
  const stride = Math.ceil(count / Math.min(count, fitting));
  return { stride, held: Math.ceil(count / stride) };
}

/** Frames of the track a loop can show: the PNGs and the track entries both there. */
export function loopTrack(clip: ClipSource): MouthAnimation[] {
  const track = JSON.parse(Buffer.from(clip.trackJson).toString('utf8')) as MouthAnimation[];
  return track.slice(0, clip.framePngs.length);
}

let loopFramesDecodedHere = 0;

/** Loop frames decoded from PNG in this thread so far (tests: a worker that renders a shared loop decodes none). */
export function loopFramesDecodedInThisThread(): number {
  return loopFramesDecodedHere;
}

/**
 * Decodes the held frames (every `loop.stride`th) into `loop.frames`, at the loop's size, with each frame's still
 * blocks held from the one before (`holdStaticBlocks`). Runs in a render worker.
 */
export async function decodeClipFramesInto(clip: ClipSource, loop: SharedClipLoopData): Promise<void> {
  const frameBytes = i420Size(loop.width, loop.height);
  const frameAt = (k: number): I420Frame => ({
    width: loop.width,
    height: loop.height,
    data: new Uint8Array(loop.frames, k * frameBytes, frameBytes),
  });
  for (let k = 0; k < loop.held; k++) {
    const png = Buffer.from(clip.framePngs[k * loop.stride]);
    const { data } = await sharp(png)
      .resize(loop.width, loop.height, { fit: 'cover' })
      .ensureAlpha()
      .raw()
      .toBuffer({ resolveWithObject: true });
    const frame = frameAt(k);
    rgbaToI420(new Uint8Array(data.buffer, data.byteOffset, data.length), loop.width, loop.height, frame.data);
    if (k > 0) holdStaticBlocks(frameAt(k - 1), frame);
    loopFramesDecodedHere++;
  }
}

/** A decoded shared loop as frames: views of its memory, nothing copied. */
export function clipLoopView(loop: SharedClipLoopData): ClipLoop {
  const frameBytes = i420Size(loop.width, loop.height);
  const frames = Array.from({ length: loop.held }, (_, k) => ({
    width: loop.width,
    height: loop.height,
    data: new Uint8Array(loop.frames, k * frameBytes, frameBytes),
  }));
  const track = JSON.parse(Buffer.from(loop.trackJson).toString('utf8')) as MouthAnimation[];
  return { count: loop.count, stride: loop.stride, frames, track };
}

/**
 * Decodes a loop in the calling thread, for a renderer prepared outside the render pool (tests, tools): the same
 * layout and frames the pool's shared loop holds, within `CLIP_LOOP_AVATAR_BYTES`.
 */
export async function decodeClipLoop(clip: ClipSource, width: number, height: number): Promise<ClipLoop> {
  const track = loopTrack(clip);
  const layout = loopLayout(track.length, width, height, CLIP_LOOP_AVATAR_BYTES);
  if (!layout) throw new Error('video avatar has no loop frames');
  const loop = newSharedLoop(clip, track.length, width, height, layout);
  await decodeClipFramesInto(clip, loop);
  return clipLoopView(loop);
}

/** An empty shared loop of `layout`, to decode into. */
export function newSharedLoop(
  clip: ClipSource,
  count: number,
  width: number,
  height: number,
  layout: { stride: number; held: number },
): SharedClipLoopData {
  return {
    frames: new SharedArrayBuffer(layout.held * i420Size(width, height)),
    width,
    height,
    count,
    ...layout,
    trackJson: clip.trackJson,
    ...(clip.mouths ? { mouths: clip.mouths } : {}),
    released: new Int32Array(new SharedArrayBuffer(Int32Array.BYTES_PER_ELEMENT)),
  };
}

/** The held frame and its face for session frame `frameIdx`. */
export function loopFrameAt(
  loop: ClipLoop,
  frameIdx: number,
): { frame: I420Frame; face: MouthAnimation; held: number } {
  const held = Math.floor(loopFrameIndex(frameIdx, loop.count) / loop.stride);
  return { frame: loop.frames[held], face: loop.track[held * loop.stride], held };
}
