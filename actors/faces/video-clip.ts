/**
 * Turns an uploaded clip into a video avatar's frames and face track: the clip is opened only as the container its
 * first bytes name, only as that one file and only with the accepted decoders (`clipInputArgs`), and its figures
 * are measured by ffmpeg from the stream itself — codec, timing and frame rate from its packets, size and rotation
 * from its first decoded frame — never read from its metadata. One frame is searched for the face to place the
 * avatar's window, then ffmpeg decodes the loop — the first video stream only, turned upright by its rotation,
 * audio ignored, 25 fps, cropped around the face and scaled to the avatar size — straight into the bundle's PNG
 * frames, handing every `CLIP_DETECT_EVERY`th frame to the face detector meanwhile (a full search every
 * `CLIP_REDETECT_EVERY` frames, the landmarks refitted around the last face between). The detections become a
 * smoothed per-frame track (`face-track.ts`). All decoding happens in ffmpeg's own process, under deadlines and
 * output bounds.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import type { MouthAnimation } from '../render/types.ts';
import {
  ClipProcessError,
  clipInputArgs,
  parseFrameReport,
  runFfmpeg,
  type ClipFormat,
  type FrameReportStream,
} from './clip-ffmpeg.ts';
import { buildFaceTrack } from './face-track.ts';
import { faceHint } from './landmarks.ts';
import { laidOpeningsOn, MouthHarvest, type HarvestedMouthFiles } from './mouth-harvest.ts';
import { coverCrop, DETECTION_MAX_SIDE, type Detector } from './portrait.ts';

/** Clip uploads are refused while streaming past this: 60 s of phone video at a typical 6 Mbit/s is ~45 MB. */
export const MAX_CLIP_BYTES = 50 * 1024 * 1024;
/** Shorter clips show too little motion to loop; longer ones add nothing to the loop and cost creation time. */
export const MIN_CLIP_SECONDS = 2;
export const MAX_CLIP_SECONDS = 60;
/** The avatar's frame rate (the render clock's); the clip is resampled to it. */
export const CLIP_FPS = 25;
/** Largest side of an accepted clip (4K video is 3840 × 2160). */
export const MAX_CLIP_SIDE = 4096;
/**
 * Pixels of one frame ffmpeg may allocate (its decoders' `max_pixels`, checked from the bitstream before a frame's
 * buffers exist): the largest accepted clip's, so a stream whose real size is larger than its container says
 * fails to decode instead of costing hundreds of MB.
 */
export const MAX_CLIP_PIXELS = MAX_CLIP_SIDE * MAX_CLIP_SIDE;
/** The codecs accepted (ffmpeg's decoder names), whatever the container: what phones and browsers record. */
export const CLIP_CODECS = ['h264', 'vp8', 'vp9'] as const;
/** Above this many frames a second (slow motion is 240) a clip costs more to decode than it can add to a 25 fps loop. */
export const MAX_CLIP_FRAME_RATE = 240;
/**
 * The packet report of the longest, fastest accepted clip: 60 s at 240 fps, plus its audio packets (~50 a second),
 * at ~70 bytes a line. A clip whose report is longer is refused.
 */
const MAX_PACKET_REPORT_BYTES = MAX_CLIP_SECONDS * (MAX_CLIP_FRAME_RATE + 100) * 70;
/** The first-frame report: a few header lines and five frame lines. */
const MAX_FIRST_FRAME_REPORT_BYTES = 16 * 1024;
/**
 * Frames the idle loop keeps (6 s at 25 fps, played forwards then backwards: a 12 s cycle with no jump). It bounds
 * what a clip decodes to (≤ 150 PNG frames at the avatar size) and what every render worker holds decoded (150 I420
 * frames of 512² are 59 MB), whatever the clip's length.
 */
export const MAX_LOOP_FRAMES = 150;
/**
 * The face's landmarks are fitted on every 5th loop frame and interpolated between: head motion over 200 ms is
 * small, and the track is smoothed anyway.
 */
export const CLIP_DETECT_EVERY = 5;
/**
 * A full detection (SSD over the whole frame, ~0.5 s of CPU on the 2-core host) runs on every 50th frame (every
 * 2 s) and wherever the face moved too far to follow; the sampled frames between only refit the landmarks in the
 * last face box (~30 ms). A 6 s loop costs 3 full detections and 27 refits instead of 30 full detections, which
 * keeps a 10 s clip's creation well within 30 s; the periodic full pass stops a followed box from drifting.
 */
export const CLIP_REDETECT_EVERY = 50;
/**
 * Frames after the loop sampled for mouth harvesting (`mouth-harvest.ts`), spread evenly up to
 * `MAX_HARVEST_SECONDS` (at most every 5th frame): the mouths the person makes while speaking, wherever they speak,
 * for 30 more landmark refits (~1–4 s) and at most 30 more frames waiting for the detector, whatever the clip's length.
 */
export const MAX_HARVEST_EXTRA_SAMPLES = 30;
/**
 * Mouths are looked for in the first 30 s only (what docs/avatars.md asks a clip to be): every frame up to there
 * is decoded to reach the sampled ones, and decoding the rest of a 60 s 4K clip (~20 ms a frame on one thread)
 * would take most of `CLIP_DECODE_DEADLINE_MS` on a loaded host.
 */
export const MAX_HARVEST_SECONDS = 30;
/** A clip whose face is found on fewer than half the sampled frames has no usable face. */
export const MIN_TRACKED_FRACTION = 0.5;
/** ffmpeg reading the header; it reads a few KB, so a run this long is a file built to be slow. */
export const CLIP_PROBE_DEADLINE_MS = 10_000;
/**
 * Decoding, cropping and PNG-encoding the loop (≤ 150 frames; ~5 s on a loaded 2-core host), and decoding on to
 * `MAX_HARVEST_SECONDS` for the mouth samples (≤ 600 more frames, decoded and scaled but not stored).
 */
export const CLIP_DECODE_DEADLINE_MS = 60_000;

/** The upload is not a usable clip (empty, not a video, too short/long/large, undecodable, no face); callers answer 400. */
export class InvalidClipError extends Error {
  override name = 'InvalidClipError';
}

export type { ClipFormat } from './clip-ffmpeg.ts';

/** ISO base media (MP4, MOV) by its first box, Matroska/WebM by its EBML magic; anything else is null. */
export function sniffClipFormat(bytes: Uint8Array): ClipFormat | null {
  if (bytes.length >= 4 && bytes[0] === 0x1a && bytes[1] === 0x45 && bytes[2] === 0xdf && bytes[3] === 0xa3)
    return 'webm';
  if (bytes.length >= 8) {
    const box = String.fromCharCode(...bytes.subarray(4, 8));
    if (['ftyp', 'moov', 'mdat', 'free', 'wide', 'skip', 'pnot'].includes(box)) return 'mp4';
  }
  return null;
}

/** A clip's figures, all measured by ffmpeg from its first video stream. */
export interface ClipInfo {
  format: ClipFormat;
  /** From the packets: the first one's start to the last one's end. */
  durationS: number;
  /** Video packets a second over that duration. */
  frameRate: number;
  /** The decoder ffmpeg uses for the stream (one of CLIP_CODECS). */
  codec: string;
  /** Upright size: the first decoded frame's, as ffmpeg turns it by the stream's rotation. */
  width: number;
  height: number;
  /** Degrees clockwise the stored frames are turned to be upright (0, 90, 180 or 270). */
  rotation: number;
  hasAudio: boolean;
}

export interface PreparedClip {
  info: ClipInfo;
  /** Frames written (`frame_00000.png` …). */
  frameCount: number;
  /** Per frame, in frame pixels. */
  track: MouthAnimation[];
  /** Sampled frames and how many of them had a face. */
  sampled: number;
  detected: number;
  /** The mouths harvested from the clip (`mouths/`), or null when it shows no speech. */
  mouths: HarvestedMouthFiles | null;
}

/**
 * Checks the clip in `file` and writes its loop frames into `framesDir` (which must exist and be empty).
 * Throws `InvalidClipError` for anything that is the upload's fault.
 */
export async function prepareClip(
  file: string,
  target: { width: number; height: number },
  framesDir: string,
  opts: { detect: Detector; signal?: AbortSignal },
): Promise<PreparedClip> {
  const info = await probeClip(file, opts.signal);
  const loopFrames = Math.min(MAX_LOOP_FRAMES, Math.floor(info.durationS * CLIP_FPS));
  const loopSeconds = loopFrames / CLIP_FPS;
  const face = (await findFace(file, info, loopSeconds / 2, opts)) ?? (await findFace(file, info, 0, opts));
  if (!face) throw new InvalidClipError('no usable face found in the clip');
  const crop = coverCrop(info, target, {
    x: face.face_box.x + face.face_box.width / 2,
    y: face.face_box.y + face.face_box.height / 2,
  });

  const frameBytes = target.width * target.height * 4;
  const loopSamples = Math.ceil(loopFrames / CLIP_DETECT_EVERY);
  // After the loop, frames are only sampled for their mouths, every `harvestStep`th up to `MAX_HARVEST_SECONDS`.
  const clipFrames = Math.floor(Math.min(info.durationS, MAX_HARVEST_SECONDS) * CLIP_FPS);
  const extraFrames = Math.max(0, clipFrames - loopFrames);
  const harvestStep = Math.max(CLIP_DETECT_EVERY, Math.ceil(extraFrames / MAX_HARVEST_EXTRA_SAMPLES));
  const samples = loopSamples + Math.ceil(extraFrames / harvestStep);
  const frameOfSample = (sample: number) =>
    sample < loopSamples ? sample * CLIP_DETECT_EVERY : loopFrames + (sample - loopSamples) * harvestStep;
  const harvest = new MouthHarvest();
  let loopDetected = 0;
  const detections = new Map<number, MouthAnimation>();
  let pending: Buffer[] = [];
  let pendingBytes = 0;
  let sampleIndex = 0;
  let detecting: Promise<void> = Promise.resolve();
  // Stops the detections still queued when the decode fails, so they neither run on nor reject unheard.
  const stopDetecting = new AbortController();
  const detectSignal = opts.signal ? AbortSignal.any([opts.signal, stopDetecting.signal]) : stopDetecting.signal;
  // The face on the last sampled frame, followed onto the next one (null: search the next frame whole).
  let last: MouthAnimation | null = null;
  // The loop's first frame (`frame_00000.png`, the renderers' reference): harvested mouths are keyed as laid on it.
  let referenceRgba: Uint8Array | null = null;
  const onFrame = (rgba: Buffer) => {
    const frameIndex = frameOfSample(sampleIndex++);
    if (frameIndex === 0) referenceRgba = new Uint8Array(rgba);
    // One detection at a time, in order, while ffmpeg keeps decoding; at most `samples` frames wait (bounded output).
    detecting = detecting.then(async () => {
      detectSignal.throwIfAborted();
      const near = last && frameIndex % CLIP_REDETECT_EVERY !== 0 ? faceHint(last) : undefined;
      const result = await opts.detect(
        { rgba, width: target.width, height: target.height, ...(near ? { near } : {}) },
        { signal: detectSignal },
      );
      last = result.ok ? result.animation : null;
      if (!result.ok) return;
      // The raw landmarks, not the smoothed track: smoothing over ±3 frames would blur the mouth's opening.
      harvest.add(rgba, target.width, target.height, result.animation, frameIndex);
      if (frameIndex < loopFrames) {
        detections.set(frameIndex, result.animation);
        loopDetected++;
      }
    });
    // An aborted detection can reject while ffmpeg still runs, before anything awaits the chain: marked heard
    // here (not an unhandled rejection), it still rejects the `await detecting` below.
    detecting.catch(() => undefined);
  };
  const filter =
    `[0:v:0]fps=${CLIP_FPS},crop=${crop.width}:${crop.height}:${crop.left}:${crop.top},scale=${target.width}:${target.height},format=rgb24,split=2[png][det];` +
    `[det]select=if(lt(n\\,${loopFrames})\\,not(mod(n\\,${CLIP_DETECT_EVERY}))\\,not(mod(n-${loopFrames}\\,${harvestStep}))),format=rgba[rgba]`;
  const decoding = runFfmpegOrInvalid(
    [
      '-threads',
      '1',
      '-t',
      String((loopFrames + extraFrames) / CLIP_FPS + 0.5),
      ...clipInput(file, info.format),
      '-an',
      '-sn',
      '-dn',
      '-filter_complex',
      filter,
      '-map',
      '[png]',
      '-frames:v',
      String(loopFrames),
      '-vsync',
      '0',
      '-start_number',
      '0',
      '-f',
      'image2',
      path.join(framesDir, 'frame_%05d.png'),
      '-map',
      '[rgba]',
      '-frames:v',
      String(samples),
      '-vsync',
      '0',
      '-f',
      'rawvideo',
      '-pix_fmt',
      'rgba',
      'pipe:1',
    ],
    {
      deadlineMs: CLIP_DECODE_DEADLINE_MS,
      maxStdoutBytes: samples * frameBytes,
      signal: opts.signal,
      onStdout: (chunk) => {
        pending.push(chunk);
        pendingBytes += chunk.length;
        while (pendingBytes >= frameBytes) {
          const all = Buffer.concat(pending);
          onFrame(all.subarray(0, frameBytes));
          pending = [all.subarray(frameBytes)];
          pendingBytes -= frameBytes;
        }
      },
    },
  );
  let run;
  try {
    run = await decoding;
  } catch (error) {
    stopDetecting.abort(error);
    await detecting.catch(() => undefined);
    throw error;
  }
  await detecting;
  const frameCount = (await fs.readdir(framesDir)).filter((name) => /^frame_\d{5}\.png$/.test(name)).length;
  // A clip cut short (truncated upload) decodes to fewer frames than its header promises.
  if (run.code !== 0 || frameCount < Math.min(loopFrames, MIN_CLIP_SECONDS * CLIP_FPS) * 0.9) {
    throw new InvalidClipError('clip is truncated or could not be decoded');
  }
  const loopSampled = Math.min(sampleIndex, loopSamples);
  if (loopDetected < Math.max(1, loopSampled * MIN_TRACKED_FRACTION))
    throw new InvalidClipError('no usable face found in most of the clip');
  const track = buildFaceTrack(frameCount, detections);
  const reference = referenceRgba
    ? { rgba: referenceRgba, width: target.width, height: target.height, face: track[0] }
    : null;
  const mouths = await harvest.finish(reference ? laidOpeningsOn(reference, opts.detect, opts.signal) : undefined);
  return { info, frameCount, track, sampled: loopSampled, detected: loopDetected, mouths };
}

/**
 * Measures the clip in `file` and applies the clip rules; throws `InvalidClipError` for a refused clip. Two short
 * ffmpeg runs, both on the first video stream only (`-map 0:v:0`, as every later run): its packets copied, not
 * decoded (codec, timing, frame rate; whether there is audio), then its first frame decoded twice, as ffmpeg turns
 * it upright and as stored, the stored one turned each way (size and rotation).
 */
export async function probeClip(file: string, signal?: AbortSignal): Promise<ClipInfo> {
  const format = await sniffClipFile(file);
  if (!format) throw new InvalidClipError('video must be MP4, MOV or WebM');
  const packets = await runFfmpegOrInvalid(
    [...clipInput(file, format), '-map', '0:v:0?', '-map', '0:a:0?', '-c', 'copy', '-f', 'framecrc', 'pipe:1'],
    { deadlineMs: CLIP_PROBE_DEADLINE_MS, maxStdoutBytes: MAX_PACKET_REPORT_BYTES, signal },
  );
  const streams = [...parseFrameReport(packets.stdout).values()];
  if (streams.length === 0) throw new InvalidClipError('video could not be read (truncated or not a video)');
  const video = streams.find((stream) => stream.mediaType === 'video');
  if (!video) throw new InvalidClipError('the file has no video stream');
  if (!(CLIP_CODECS as readonly string[]).includes(video.codec)) {
    throw new InvalidClipError(`video codec ${video.codec || 'unknown'} is not accepted: H.264, VP8 or VP9 only`);
  }
  const durationS = packetSpanS(video);
  if (durationS === 0) throw new InvalidClipError('video has no frames (truncated?)');
  if (!(durationS >= MIN_CLIP_SECONDS)) throw new InvalidClipError(`video must be at least ${MIN_CLIP_SECONDS} s long`);
  if (durationS > MAX_CLIP_SECONDS) throw new InvalidClipError(`video must be at most ${MAX_CLIP_SECONDS} s long`);
  const frameRate = video.lines.length / durationS;
  if (frameRate > MAX_CLIP_FRAME_RATE)
    throw new InvalidClipError(`video has more than ${MAX_CLIP_FRAME_RATE} frames a second`);
  const frame = await measureFirstFrame(file, format, signal);
  // The container's own size (`#dimensions` of the copied stream) only words the refusal; the decoder decided it.
  const declaredTooLarge =
    Math.max(video.width, video.height) > MAX_CLIP_SIDE || video.width * video.height > MAX_CLIP_PIXELS;
  if (!frame)
    throw new InvalidClipError(
      declaredTooLarge ? `video is larger than ${MAX_CLIP_SIDE} px on a side` : 'video could not be decoded',
    );
  if (frame.width < 16 || frame.height < 16) throw new InvalidClipError('video is too small');
  if (Math.max(frame.width, frame.height) > MAX_CLIP_SIDE)
    throw new InvalidClipError(`video is larger than ${MAX_CLIP_SIDE} px on a side`);
  const hasAudio = streams.some((stream) => stream.mediaType === 'audio');
  return {
    format,
    durationS,
    frameRate,
    codec: video.codec,
    width: frame.width,
    height: frame.height,
    rotation: frame.rotation,
    hasAudio,
  };
}

/** How a clip is opened by every run: as `format`, the one file, the accepted decoders, frames of at most MAX_CLIP_PIXELS. */
function clipInput(file: string, format: ClipFormat, opts: { autorotate?: boolean } = {}): string[] {
  return clipInputArgs(file, format, { decoders: CLIP_CODECS, maxPixels: MAX_CLIP_PIXELS, ...opts });
}

/** The format the first bytes of `file` name (`sniffClipFormat`), or null. */
async function sniffClipFile(file: string): Promise<ClipFormat | null> {
  const handle = await fs.open(file, 'r');
  try {
    const head = Buffer.alloc(8);
    const { bytesRead } = await handle.read(head, 0, head.length, 0);
    return sniffClipFormat(head.subarray(0, bytesRead));
  } finally {
    await handle.close();
  }
}

/**
 * Seconds from the first packet's start to the last one's end. A last packet without a duration (Matroska
 * blocks often have none) lasts as long as the average packet before it.
 */
function packetSpanS(stream: FrameReportStream): number {
  const { lines } = stream;
  if (lines.length === 0 || !(stream.timeBase > 0)) return 0;
  let first = Infinity;
  let last = -Infinity;
  let lastDuration = 0;
  for (const line of lines) {
    first = Math.min(first, line.pts);
    if (line.pts >= last) [last, lastDuration] = [line.pts, line.duration];
  }
  const average = lines.length > 1 ? (last - first) / (lines.length - 1) : 0;
  return (last - first + (lastDuration > 0 ? lastDuration : average)) * stream.timeBase;
}

/** A stored frame turned each way ffmpeg's autorotation can turn it (ffmpeg 4: transpose or both flips), by the degrees named. */
const TURNS = [
  { rotation: 0, filter: 'null' },
  { rotation: 90, filter: 'transpose=clock' },
  { rotation: 270, filter: 'transpose=cclock' },
  { rotation: 180, filter: 'hflip,vflip' },
] as const;

/**
 * The first frame of the first video stream decoded as ffmpeg turns it upright (what every later run decodes) and
 * as stored, the stored one turned each way: the upright frame's size, and the rotation whose turn gives exactly
 * its bytes. Null when no frame decodes (corrupt, or larger than MAX_CLIP_PIXELS). A rotation ffmpeg applies that is
 * none of these (not a multiple of 90°) is refused.
 */
async function measureFirstFrame(
  file: string,
  format: ClipFormat,
  signal?: AbortSignal,
): Promise<{ width: number; height: number; rotation: number } | null> {
  const turns = TURNS.map((turn, k) => `[s${k}]${turn.filter}[t${k}]`).join(';');
  const filter = `[0:v:0]trim=end_frame=1[upright];[1:v:0]trim=end_frame=1,split=${TURNS.length}${TURNS.map((_, k) => `[s${k}]`).join('')};${turns}`;
  const run = await runFfmpegOrInvalid(
    [
      '-threads',
      '1',
      ...clipInput(file, format),
      '-threads',
      '1',
      ...clipInput(file, format, { autorotate: false }),
      '-filter_complex',
      filter,
      '-map',
      '[upright]',
      ...TURNS.flatMap((_, k) => ['-map', `[t${k}]`]),
      '-f',
      'framecrc',
      'pipe:1',
    ],
    { deadlineMs: CLIP_PROBE_DEADLINE_MS, maxStdoutBytes: MAX_FIRST_FRAME_REPORT_BYTES, signal },
  );
  const report = parseFrameReport(run.stdout);
  const upright = report.get(0);
  if (run.code !== 0 || !upright || upright.lines.length === 0) return null;
  const same = (k: number) => {
    const turned = report.get(k + 1);
    return (
      turned?.width === upright.width &&
      turned.height === upright.height &&
      turned.lines[0]?.hash === upright.lines[0].hash
    );
  };
  const turn = TURNS.find((_, k) => same(k));
  if (!turn) throw new InvalidClipError('video rotation must be a multiple of 90°');
  return { width: upright.width, height: upright.height, rotation: turn.rotation };
}

/** Detects the face on the frame at `atS`, on an upright copy ≤ DETECTION_MAX_SIDE; the animation in clip pixels, or null. */
async function findFace(
  file: string,
  info: ClipInfo,
  atS: number,
  opts: { detect: Detector; signal?: AbortSignal },
): Promise<MouthAnimation | null> {
  const scale = Math.min(1, DETECTION_MAX_SIDE / Math.max(info.width, info.height));
  const width = Math.max(2, Math.round((info.width * scale) / 2) * 2);
  const height = Math.max(2, Math.round((info.height * scale) / 2) * 2);
  const chunks: Buffer[] = [];
  await runFfmpegOrInvalid(
    [
      '-threads',
      '1',
      '-ss',
      atS.toFixed(2),
      ...clipInput(file, info.format),
      '-map',
      '0:v:0',
      '-frames:v',
      '1',
      '-vf',
      `scale=${width}:${height}`,
      '-f',
      'rawvideo',
      '-pix_fmt',
      'rgba',
      'pipe:1',
    ],
    {
      deadlineMs: CLIP_PROBE_DEADLINE_MS,
      maxStdoutBytes: width * height * 4,
      signal: opts.signal,
      onStdout: (chunk) => chunks.push(chunk),
    },
  );
  const rgba = Buffer.concat(chunks);
  if (rgba.length !== width * height * 4) return null;
  const result = await opts.detect({ rgba, width, height }, { signal: opts.signal });
  if (!result.ok) return null;
  const a = result.animation;
  const sx = info.width / width;
  const sy = info.height / height;
  return {
    ...a,
    face_box: {
      x: a.face_box.x * sx,
      y: a.face_box.y * sy,
      width: a.face_box.width * sx,
      height: a.face_box.height * sy,
    },
  };
}

/** A deadline or output bound ffmpeg hit is the clip's fault: `InvalidClipError`. */
async function runFfmpegOrInvalid(args: string[], opts: Parameters<typeof runFfmpeg>[1]) {
  try {
    return await runFfmpeg(args, opts);
  } catch (error) {
    if (error instanceof ClipProcessError) throw new InvalidClipError(error.message);
    throw error;
  }
}
