/**
 * Listening and thinking cues as poses (`actors/attention.ts`): pure functions of the cues and the media time, carried on
 * every frame request by the media timeline, placed and released by the media clock, and moving each CPU renderer's
 * head (scaled by `motion`).
 */
import path from 'node:path';
import fs from 'node:fs/promises';
import { afterEach, describe, expect, it } from 'vitest';
import {
  AttentionTrack,
  LISTEN_BLEND_MS,
  LISTEN_BROW_RAISE,
  NOD_MS,
  THINK_BLEND_MS,
  THINK_DELAY_MS,
  THINK_RELEASE_MS,
  attentionMovesHead,
  type AttentionPose,
} from '../actors/attention.ts';
import { FrameTimeline } from '../actors/media/timeline.ts';
import { PlayoutClock, type AttentionCue } from '../actors/media/playout.ts';
import { newPlayoutTurn, TurnPlayout } from '../actors/media/turn-playout.ts';
import { SessionBus } from '../src/sessions/session-bus.ts';
import { followAttention } from '../src/sessions/attention.ts';
import { createRenderer } from '../actors/render/renderers/index.ts';
import { photoHeadPose } from '../actors/render/photo-head.ts';
import type { AvatarManifest, FrameRequest, I420Frame } from '../actors/render/types.ts';
import { TimecodeTestRenderer } from './helpers/timecode-renderer.ts';
import { REPO_AVATARS } from './helpers/app.ts';
import { request } from './render.fixtures.ts';

const SAMPLE_RATE = 16_000;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('attention cues on the media clock', () => {
  it('listening blends in and out; a nod dips and comes back within NOD_MS; the same cues give the same pose', () => {
    const track = new AttentionTrack();
    track.listen(1_000);
    track.nod(2_000);
    track.stopListening(4_000);
    expect(track.poseAt(999).listening).toBe(0);
    expect(track.poseAt(1_000 + LISTEN_BLEND_MS).listening).toBe(1);
    expect(track.poseAt(4_000 + LISTEN_BLEND_MS).listening).toBe(0);
    expect(track.poseAt(2_000).nod).toBe(0);
    expect(track.poseAt(2_000 + NOD_MS / 2).nod).toBeCloseTo(1, 5);
    expect(track.poseAt(2_000 + NOD_MS).nod).toBe(0);
    // A second pause inside a nod does not restart it (no stutter), one after it nods again.
    track.nod(2_000 + NOD_MS / 3);
    expect(track.cues().nods).toEqual([2_000]);
    const copy = new AttentionTrack();
    copy.listen(1_000);
    copy.nod(2_000);
    copy.stopListening(4_000);
    for (const ms of [1_100, 2_150, 2_300, 3_900, 4_100]) expect(copy.poseAt(ms)).toEqual(track.poseAt(ms));
  });

  it(`thinking shows only after ${THINK_DELAY_MS} ms without audio, turns the head aside or up with a tilt, and is released when speech starts`, () => {
    const track = new AttentionTrack();
    expect(track.think(1_000)).toBe(1_000 + THINK_DELAY_MS);
    expect(attentionMovesHead(track.poseAt(1_000 + THINK_DELAY_MS - 1))).toBe(false);
    const shown = track.poseAt(1_000 + THINK_DELAY_MS + THINK_BLEND_MS);
    expect(Math.hypot(shown.lookX, shown.lookY)).toBeGreaterThanOrEqual(1);
    expect(Math.abs(shown.tilt)).toBeGreaterThan(0.5);
    expect(shown.listening).toBe(0);
    track.stopThinking(2_500);
    expect(attentionMovesHead(track.poseAt(2_500 + THINK_RELEASE_MS))).toBe(false);

    // An answer within the delay: no thinking face at all.
    const quick = new AttentionTrack();
    quick.think(1_000);
    quick.stopThinking(1_300);
    for (let ms = 1_000; ms < 3_000; ms += 20) expect(attentionMovesHead(quick.poseAt(ms))).toBe(false);
    expect(quick.waiting).toBe(false);
  });

  it('the timeline puts the pose on every request and raises the brows while listening (as a brow-only emphasis)', () => {
    const timeline = new FrameTimeline(SAMPLE_RATE, 25);
    expect(timeline.requestFor(10).attention).toBeUndefined();
    timeline.attention.listen(0);
    const listening = timeline.requestFor(25);
    expect(listening.attention?.listening).toBe(1);
    expect(listening.expression).toEqual({ smile: 0, concern: 0, surprise: 0, emphasis: LISTEN_BROW_RAISE });
    expect(listening.mouth).toEqual({ open: 0, wide: 0, round: 0 });
  });

  const clocks: PlayoutClock[] = [];
  afterEach(() => {
    for (const clock of clocks.splice(0)) clock.close();
  });

  it('the clock releases thinking where the first audio starts; the frames before show it, the frames after not', async () => {
    const requests: FrameRequest[] = [];
    const timecode = new TimecodeTestRenderer(64, 48, 25);
    const renderer = {
      width: 64,
      height: 48,
      fps: 25,
      render: (batch: FrameRequest[], signal?: AbortSignal): Promise<I420Frame[]> => {
        requests.push(...batch);
        return timecode.render(batch, signal);
      },
    };
    const clock = new PlayoutClock(renderer, SAMPLE_RATE);
    clocks.push(clock);
    clock.start();
    clock.attend('think');
    // Wait on the media clock, not the wall: a loaded host only makes this take longer.
    while (clock.mediaMs < THINK_DELAY_MS + THINK_BLEND_MS + 200) await sleep(10);
    const audioStartMs = clock.mediaMs;
    const pcm = new Int16Array(SAMPLE_RATE / 2).fill(3000);
    clock.enqueue(newPlayoutTurn('turn-1'), pcm, {
      durationMs: 500,
      poseAt: () => ({ open: 0.4, wide: 0, round: 0 }),
      levelAt: () => 0.5,
    });
    while (clock.mediaMs < audioStartMs + THINK_RELEASE_MS + 200) await sleep(10);
    const latest = new Map<number, FrameRequest>();
    for (const r of requests) latest.set(r.frameIdx, r);
    const frames = [...latest.values()];
    const before = frames.filter((r) => r.ptsMs >= THINK_DELAY_MS + THINK_BLEND_MS && r.ptsMs < audioStartMs - 40);
    const after = frames.filter((r) => r.ptsMs >= audioStartMs + THINK_RELEASE_MS);
    expect(before.length).toBeGreaterThan(0);
    expect(after.length).toBeGreaterThan(0);
    for (const r of before) expect(attentionMovesHead(r.attention)).toBe(true);
    for (const r of after) expect(attentionMovesHead(r.attention)).toBe(false);
    for (const r of frames.filter((r) => r.ptsMs < THINK_DELAY_MS)) expect(attentionMovesHead(r.attention)).toBe(false);
  });
});

describe('who places the cues: the session bus (src/sessions/attention.ts)', () => {
  it('speech start and end listen, a pause nods, the end of a voice turn and a chat request think, a turn that ends releases', () => {
    const bus = new SessionBus();
    const cues: AttentionCue[] = [];
    followAttention(bus, { attend: (cue) => cues.push(cue) });
    bus.emit('voice.speech', { source: 'listen', stage: 'start', atMs: 100 });
    bus.emit('voice.pause', { source: 'listen', atMs: 900, pauseMs: 300 });
    bus.emit('voice.speech', { source: 'listen', stage: 'end', atMs: 2_000 });
    bus.emit('voice.turn', { turnId: 'v1', source: 'listen', speechMs: 1_900 });
    bus.emit('turn.finished', { turnId: 'v1', kind: 'voice', outcome: 'completed' });
    bus.emit('turn.started', { turnId: 's1', kind: 'speak', playout: new TurnPlayout() });
    bus.emit('turn.started', { turnId: 'c1', kind: 'chat', playout: new TurnPlayout() });
    bus.emit('voice.speech', { source: 'webrtc', stage: 'start', atMs: 5_000 });
    bus.emit('voice.echoIgnored', { source: 'webrtc' });
    expect(cues).toEqual([
      'listen',
      'nod',
      'stop-listening',
      'think',
      'stop-thinking',
      'think',
      'listen',
      'stop-listening',
    ]);
  });
});

describe('attention moves every CPU renderer’s head, scaled by motion', () => {
  const nodding: AttentionPose = { listening: 1, nod: 1, lookX: 0, lookY: 0, tilt: 0 };
  const glancing: AttentionPose = { listening: 0, nod: 0, lookX: 1, lookY: -0.35, tilt: 1 };

  it('photo: a nod moves the head down, a glance aside and up; motion 0 leaves the head where the photo has it', () => {
    const still = photoHeadPose(request(0), 25, 100);
    const nod = photoHeadPose(request(0, { attention: nodding }), 25, 100);
    expect(nod.dy - still.dy).toBeGreaterThanOrEqual(3);
    const glance = photoHeadPose(request(0, { attention: glancing }), 25, 100);
    expect(glance.dx - still.dx).toBeGreaterThanOrEqual(2);
    expect(glance.dy).toBeLessThan(still.dy);
    expect(glance.tilt).toBeGreaterThan(0);
    for (let frameIdx = 0; frameIdx < 250; frameIdx += 7) {
      const pose = photoHeadPose(
        request(frameIdx, { motion: 0, attention: nodding, prosody: { fast: 0.8, slow: 0.5 } }),
        25,
        100,
      );
      expect(Math.abs(pose.dx) + Math.abs(pose.dy) + Math.abs(pose.tilt)).toBe(0);
    }
  });

  it.each(['rt', 'rt_head'] as const)(
    '%s: a nod and a glance move the head layer; at motion 0 the frame is unmoved',
    async (model) => {
      const dir = path.join(REPO_AVATARS, 'demo-rt');
      const manifest: AvatarManifest = {
        ...JSON.parse(await fs.readFile(path.join(dir, 'manifest.json'), 'utf8')),
        model_type: model,
      };
      const renderer = createRenderer(model);
      await renderer.prepare({ id: 'demo-rt', dir, manifest });
      const differing = (a: I420Frame, b: I420Frame) => {
        let count = 0;
        for (let i = 0; i < a.width * a.height; i++) if (Math.abs(a.data[i] - b.data[i]) > 8) count++;
        return count;
      };
      // Frame 0: eyes open, no idle sway yet (every oscillation starts at 0).
      const plain = renderer.render(request(0, { motion: 0 }));
      const nod = renderer.render(request(0, { attention: { ...nodding, listening: 0 } }));
      const glance = renderer.render(request(0, { attention: glancing }));
      expect(differing(plain, nod)).toBeGreaterThan(500);
      expect(differing(plain, glance)).toBeGreaterThan(500);
      const still = renderer.render(request(0, { motion: 0, attention: { ...glancing } }));
      expect(differing(plain, still)).toBe(0);
    },
  );
});
