/**
 * Test clips made at test time from the repository's astronaut portrait with the bundled ffmpeg: the photo is
 * scaled up and a window moves over it (the head "moves" in the frame), so every clip has a real face and real
 * motion, and no third-party footage is needed.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import fs from 'node:fs/promises';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { encodeWav } from '../../actors/audio/wav.ts';
import { i420ToRgba } from '../../actors/render/i420.ts';
import { WarpRenderer } from '../../actors/render/renderers/warp.ts';
import { buildMouthTimeline } from '../../actors/mouth/timeline.ts';
import { synthesizeWithFlite } from '../../actors/tts/builtin/flite.ts';
import { validateManifest } from '../../src/catalog/manifest.ts';
import { PORTRAIT_FIXTURE } from './fixtures.ts';

const FFMPEG: string = (createRequire(import.meta.url)('@ffmpeg-installer/ffmpeg') as { path: string }).path;
const run = promisify(execFile);

/** Runs the bundled ffmpeg quietly (errors only), overwriting outputs. */
export async function ffmpeg(args: string[]): Promise<void> {
  await run(FFMPEG, ['-hide_banner', '-nostdin', '-loglevel', 'error', '-y', ...args], { timeout: 120_000 });
}

/** Clips made so far in this test process, by kind and length, each made once into `madeDir()`. */
const madeClips = new Map<string, Promise<string>>();
let madeClipsDir: string | undefined;

/** This process's clip cache, removed when the process exits. */
function madeDir(): string {
  if (!madeClipsDir) {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'test-clips-'));
    process.once('exit', () => rmSync(dir, { recursive: true, force: true }));
    madeClipsDir = dir;
  }
  return madeClipsDir;
}

/**
 * The clip `key` as `fileName` in `dir`: made by `make` (into a directory of its own) the first time this process
 * asks for it, a copy of that file every later time, so tests that need the same clip again skip ffmpeg.
 */
async function madeOnce(
  key: string,
  dir: string,
  fileName: string,
  make: (into: string) => Promise<string>,
): Promise<string> {
  let made = madeClips.get(key);
  if (!made) {
    made = fs.mkdtemp(path.join(madeDir(), `${key}-`)).then(make);
    madeClips.set(key, made);
    made.catch(() => madeClips.delete(key));
  }
  const file = path.join(dir, fileName);
  await fs.copyFile(await made, file);
  return file;
}

/** The portrait scaled to 1024², face centre near (445, 247); a window of `w × h` sways over it. */
function swayingWindow(w: number, h: number, left: number, top: number): string {
  return `scale=1024:1024,crop=${w}:${h}:'${left}+24*sin(2*t)':'${top}+12*sin(3*t)',format=yuv420p`;
}

/** Landscape 640×360 H.264 MP4 of `seconds`, with a 220 Hz tone as its audio track. */
export async function landscapeMp4(dir: string, seconds = 3): Promise<string> {
  return madeOnce(`landscape-${seconds}`, dir, 'landscape.mp4', async (into) => {
    const file = path.join(into, 'landscape.mp4');
    await ffmpeg([
      '-loop',
      '1',
      '-framerate',
      '25',
      '-i',
      PORTRAIT_FIXTURE,
      '-f',
      'lavfi',
      '-i',
      'sine=frequency=220:sample_rate=16000',
      '-t',
      String(seconds),
      '-vf',
      swayingWindow(640, 360, 125, 67),
      '-c:v',
      'libx264',
      '-preset',
      'ultrafast',
      '-c:a',
      'aac',
      '-shortest',
      file,
    ]);
    return file;
  });
}

/**
 * Landscape 640×360 H.264 MP4 of `seconds` filmed as docs/avatars.md asks: the camera still, only the head moving.
 * The portrait scaled to 1024² is the still background; over it the same image, masked to a feathered ellipse around
 * the head, sways a few pixels (a person breathing and nodding slightly in front of a wall). Audio: a 220 Hz tone.
 */
export async function stillCameraMp4(dir: string, seconds = 3): Promise<string> {
  return madeOnce(`still-camera-${seconds}`, dir, 'still-camera.mp4', async (into) => {
    const head = path.join(into, 'head.png');
    // The head (face centre near (445, 250) in 1024²): opaque inside the inner ellipse, fading out over ~48 px.
    const ellipse = 'clip((1.18-hypot((X-445)/190,(Y-250)/250))*255/0.18,0,255)';
    await ffmpeg([
      '-i',
      PORTRAIT_FIXTURE,
      '-vf',
      `scale=1024:1024,format=rgba,geq=r='r(X,Y)':g='g(X,Y)':b='b(X,Y)':a='${ellipse}'`,
      '-frames:v',
      '1',
      head,
    ]);
    const file = path.join(into, 'still-camera.mp4');
    await ffmpeg([
      '-loop',
      '1',
      '-framerate',
      '25',
      '-i',
      PORTRAIT_FIXTURE,
      '-loop',
      '1',
      '-framerate',
      '25',
      '-i',
      head,
      '-f',
      'lavfi',
      '-i',
      'sine=frequency=220:sample_rate=16000',
      '-t',
      String(seconds),
      '-filter_complex',
      "[0:v]scale=1024:1024[bg];[bg][1:v]overlay=x='6*sin(2*t)':y='4*sin(3*t)',crop=640:360:125:67,format=yuv420p[v]",
      '-map',
      '[v]',
      '-map',
      '2:a',
      '-c:v',
      'libx264',
      '-preset',
      'ultrafast',
      '-c:a',
      'aac',
      '-shortest',
      file,
    ]);
    return file;
  });
}

/** Portrait 360×640 VP8 WebM of `seconds`, no audio. */
export async function portraitWebm(dir: string, seconds = 3): Promise<string> {
  return madeOnce(`portrait-${seconds}`, dir, 'portrait.webm', async (into) => {
    const file = path.join(into, 'portrait.webm');
    await ffmpeg([
      '-loop',
      '1',
      '-framerate',
      '25',
      '-i',
      PORTRAIT_FIXTURE,
      '-t',
      String(seconds),
      '-vf',
      swayingWindow(360, 640, 265, 0),
      '-c:v',
      'libvpx',
      '-deadline',
      'realtime',
      '-cpu-used',
      '8',
      '-b:v',
      '1M',
      file,
    ]);
    return file;
  });
}

/**
 * A phone-style portrait MP4: the pixels are stored sideways (360 wide × 640 tall turned to 640 × 360) with a
 * rotation tag that turns them upright; only a decoder that honours the tag sees an upright face.
 */
export async function rotatedMp4(dir: string, seconds = 3): Promise<string> {
  return madeOnce(`rotated-${seconds}`, dir, 'rotated.mp4', async (into) => {
    const sideways = path.join(into, 'sideways.mp4');
    await ffmpeg([
      '-loop',
      '1',
      '-framerate',
      '25',
      '-i',
      PORTRAIT_FIXTURE,
      '-t',
      String(seconds),
      '-vf',
      `${swayingWindow(360, 640, 265, 0)},transpose=2`,
      '-c:v',
      'libx264',
      '-preset',
      'ultrafast',
      sideways,
    ]);
    const file = path.join(into, 'rotated.mp4');
    await ffmpeg(['-i', sideways, '-c', 'copy', '-metadata:s:v:0', 'rotate=270', file]);
    return file;
  });
}

/** A solid grey clip: a video, but no face. */
export async function facelessMp4(dir: string, seconds = 3): Promise<string> {
  return madeOnce(`faceless-${seconds}`, dir, 'faceless.mp4', async (into) => {
    const file = path.join(into, 'faceless.mp4');
    await ffmpeg([
      '-f',
      'lavfi',
      '-i',
      `color=c=gray:s=320x240:r=25:d=${seconds}`,
      '-c:v',
      'libx264',
      '-preset',
      'ultrafast',
      file,
    ]);
    return file;
  });
}

/** A tiny clip longer than any accepted one. */
export async function longMp4(dir: string, seconds: number): Promise<string> {
  return madeOnce(`long-${seconds}`, dir, 'long.mp4', async (into) => {
    const file = path.join(into, 'long.mp4');
    await ffmpeg([
      '-f',
      'lavfi',
      '-i',
      `color=c=gray:s=64x64:r=5:d=${seconds}`,
      '-c:v',
      'libx264',
      '-preset',
      'ultrafast',
      file,
    ]);
    return file;
  });
}

/** Sound only, in an MP4 container. */
export async function audioOnlyM4a(dir: string, seconds = 3): Promise<string> {
  return madeOnce(`audio-${seconds}`, dir, 'audio.m4a', async (into) => {
    const file = path.join(into, 'audio.m4a');
    await ffmpeg([
      '-f',
      'lavfi',
      '-i',
      `sine=frequency=220:sample_rate=16000:duration=${seconds}`,
      '-c:a',
      'aac',
      file,
    ]);
    return file;
  });
}

/**
 * Open vowels and closed lips, as the recording advice in docs/avatars.md asks of a person, in as few words as
 * give the harvest every opening step (every frame of the clip is rendered here and tracked by the service).
 */
const SPEAKING_CLIP_TEXT = 'Hello, I am Ava. Papa bought a big balloon.';
/** Closed-lip silence before and after the speech (the loop starts and ends at rest). */
const SPEAKING_CLIP_PAUSE_MS = 400;

/**
 * A clip of the astronaut really speaking: flite speaks `SPEAKING_CLIP_TEXT`, our mouth track (phones → visemes,
 * gated by the audio's energy) drives the CPU `lipsync` renderer on the built-in astronaut bundle frame by frame,
 * and ffmpeg encodes the frames with that speech as the audio track (512² H.264 + AAC, 25 fps, ~4 s). The mouth
 * opens and closes in time with the audio, as a person's does: what mouth harvesting needs to find.
 */
export async function speakingClipMp4(dir: string): Promise<string> {
  const speech = await synthesizeWithFlite('slt', SPEAKING_CLIP_TEXT);
  const mouth = buildMouthTimeline(speech);
  const bundleDir = fileURLToPath(new URL('../../avatars/astronaut', import.meta.url));
  const manifest = validateManifest(JSON.parse(await fs.readFile(path.join(bundleDir, 'manifest.json'), 'utf8')));
  const renderer = new WarpRenderer();
  await renderer.prepare({ id: manifest.id, dir: bundleDir, manifest });
  const totalMs = mouth.durationMs + 2 * SPEAKING_CLIP_PAUSE_MS;
  const frameCount = Math.ceil((totalMs / 1000) * 25);
  const frames = path.join(dir, 'speaking.rgba');
  const handle = await fs.open(frames, 'w');
  try {
    for (let i = 0; i < frameCount; i++) {
      const atMs = i * 40 - SPEAKING_CLIP_PAUSE_MS;
      const speaking = atMs >= 0 && atMs <= mouth.durationMs;
      const pose = mouth.poseAt(atMs);
      const frame = renderer.render({
        frameIdx: i,
        ptsMs: i * 40,
        mouth: pose,
        level: speaking ? mouth.levelAt(atMs) : 0,
        speaking,
      });
      await handle.write(i420ToRgba(frame));
    }
  } finally {
    await handle.close();
  }
  const wav = path.join(dir, 'speaking.wav');
  const pause = new Int16Array(Math.round((speech.sampleRate * SPEAKING_CLIP_PAUSE_MS) / 1000));
  await fs.writeFile(wav, encodeWav(Int16Array.from([...pause, ...speech.pcm, ...pause]), speech.sampleRate));
  const file = path.join(dir, 'speaking.mp4');
  await ffmpeg([
    '-f',
    'rawvideo',
    '-pix_fmt',
    'rgba',
    '-s',
    `${manifest.width}x${manifest.height}`,
    '-framerate',
    '25',
    '-i',
    frames,
    '-i',
    wav,
    '-c:v',
    'libx264',
    '-preset',
    'ultrafast',
    '-crf',
    '18',
    '-pix_fmt',
    'yuv420p',
    '-c:a',
    'aac',
    '-shortest',
    file,
  ]);
  await fs.rm(frames, { force: true });
  await fs.rm(wav, { force: true });
  return file;
}
