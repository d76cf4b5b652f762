/**
 * A video avatar as a client makes one (POST /avatars/custom with a `video`), and what its output is measured
 * against: the bundle's own loop frames, converted to I420 the way the renderer converts them, with the
 * per-frame face track. Tests decode what a session, a recording or an offline MP4 showed and ask, frame by
 * frame, which loop frame it is and how far its mouth is from that frame's.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import sharp from 'sharp';
import { loopFrameIndex } from '../../actors/render/clip-loop.ts';
import { rgbaToI420 } from '../../actors/render/i420.ts';
import type { MouthAnimation } from '../../actors/render/types.ts';
import { tone } from './conversation.ts';
import { extractAudio, extractFrames } from './mp4.ts';

/**
 * Mean luma difference under which two frames are the same picture: x264 leaves ~1 between a frame and its
 * source, while the loop's neighbouring frames (the head moved ~1 px) differ by ~3–6.
 */
export const SAME_FRAME = 2.5;
/** The test clips' window sways ±24 px: their frames differ from the first by far more than this (a photo: ~0). */
export const HEAD_MOTION = 5;
/** Mean luma change in the mouth box when the warp opens the mouth (~12–45 measured; a closed mouth ~1). */
export const MOUTH_OPEN = 8;
/** PCM RMS of the builtin voice while it speaks (~2,000–12,000) and of a pause (0). */
const SPEECH_RMS = 3_000;
const QUIET_RMS = 50;
const SAMPLE_RATE = 16_000;
/** Samples per 40 ms frame at 16 kHz (25 fps). */
const FRAME_SAMPLES = 640;

export interface Box {
  x: number;
  y: number;
  w: number;
  h: number;
}

/** Posts a clip as a new video avatar based on the astronaut; the answer as the client gets it. */
export async function uploadClip(
  baseUrl: string,
  video: Uint8Array,
  name = 'Clip Person',
  signal?: AbortSignal,
): Promise<Response> {
  const body = new FormData();
  body.append('name', name);
  body.append('base_avatar_id', 'astronaut');
  body.append('video', new Blob([new Uint8Array(video)], { type: 'video/mp4' }), 'clip.mp4');
  return fetch(`${baseUrl}/avatars/custom`, { method: 'POST', body, signal });
}

/**
 * An offline bundle body that speaks, then pauses for `pauseMs`: three 400 ms syllables of a 500 Hz tone (the
 * spectrum of an open vowel to the mouth timeline) 200 ms apart, as raw 16 kHz PCM, so no TTS engine is involved.
 */
export function speechThenPause(pauseMs: number): {
  segments: Array<{ audio_base64: string; sample_rate: number; pause_after_ms: number }>;
} {
  const syllable = tone(SAMPLE_RATE, 400, 500);
  const gap = new Int16Array((SAMPLE_RATE * 200) / 1000);
  const pcm = Int16Array.from([...syllable, ...gap, ...syllable, ...gap, ...syllable]);
  return {
    segments: [
      { audio_base64: Buffer.from(pcm.buffer).toString('base64'), sample_rate: SAMPLE_RATE, pause_after_ms: pauseMs },
    ],
  };
}

/**
 * Submits an offline bundle job for `sessionId` (through `baseUrl`, any node), waits until it settles and downloads
 * its MP4 into a temporary file; rejects if the job failed.
 */
export async function renderOfflineBundle(
  baseUrl: string,
  sessionId: string,
  body: unknown,
  dir: string,
): Promise<string> {
  const job = `${baseUrl}/sessions/${sessionId}/rt-offline-bundle`;
  const submitted = await fetch(job, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  if (submitted.status !== 200)
    throw new Error(`offline bundle refused: ${submitted.status} ${await submitted.text()}`);
  const { job_id: jobId } = await submitted.json();
  for (;;) {
    const status = await (await fetch(`${job}/${jobId}`)).json();
    if (status.status === 'failed') throw new Error(`offline bundle failed: ${status.error}`);
    if (status.status === 'complete') break;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  const download = await fetch(`${job}/${jobId}/download`);
  if (download.status !== 200) throw new Error(`offline bundle download: ${download.status}`);
  const file = path.join(dir, `${jobId}.mp4`);
  await fs.writeFile(file, Buffer.from(await download.arrayBuffer()));
  return file;
}

/** A video avatar's loop as its bundle holds it: each frame's luma (the renderer's RGB → I420) and face. */
export interface LoopReference {
  width: number;
  height: number;
  lumas: Uint8Array[];
  track: MouthAnimation[];
}

export async function readLoopReference(bundleDir: string): Promise<LoopReference> {
  const manifest = JSON.parse(await fs.readFile(path.join(bundleDir, 'manifest.json'), 'utf8'));
  const { width, height } = manifest;
  const track: MouthAnimation[] = JSON.parse(
    await fs.readFile(path.join(bundleDir, manifest.metadata.clip.track_file), 'utf8'),
  );
  const lumas: Uint8Array[] = [];
  for (let i = 0; i < manifest.metadata.clip.frame_count; i++) {
    const png = path.join(bundleDir, 'frames', `frame_${String(i).padStart(5, '0')}.png`);
    const { data } = await sharp(png).ensureAlpha().raw().toBuffer({ resolveWithObject: true });
    lumas.push(
      rgbaToI420(new Uint8Array(data.buffer, data.byteOffset, data.length), width, height).data.subarray(
        0,
        width * height,
      ),
    );
  }
  return { width, height, lumas, track };
}

/** Mean absolute luma difference of two frames (Y planes of `width`) inside `box`, on every `step`th row and column. */
export function lumaDistance(a: Uint8Array, b: Uint8Array, width: number, box: Box, step = 1): number {
  let sum = 0;
  let n = 0;
  for (let y = box.y; y < box.y + box.h; y += step) {
    for (let x = box.x; x < box.x + box.w; x += step) {
      sum += Math.abs(a[y * width + x] - b[y * width + x]);
      n++;
    }
  }
  return sum / n;
}

/** The lips and the skin around them on one loop frame (opened lips reach well below the closed ones). */
export function mouthBox(face: MouthAnimation): Box {
  const w = face.mouth_width;
  return {
    x: Math.round(face.mouth_center.x - 0.6 * w),
    y: Math.round(face.mouth_center.y - 0.3 * w),
    w: Math.round(1.2 * w),
    h: Math.round(0.9 * w),
  };
}

/** The loop frame `luma` is closest to over `box`, and how close (on every 2nd row and column: a whole loop is searched per frame). */
export function nearestLoopFrame(luma: Uint8Array, loop: LoopReference, box: Box): { index: number; distance: number } {
  let best = { index: -1, distance: Infinity };
  loop.lumas.forEach((reference, index) => {
    const distance = lumaDistance(luma, reference, loop.width, box, 2);
    if (distance < best.distance) best = { index, distance };
  });
  return best;
}

/** The whole frame of a loop. */
function wholeOf(loop: LoopReference): Box {
  return { x: 0, y: 0, w: loop.width, h: loop.height };
}

/** The face above the lips on a loop frame: eyes, nose, forehead. */
function aboveMouth(face: MouthAnimation): Box {
  const top = Math.max(0, Math.round(face.face_box.y));
  return {
    x: Math.round(face.face_box.x),
    y: top,
    w: Math.round(face.face_box.width),
    h: Math.round(face.mouth_center.y - 0.5 * face.mouth_width) - top,
  };
}

/** What an offline MP4 of a video avatar showed, measured against the loop frame of each output frame. */
export interface OfflineClipFindings {
  /** Frames with silence under them and 200 ms either side (the mouth has closed), and frames under speech. */
  silentFrames: number;
  speakingFrames: number;
  /** Largest distance of a silent frame from the loop frame at its ping-pong position (`loopFrameIndex`). */
  silentFromLoopFrame: number;
  /** Largest distance of a silent frame from the first silent one: the head's motion through the loop. */
  headMotion: number;
  /** Largest change of a silent frame's mouth from its loop frame's own mouth. */
  silentMouthChange: number;
  /** Speaking frames whose mouth changed by more than MOUTH_OPEN, over all speaking frames. */
  speakingOpenedFraction: number;
  /** Largest distance of a speaking frame from its loop frame above the lips (the rest of the face keeps the loop). */
  speakingAboveMouth: number;
}

/**
 * Decodes an offline bundle (frame `i` of an offline render is the session frame `i`) and measures it against the
 * loop: silent frames should be their loop frame, speaking ones their loop frame with the mouth opened.
 */
export async function measureOfflineClipBundle(file: string, loop: LoopReference): Promise<OfflineClipFindings> {
  const frames = (await extractFrames(file, loop.width, loop.height)).map((i420) =>
    i420.subarray(0, loop.width * loop.height),
  );
  const audio = await extractAudio(file, SAMPLE_RATE);
  const rmsOf = (from: number, to: number) => {
    let energy = 0;
    for (let s = Math.max(0, from * FRAME_SAMPLES); s < Math.min(audio.length, to * FRAME_SAMPLES); s++)
      energy += audio[s] * audio[s];
    return Math.sqrt(energy / ((to - from) * FRAME_SAMPLES));
  };
  const whole = wholeOf(loop);
  const shown = (i: number) => loopFrameIndex(i, loop.lumas.length);
  const mouthChange = (i: number) =>
    lumaDistance(frames[i], loop.lumas[shown(i)], loop.width, mouthBox(loop.track[shown(i)]));
  const silent = frames.flatMap((_, i) => (rmsOf(i - 5, i + 6) < QUIET_RMS ? [i] : []));
  const speaking = frames.flatMap((_, i) => (rmsOf(i, i + 1) > SPEECH_RMS ? [i] : []));
  const worst = (indices: number[], measure: (i: number) => number) => Math.max(0, ...indices.map(measure));
  return {
    silentFrames: silent.length,
    speakingFrames: speaking.length,
    silentFromLoopFrame: worst(silent, (i) => lumaDistance(frames[i], loop.lumas[shown(i)], loop.width, whole)),
    headMotion: worst(silent, (i) => lumaDistance(frames[i], frames[silent[0]], loop.width, whole)),
    silentMouthChange: worst(silent, mouthChange),
    speakingOpenedFraction: speaking.filter((i) => mouthChange(i) > MOUTH_OPEN).length / Math.max(1, speaking.length),
    speakingAboveMouth: worst(speaking, (i) =>
      lumaDistance(frames[i], loop.lumas[shown(i)], loop.width, aboveMouth(loop.track[shown(i)])),
    ),
  };
}

/** What a recording of a video avatar's session showed (its first frame is some session frame: matched by search). */
export interface RecordedClipFindings {
  frames: number;
  /** Largest distance of a recorded frame from the loop frame nearest to it. */
  fromNearestLoopFrame: number;
  /** Distinct loop frames the recorded frames were nearest to. */
  loopFramesSeen: number;
  /** Largest distance of a recorded frame from the first one. */
  headMotion: number;
}

export async function measureRecordedClip(file: string, loop: LoopReference): Promise<RecordedClipFindings> {
  const frames = (await extractFrames(file, loop.width, loop.height)).map((i420) =>
    i420.subarray(0, loop.width * loop.height),
  );
  const whole = wholeOf(loop);
  const nearest = frames.map((luma) => nearestLoopFrame(luma, loop, whole));
  return {
    frames: frames.length,
    fromNearestLoopFrame: Math.max(0, ...nearest.map((match) => match.distance)),
    loopFramesSeen: new Set(nearest.map((match) => match.index)).size,
    headMotion: Math.max(0, ...frames.map((luma) => lumaDistance(luma, frames[0], loop.width, whole))),
  };
}
