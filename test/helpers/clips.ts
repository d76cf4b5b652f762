/**
 * Test clips made at test time from the repository's astronaut portrait with the bundled ffmpeg: the photo is
 * scaled up and a window moves over it (the head "moves" in the frame), so every clip has a real face and real
 * motion, and no third-party footage is needed.
 */
import { execFile } from 'node:child_process';
import { createRequire } from 'node:module';
import path from 'node:path';
import { promisify } from 'node:util';
import { PORTRAIT_FIXTURE } from './fixtures.ts';

const FFMPEG: string = (createRequire(import.meta.url)('@ffmpeg-installer/ffmpeg') as { path: string }).path;
const run = promisify(execFile);

async function ffmpeg(args: string[]): Promise<void> {
  await run(FFMPEG, ['-hide_banner', '-nostdin', '-loglevel', 'error', '-y', ...args], { timeout: 120_000 });
}

/** The portrait scaled to 1024², face centre near (445, 247); a window of `w × h` sways over it. */
function swayingWindow(w: number, h: number, left: number, top: number): string {
  return `scale=1024:1024,crop=${w}:${h}:'${left}+24*sin(2*t)':'${top}+12*sin(3*t)',format=yuv420p`;
}

/** Landscape 640×360 H.264 MP4 of `seconds`, with a 220 Hz tone as its audio track. */
export async function landscapeMp4(dir: string, seconds = 3): Promise<string> {
  const file = path.join(dir, 'landscape.mp4');
  await ffmpeg([
    '-loop', '1', '-framerate', '25', '-i', PORTRAIT_FIXTURE, '-f', 'lavfi', '-i', 'sine=frequency=220:sample_rate=16000',
    '-t', String(seconds), '-vf', swayingWindow(640, 360, 125, 67), '-c:v', 'libx264', '-preset', 'ultrafast', '-c:a', 'aac', '-shortest', file,
  ]);
  return file;
}

/** Portrait 360×640 VP8 WebM of `seconds`, no audio. */
export async function portraitWebm(dir: string, seconds = 3): Promise<string> {
  const file = path.join(dir, 'portrait.webm');
  await ffmpeg([
    '-loop', '1', '-framerate', '25', '-i', PORTRAIT_FIXTURE, '-t', String(seconds), '-vf', swayingWindow(360, 640, 265, 0),
    '-c:v', 'libvpx', '-deadline', 'realtime', '-cpu-used', '8', '-b:v', '1M', file,
  ]);
  return file;
}

/**
 * A phone-style portrait MP4: the pixels are stored sideways (360 wide × 640 tall turned to 640 × 360) with a
 * rotation tag that turns them upright; only a decoder that honours the tag sees an upright face.
 */
export async function rotatedMp4(dir: string, seconds = 3): Promise<string> {
  const sideways = path.join(dir, 'sideways.mp4');
  await ffmpeg([
    '-loop', '1', '-framerate', '25', '-i', PORTRAIT_FIXTURE, '-t', String(seconds), '-vf', `${swayingWindow(360, 640, 265, 0)},transpose=2`,
    '-c:v', 'libx264', '-preset', 'ultrafast', sideways,
  ]);
  const file = path.join(dir, 'rotated.mp4');
  await ffmpeg(['-i', sideways, '-c', 'copy', '-metadata:s:v:0', 'rotate=270', file]);
  return file;
}

/** A solid grey clip: a video, but no face. */
export async function facelessMp4(dir: string, seconds = 3): Promise<string> {
  const file = path.join(dir, 'faceless.mp4');
  await ffmpeg(['-f', 'lavfi', '-i', `color=c=gray:s=320x240:r=25:d=${seconds}`, '-c:v', 'libx264', '-preset', 'ultrafast', file]);
  return file;
}

/** A tiny clip longer than any accepted one. */
export async function longMp4(dir: string, seconds: number): Promise<string> {
  const file = path.join(dir, 'long.mp4');
  await ffmpeg(['-f', 'lavfi', '-i', `color=c=gray:s=64x64:r=5:d=${seconds}`, '-c:v', 'libx264', '-preset', 'ultrafast', file]);
  return file;
}

/** Sound only, in an MP4 container. */
export async function audioOnlyM4a(dir: string, seconds = 3): Promise<string> {
  const file = path.join(dir, 'audio.m4a');
  await ffmpeg(['-f', 'lavfi', '-i', `sine=frequency=220:sample_rate=16000:duration=${seconds}`, '-c:a', 'aac', file]);
  return file;
}
