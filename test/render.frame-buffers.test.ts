import fs from 'node:fs/promises';
import path from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import {
  FrameBufferPool,
  MAX_FRAME_BUFFERS,
  isPooledFrame,
  releaseFrame,
  retainFrame,
} from '../actors/render/frame-buffers.ts';
import { PlayoutClock, type FrameRenderer } from '../actors/media/playout.ts';
import { newPlayoutTurn } from '../actors/media/turn-playout.ts';
import { RenderPool } from '../actors/render/pool.ts';
import { decodeTimecode } from '../actors/render/timecode.ts';
import type { AvatarManifest, AvatarSource, FrameRequest, I420Frame } from '../actors/render/types.ts';
import { request } from './render.fixtures.ts';
import { startMediaWithPeer } from './helpers/media-peer.ts';

const SAMPLE_RATE = 16_000;

async function avatar(id: string): Promise<AvatarSource> {
  const dir = path.join(import.meta.dirname, '..', 'avatars', id);
  const manifest: AvatarManifest = JSON.parse(await fs.readFile(path.join(dir, 'manifest.json'), 'utf8'));
  return { id, dir, manifest };
}

function tone(ms: number, hz = 300): Int16Array {
  const pcm = new Int16Array(Math.round((ms * SAMPLE_RATE) / 1000));
  for (let i = 0; i < pcm.length; i++) pcm[i] = Math.round(9000 * Math.sin((2 * Math.PI * hz * i) / SAMPLE_RATE));
  return pcm;
}
const talking = (durationMs: number) => ({
  durationMs,
  poseAt: () => ({ open: 0.7, wide: 0.2, round: 0 }),
  levelAt: () => 0.6,
});

function plainFrame(bytes: number): I420Frame {
  return { width: 4, height: 4, data: new Uint8Array(bytes) };
}

describe('frame buffer pool: a buffer goes back only when its last reader lets go', () => {
  it('reuses a buffer after the one reference is released, not before', () => {
    const pool = new FrameBufferPool();
    const first = pool.take(24);
    const frame = pool.lease(plainFrame(24), first);
    expect(pool.take(24)).not.toBe(first);
    releaseFrame(frame);
    expect(pool.outstanding).toBe(1);
    expect(pool.take(24)).toBe(first);
    expect([pool.allocated, pool.reused, pool.outstanding]).toEqual([2, 1, 2]);
  });

  it('with two readers, the buffer returns after both release, and a late retain is refused', () => {
    const pool = new FrameBufferPool();
    const buffer = pool.take(24);
    const frame = pool.lease(plainFrame(24), buffer);
    retainFrame(frame);
    releaseFrame(frame);
    expect(pool.freeCount).toBe(0);
    releaseFrame(frame);
    expect(pool.freeCount).toBe(1);
    // A second release by a holder that already let go changes nothing, and is counted as the bug it is.
    releaseFrame(frame);
    expect([pool.freeCount, pool.overReleases]).toEqual([1, 1]);
    expect(() => retainFrame(frame)).toThrow(/already released/);
  });

  it('keeps every buffer it made for the next frame; plain frames are not pooled', () => {
    const pool = new FrameBufferPool();
    const frames = Array.from({ length: 5 }, () => pool.lease(plainFrame(8), pool.take(8)));
    for (const frame of frames) releaseFrame(frame);
    expect([pool.freeCount, pool.outstanding]).toEqual([5, 0]);
    for (let i = 0; i < 5; i++) pool.take(8);
    expect([pool.allocated, pool.reused, pool.freeCount]).toEqual([5, 5, 0]);
    const plain = plainFrame(8);
    expect(isPooledFrame(plain)).toBe(false);
    retainFrame(plain);
    releaseFrame(plain);
  });

  it('makes at most its bound of buffers, lent and free together; an abandoned one makes room again', () => {
    const pool = new FrameBufferPool(2);
    pool.take(8);
    expect(pool.canLend()).toBe(true);
    const second = pool.take(8);
    expect(pool.canLend()).toBe(false);
    expect(pool.canLend()).toBe(false);
    pool.abandon(second);
    expect([pool.outstanding, pool.canLend()]).toEqual([1, true]);
    expect(MAX_FRAME_BUFFERS).toBeGreaterThanOrEqual(128);
  });

  it('at its bound, drops a free buffer of another size for a new one (an avatar of another size took over)', () => {
    const pool = new FrameBufferPool(2);
    pool.give(pool.take(8));
    pool.give(pool.take(8));
    const [a, b] = [pool.take(8), pool.take(8)];
    pool.give(a);
    pool.give(b);
    expect([pool.freeCount, pool.canLend()]).toEqual([2, true]);
    pool.take(16);
    expect([pool.freeCount, pool.outstanding, pool.canLend()]).toEqual([1, 1, true]);
    pool.take(16);
    expect([pool.freeCount, pool.outstanding, pool.canLend()]).toEqual([0, 2, false]);
  });
});

describe('render pool: speech frames are rendered into reused buffers', () => {
  const pool = new RenderPool({ threads: 2 });
  afterAll(() => pool.close());

  it('frames of no shared look come back leased, in shared memory, identical to fresh ones', async () => {
    const handle = await pool.open(await avatar('demo-rt'), 'mock', undefined, { reuseFrameBuffers: true });
    const frames = await handle.render(Array.from({ length: 8 }, (_, i) => request(500 + i, { speaking: true })));
    expect(frames.every(isPooledFrame)).toBe(true);
    expect(frames.every((frame) => frame.data.buffer instanceof SharedArrayBuffer)).toBe(true);
    expect(frames.map((frame) => decodeTimecode(frame)?.frameIdx)).toEqual([500, 501, 502, 503, 504, 505, 506, 507]);
    for (const frame of frames) releaseFrame(frame);
    const allocated = pool.frameBuffers.allocated;
    const again = await handle.render(Array.from({ length: 8 }, (_, i) => request(600 + i, { speaking: true })));
    // The eight released buffers carried the next eight frames, each with its own pixels.
    expect(pool.frameBuffers.allocated).toBe(allocated);
    expect(again.map((frame) => decodeTimecode(frame)?.frameIdx)).toEqual([600, 601, 602, 603, 604, 605, 606, 607]);
  });

  it('shared idle frames (rt looks) are never leased: the cache keeps them', async () => {
    const handle = await pool.open(await avatar('demo-rt'), 'rt', undefined, { reuseFrameBuffers: true });
    const [idle] = await handle.render([request(3)]);
    expect(isPooledFrame(idle)).toBe(false);
    const [speech] = await handle.render([request(4, { speaking: true, mouth: { open: 0.6, wide: 0, round: 0 } })]);
    expect(isPooledFrame(speech)).toBe(true);
    releaseFrame(speech);
  });

  it('without the option (offline jobs, fallbacks) frames are plain: nobody has to release them', async () => {
    const handle = await pool.open(await avatar('demo-rt'), 'mock');
    const frames = await handle.render([request(7, { speaking: true }), request(8, { speaking: true })]);
    expect(frames.some(isPooledFrame)).toBe(false);
    expect(frames.every((frame) => frame.data.buffer instanceof ArrayBuffer)).toBe(true);
  });
});

describe('a live session reuses its frame buffers and the viewer still sees every frame as rendered', () => {
  const pool = new RenderPool({ threads: 1 });
  const cleanups: Array<() => unknown> = [];
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  });
  afterAll(() => pool.close());

  it('3 s of speech through a wrtc peer: timecodes arrive in order and a handful of buffers carry all frames', async () => {
    const renderer = await pool.open(await avatar('demo-rt'), 'mock', undefined, { reuseFrameBuffers: true });
    const { media, peer } = await startMediaWithPeer(
      { renderer, sampleRate: SAMPLE_RATE, videoDelayMs: 120 },
      cleanups,
    );
    await peer.until(() => peer.frames.length >= 5, 10_000, 'first frames at the receiver');

    const before = { allocated: pool.frameBuffers.allocated, reused: pool.frameBuffers.reused };
    const firstReceived = peer.frames.length;
    media.enqueue(newPlayoutTurn('turn-1'), tone(3_000), talking(3_000));
    await new Promise((resolve) => setTimeout(resolve, 3_300));

    const rendered = pool.frameBuffers.allocated - before.allocated + pool.frameBuffers.reused - before.reused;
    expect(rendered).toBeGreaterThan(60);
    // Two rendered ahead, ~3 held for the video delay, the filter's last one: a handful, not one per frame.
    expect(pool.frameBuffers.allocated - before.allocated).toBeLessThanOrEqual(12);
    const indices = peer.frames
      .slice(firstReceived)
      .map((frame) => decodeTimecode(frame)?.frameIdx)
      .filter((idx): idx is number => idx !== undefined);
    expect(indices.length).toBeGreaterThan(50);
    // A buffer reused too early would show a later frame's timecode before an earlier one, or repeat one.
    for (let i = 1; i < indices.length; i++) expect(indices[i]).toBeGreaterThan(indices[i - 1]);

    // Closing mid-speech gives every buffer back: rendered ahead, held for the wire, the filter's last frame.
    media.enqueue(newPlayoutTurn('turn-2'), tone(2_000), talking(2_000));
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(pool.frameBuffers.outstanding).toBeGreaterThan(0);
    media.playout.close();
    media.output.close();
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(pool.frameBuffers.outstanding).toBe(0);
  }, 30_000);
});

/** Leases every frame from its own pool and stamps the frame index into the first byte. */
class LeasingRenderer implements FrameRenderer {
  readonly width = 16;
  readonly height = 16;
  readonly fps = 25;
  readonly buffers = new FrameBufferPool();

  async render(requests: FrameRequest[]): Promise<I420Frame[]> {
    return requests.map((request) => {
      const buffer = this.buffers.take(384);
      const data = new Uint8Array(buffer);
      data[0] = request.frameIdx % 256;
      return this.buffers.lease({ width: this.width, height: this.height, data }, buffer);
    });
  }
}

describe('the media clock and leased frames', () => {
  it('a throwing video tap is reported, video goes on, every frame shows its own pixels and every buffer comes back', async () => {
    const renderer = new LeasingRenderer();
    const clock = new PlayoutClock(renderer, SAMPLE_RATE, { videoDelayMs: 80 });
    const failures: unknown[] = [];
    clock.on('tapFailed', (error) => failures.push(error));
    let taps = 0;
    clock.on('video', () => {
      if (++taps === 3) throw new Error('a broken tap');
    });
    const wire: Array<{ idx: number; stamp: number }> = [];
    clock.on('videoOut', (frame, idx) => wire.push({ idx, stamp: frame.data[0] }));
    clock.start();
    await new Promise((resolve) => setTimeout(resolve, 600));
    expect(failures).toHaveLength(1);
    expect(wire.length).toBeGreaterThan(8);
    for (const { idx, stamp } of wire) expect(stamp).toBe(idx % 256);
    expect(renderer.buffers.reused).toBeGreaterThan(0);
    clock.close();
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect([renderer.buffers.outstanding, renderer.buffers.overReleases]).toEqual([0, 0]);
  });
});
