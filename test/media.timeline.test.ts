import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PlayoutClock, type FrameRenderer } from '../actors/media/playout.ts';
import { MOUTH_LOOKAHEAD_MS, framesCovering } from '../actors/media/timeline.ts';
import { newPlayoutTurn } from '../actors/media/turn-playout.ts';
import { buildMouthTimeline, type MouthTimeline } from '../actors/mouth/timeline.ts';
import { RenderPool, type RenderHandle } from '../actors/render/pool.ts';
import type { AvatarManifest, AvatarSource, FrameRequest, I420Frame } from '../actors/render/types.ts';
import { closeBuiltinEngines, createBuiltinProvider } from '../actors/tts/providers/builtin.ts';
import { renderOfflineMp4 } from '../src/recording/offline-render.ts';

const SAMPLE_RATE = 16_000;
/** The audio WebSocket's recommended frame (spec 6.2). */
const WS_CHUNK_MS = 20;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

interface Piece {
  pcm: Int16Array;
  mouth: MouthTimeline;
}

/** Passes renders through to the real pool and remembers, per frame, how often it was rendered and from what. */
class CapturingRenderer implements FrameRenderer {
  readonly renders = new Map<number, number>();
  readonly lastRequest = new Map<number, FrameRequest>();
  readonly frames = new Map<number, Uint8Array>();
  constructor(private readonly inner: RenderHandle) {}
  get width() {
    return this.inner.width;
  }
  get height() {
    return this.inner.height;
  }
  get fps() {
    return this.inner.fps;
  }
  async render(requests: FrameRequest[], signal?: AbortSignal): Promise<I420Frame[]> {
    for (const request of requests) {
      this.renders.set(request.frameIdx, (this.renders.get(request.frameIdx) ?? 0) + 1);
      this.lastRequest.set(request.frameIdx, request);
    }
    const frames = await this.inner.render(requests, signal);
    frames.forEach((frame, i) => this.frames.set(requests[i].frameIdx, frame.data.slice()));
    return frames;
  }
}

async function avatar(id: string): Promise<AvatarSource> {
  const dir = path.join(import.meta.dirname, '..', 'avatars', id);
  const manifest: AvatarManifest = JSON.parse(await fs.readFile(path.join(dir, 'manifest.json'), 'utf8'));
  return { id, dir, manifest };
}

/**
 * Plays pieces on a live clock the way a producer does while the session speaks: the first before the clock
 * starts, the rest whenever less than `leadMs` is queued (checked as each 10 ms chunk leaves, like a WebSocket
 * client held back by the playout high-water mark, but with a small lead so render-ahead keeps outrunning the
 * audio). Resolves with the frames that left, by index, for the span the pieces cover.
 */
async function playLive(renderer: FrameRenderer, pieces: Piece[], leadMs: number): Promise<Map<number, Uint8Array>> {
  const total = pieces.reduce((sum, p) => sum + p.pcm.length, 0);
  const frameCount = framesCovering(total, SAMPLE_RATE, renderer.fps);
  const clock = new PlayoutClock(renderer, SAMPLE_RATE);
  const sent = new Map<number, Uint8Array>();
  clock.on('video', (frame, idx) => {
    if (idx < frameCount) sent.set(idx, frame.data.slice());
  });
  let next = 0;
  const turn = newPlayoutTurn('turn-1');
  const topUp = () => {
    while (next < pieces.length && clock.queuedMs < leadMs) {
      clock.enqueue(turn, pieces[next].pcm, pieces[next].mouth);
      next++;
    }
  };
  topUp();
  clock.on('audio', topUp);
  clock.start();
  const deadline = performance.now() + (total / SAMPLE_RATE) * 1000 + 10_000;
  while (sent.size < frameCount && performance.now() < deadline) await sleep(20);
  clock.close();
  return sent;
}

async function renderOffline(renderer: CapturingRenderer, pieces: Piece[], dir: string): Promise<void> {
  await renderOfflineMp4({
    renderer,
    sampleRate: SAMPLE_RATE,
    pieces,
    outPath: path.join(dir, 'offline.mp4'),
    signal: AbortSignal.timeout(60_000),
  });
}

/** Speech-like test audio: a voiced 180 Hz buzz in syllables (4 per second) with phrase-level loudness changes. */
function syllables(ms: number): Int16Array {
  const pcm = new Int16Array(Math.round((ms * SAMPLE_RATE) / 1000));
  for (let i = 0; i < pcm.length; i++) {
    const t = i / SAMPLE_RATE;
    const syllable = Math.max(0, Math.sin(2 * Math.PI * 4 * t)) ** 2;
    const phrase = 0.35 + 0.65 * Math.max(0, Math.sin(2 * Math.PI * 0.6 * t));
    const voice =
      Math.sin(2 * Math.PI * 180 * t) + 0.5 * Math.sin(2 * Math.PI * 360 * t) + 0.25 * Math.sin(2 * Math.PI * 540 * t);
    pcm[i] = Math.round(9000 * syllable * phrase * voice);
  }
  return pcm;
}

function equalBytes(a: Uint8Array | undefined, b: Uint8Array | undefined): boolean {
  return !!a && !!b && Buffer.compare(Buffer.from(a), Buffer.from(b)) === 0;
}

describe('one frame timeline for live playout and offline rendering', () => {
  const pool = new RenderPool({ threads: 1 });
  let source: AvatarSource;
  let dir: string;
  beforeAll(async () => {
    source = await avatar('demo-rt-head');
    dir = await fs.mkdtemp(path.join(os.tmpdir(), 'media-timeline-'));
  });
  afterAll(async () => {
    await pool.close();
    await closeBuiltinEngines();
    if (dir) await fs.rm(dir, { recursive: true, force: true });
  });

  it('rt_head: 20 ms chunks streaming in make render-ahead re-render frames, and head motion carries on through them (live frames = offline frames)', async () => {
    const audio = syllables(2_000);
    const chunk = (SAMPLE_RATE * WS_CHUNK_MS) / 1000;
    const pieces: Piece[] = [];
    for (let at = 0; at < audio.length; at += chunk) {
      const pcm = audio.subarray(at, at + chunk);
      pieces.push({ pcm, mouth: buildMouthTimeline({ pcm, sampleRate: SAMPLE_RATE }) });
    }
    const live = new CapturingRenderer(await pool.open(source, 'rt_head'));
    // The producer keeps two WebSocket chunks queued beyond what a frame's mouth looks into (`MOUTH_LOOKAHEAD_MS`):
    // render-ahead (2 frames, 80 ms) still outruns the audio, and each frame's audio has arrived before it leaves.
    const sent = await playLive(live, pieces, 2 * WS_CHUNK_MS + MOUTH_LOOKAHEAD_MS);
    const offline = new CapturingRenderer(await pool.open(source, 'rt_head'));
    await renderOffline(offline, pieces, dir);

    const frameCount = offline.frames.size;
    expect(frameCount).toBe(50);
    expect(sent.size).toBe(frameCount);
    // The scenario: frames rendered ahead of the audio were rendered again once their audio arrived.
    const reRendered = [...live.renders.entries()].filter(([idx, n]) => idx < frameCount && n > 1).length;
    expect(reRendered).toBeGreaterThanOrEqual(10);
    // Speech moves the head (the test would prove nothing on a still head)…
    const distinct = new Set([...offline.frames.values()].map((f) => Buffer.from(f).toString('base64'))).size;
    expect(distinct).toBeGreaterThan(frameCount / 2);
    // …and every frame a viewer got is the frame offline rendering makes of the same audio: no reset, no damping.
    const differing = Array.from({ length: frameCount }, (_, idx) => idx).filter(
      (idx) => !equalBytes(sent.get(idx), offline.frames.get(idx)),
    );
    expect(differing).toEqual([]);
    for (let idx = 0; idx < frameCount; idx++)
      expect(live.lastRequest.get(idx)?.prosody).toEqual(offline.lastRequest.get(idx)?.prosody);
  }, 60_000);

  it('synthesised speech: the same pts, mouth pose, level and prosody per frame live and offline, and the same rt_head frames', async () => {
    const tts = createBuiltinProvider({ warmUp: false });
    const pieces: Piece[] = [];
    for await (const chunk of tts.synthesize({
      // Two sentences: two pieces, the second queued while the first plays.
      text: 'The clock keeps time. Offline follows it.',
      voice: null,
      model: null,
      sampleRate: SAMPLE_RATE,
      signal: AbortSignal.timeout(30_000),
    })) {
      pieces.push({ pcm: chunk.pcm, mouth: buildMouthTimeline(chunk) });
    }
    expect(pieces.length).toBeGreaterThanOrEqual(2);
    expect(pieces.some((p) => p.mouth.durationMs > 0)).toBe(true);

    // As the tts actor does: the next sentence is queued while the previous one still plays.
    const live = new CapturingRenderer(await pool.open(source, 'rt_head'));
    const sent = await playLive(live, pieces, 300);
    const offline = new CapturingRenderer(await pool.open(source, 'rt_head'));
    await renderOffline(offline, pieces, dir);

    const frameCount = offline.frames.size;
    expect(sent.size).toBe(frameCount);
    const timeline = (requests: Map<number, FrameRequest>) =>
      Array.from({ length: frameCount }, (_, idx) => {
        const r = requests.get(idx)!;
        return {
          frameIdx: r.frameIdx,
          ptsMs: r.ptsMs,
          mouth: r.mouth,
          level: r.level,
          speaking: r.speaking,
          prosody: r.prosody,
        };
      });
    expect(timeline(live.lastRequest)).toEqual(timeline(offline.lastRequest));
    expect(timeline(offline.lastRequest).filter((r) => r.speaking && r.mouth.open > 0.2).length).toBeGreaterThan(
      frameCount / 4,
    );
    const differing = Array.from({ length: frameCount }, (_, idx) => idx).filter(
      (idx) => !equalBytes(sent.get(idx), offline.frames.get(idx)),
    );
    expect(differing).toEqual([]);
  }, 90_000);
});
