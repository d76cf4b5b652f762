import { afterEach, describe, expect, it } from 'vitest';
import { TimecodeTestRenderer, decodeTestTimecode } from './helpers/timecode-renderer.ts';
import { startMediaWithPeer } from './helpers/media-peer.ts';
import { newPlayoutTurn } from '../actors/media/turn-playout.ts';

const SAMPLE_RATE = 16_000;
const FPS = 25;
const FRAME_MS = 1000 / FPS;
const VIDEO_DELAY_MS = 120;
/** One 10 ms audio chunk: the clock's scheduling grain. */
const CHUNK_MS = 10;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

function tone(ms: number, hz = 440): Int16Array {
  const pcm = new Int16Array(Math.round((ms * SAMPLE_RATE) / 1000));
  for (let i = 0; i < pcm.length; i++) pcm[i] = Math.round(9000 * Math.sin((2 * Math.PI * hz * i) / SAMPLE_RATE));
  return pcm;
}
const openMouth = (durationMs: number) => ({
  durationMs,
  poseAt: () => ({ open: 0.8, wide: 0.2, round: 0 }),
  levelAt: () => 0.7,
});

const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

describe('flush while video is held for the wire (SERVICE_VIDEO_DELAY_MS)', () => {
  it('no speech frame reaches a wrtc receiver after the flush: frames held for the delay are replaced by idle ones', async () => {
    const renderer = new TimecodeTestRenderer(128, 96, FPS);
    const { media, peer } = await startMediaWithPeer(
      { renderer, sampleRate: SAMPLE_RATE, videoDelayMs: VIDEO_DELAY_MS },
      cleanups,
    );
    await peer.until(() => peer.frames.length >= 5, 10_000, 'idle frames at the receiver');

    media.enqueue(newPlayoutTurn('turn-1'), tone(3_000), openMouth(3_000));
    const voiced = () => peer.frames.filter((f) => decodeTestTimecode(f.data, f.width).voiced).length;
    await peer.until(() => voiced() >= 8, 10_000, 'speech frames at the receiver');

    const flushedAtMediaMs = media.playout.mediaMs;
    const flushedAt = performance.now();
    media.flush();
    await sleep(800);

    const after = peer.frames
      .filter((f) => f.at > flushedAt)
      .map((f) => ({ ...decodeTestTimecode(f.data, f.width), at: f.at }));
    expect(after.length).toBeGreaterThan(10);
    // Frames whose wire time (pts + delay) was still ahead when the flush came were scheduled, not sent.
    const scheduledAtFlush = after.filter((f) => f.frameIdx * FRAME_MS >= flushedAtMediaMs - VIDEO_DELAY_MS + CHUNK_MS);
    const stale = scheduledAtFlush.filter((f) => f.voiced);
    expect(stale.map((f) => f.frameIdx)).toEqual([]);
    // …and replaced, not dropped: the held slots still went out, as idle frames.
    expect(scheduledAtFlush.some((f) => f.frameIdx * FRAME_MS < flushedAtMediaMs)).toBe(true);
  }, 30_000);
});
