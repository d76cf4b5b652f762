/**
 * What the neural lip-sync session tests look at on a wrtc peer: the mean luma of the avatar's mouth region (inside
 * the model's pasted lower face) and of its eye region (above it, never pasted), per received frame, next to the
 * audio the peer heard at the same time.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { faceCropOf } from '../../actors/lipsync/face-crop.ts';
import type { PlayoutClock } from '../../actors/media/playout.ts';
import type { AvatarSource } from '../../actors/render/types.ts';
import type { ReceivedAudio, ReceivedFrame } from './peer.ts';
import { recordSentAudioChunks } from './sent-audio.ts';

export interface Region {
  x0: number;
  y0: number;
  x1: number;
  y1: number;
}

export function astronautSource(avatarsDir: string): AvatarSource {
  const dir = path.join(avatarsDir, 'astronaut');
  return { id: 'astronaut', dir, manifest: JSON.parse(readFileSync(path.join(dir, 'manifest.json'), 'utf8')) };
}

/** The mouth (lower middle of the face crop, where the tiny model's lift is fully blended) and the eyes (upper third). */
export function faceRegions(avatar: AvatarSource): { mouth: Region; eyes: Region } {
  const crop = faceCropOf(avatar);
  const at = (fx0: number, fy0: number, fx1: number, fy1: number): Region => ({
    x0: Math.round(crop.x + crop.side * fx0),
    y0: Math.round(crop.y + crop.side * fy0),
    x1: Math.round(crop.x + crop.side * fx1),
    y1: Math.round(crop.y + crop.side * fy1),
  });
  return { mouth: at(0.3, 0.66, 0.7, 0.84), eyes: at(0.2, 0.2, 0.8, 0.42) };
}

export function regionLuma(frame: ReceivedFrame, region: Region): number {
  let sum = 0;
  for (let y = region.y0; y < region.y1; y++)
    for (let x = region.x0; x < region.x1; x++) sum += frame.data[y * frame.width + x];
  return sum / ((region.x1 - region.x0) * (region.y1 - region.y0));
}

/** The receiver's audio RMS around a moment (mean over ±`halfMs`). */
export function rmsAround(audio: readonly ReceivedAudio[], at: number, halfMs: number): number {
  let sum = 0;
  let n = 0;
  for (const chunk of audio) {
    if (chunk.at < at - halfMs || chunk.at > at + halfMs) continue;
    sum += chunk.rms;
    n++;
  }
  return n === 0 ? 0 : sum / n;
}

/** A frame as the service sent it: its presentation time on the media clock, when it left, and its region's luma. */
export interface SentFrame {
  mediaMs: number;
  at: number;
  mouth: number;
}

export interface SentMedia {
  /** Every frame sent since the recording began, in order. */
  readonly frames: readonly SentFrame[];
  /** Every 10 ms audio chunk sent, in the receiver's shape with `at` = its presentation time, so `rmsAround` reads both. */
  readonly audio: readonly ReceivedAudio[];
  /** The last presentation time of audible audio (RMS above `audibleRms`), or -Infinity. */
  lastAudibleMs(audibleRms: number): number;
  /**
   * How the sent frames' mouth follows the sent audio: Pearson r between each frame's mouth luma and the log RMS of
   * the audio within ±120 ms of its presentation time + 80 ms (the mel window looks 200 ms ahead of its frame).
   */
  mouthAudioR(frames?: readonly SentFrame[]): number;
  stop(): void;
}

/**
 * The media as the service sends it, on its own timeline (the playout's 'video' and 'audio' emissions at their
 * presentation times), from now until `stop()`. Whether the mouth follows the voice, and which renderer made a
 * frame, are read here: every frame leaves with the audio chunk holding its pts (docs/performance.md), whatever a
 * receiver on a starved host decodes. At a receiver on a host at half speed the decoder's lag moved frames against
 * the audio (r read 0.12–0.30 there).
 */
export function recordSentMedia(playout: PlayoutClock, mouth: Region): SentMedia {
  const frames: SentFrame[] = [];
  const sentAudio = recordSentAudioChunks(playout);
  const audio = sentAudio.chunks;
  const onVideo = (frame: { width: number; height: number; data: Uint8Array }, _idx: number, mediaMs: number) =>
    frames.push({ mediaMs, at: performance.now(), mouth: regionLuma({ at: 0, ...frame }, mouth) });
  playout.on('video', onVideo);
  return {
    frames,
    audio,
    lastAudibleMs: (audibleRms) =>
      audio.reduce((last, chunk) => (chunk.rms > audibleRms ? Math.max(last, chunk.at) : last), -Infinity),
    mouthAudioR: (of = frames) =>
      pearson(
        of.map((frame) => frame.mouth),
        of.map((frame) => Math.log10(1 + rmsAround(audio, frame.mediaMs + 80, 120))),
      ),
    stop: () => {
      playout.off('video', onVideo);
      sentAudio.stop();
    },
  };
}

export function pearson(xs: readonly number[], ys: readonly number[]): number {
  const n = xs.length;
  const mx = xs.reduce((a, b) => a + b, 0) / n;
  const my = ys.reduce((a, b) => a + b, 0) / n;
  let sxy = 0;
  let sxx = 0;
  let syy = 0;
  for (let i = 0; i < n; i++) {
    sxy += (xs[i] - mx) * (ys[i] - my);
    sxx += (xs[i] - mx) ** 2;
    syy += (ys[i] - my) ** 2;
  }
  return sxx === 0 || syy === 0 ? 0 : sxy / Math.sqrt(sxx * syy);
}

/** Polls `ready` every 20 ms; rejects naming `what` once `timeoutMs` passed. For state kept in this process. */
export async function waitUntil(ready: () => boolean, timeoutMs: number, what: string): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!ready()) {
    if (performance.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}
