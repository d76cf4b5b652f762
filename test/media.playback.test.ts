import { afterEach, describe, expect, it } from 'vitest';
import { PlayoutClock } from '../actors/media/playout.ts';
import { newPlayoutTurn } from '../actors/media/turn-playout.ts';
import { TimecodeTestRenderer } from './helpers/timecode-renderer.ts';

const SAMPLE_RATE = 16_000;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const pcm = (ms: number) => new Int16Array(Math.round((ms * SAMPLE_RATE) / 1000)).fill(4000);
const mouth = (durationMs: number) => ({
  durationMs,
  poseAt: () => ({ open: 0.5, wide: 0, round: 0 }),
  levelAt: () => 0.6,
});

const clocks: PlayoutClock[] = [];
afterEach(() => {
  for (const clock of clocks.splice(0)) clock.close();
});

describe('what of a turn was played (the chat history after an interrupt)', () => {
  it('enqueue tells where each segment starts in its turn; playedMsOf says how much left for WebRTC, frozen by a flush', async () => {
    const clock = new PlayoutClock(new TimecodeTestRenderer(64, 48, 25), SAMPLE_RATE);
    clocks.push(clock);
    let turnStartMs = -1;
    clock.on('turnStarted', () => (turnStartMs = clock.mediaMs));
    const startedAt = performance.now();
    clock.start();
    const turn = newPlayoutTurn('turn-1');
    // Sentence 0 in two chunks, then sentences 1 and 2, as the tts actor queues them.
    expect(clock.enqueue(turn, pcm(200), mouth(200), 0)).toBe(0);
    expect(clock.enqueue(turn, pcm(100), mouth(100), 0)).toBe(200);
    expect(clock.enqueue(turn, pcm(400), mouth(400), 1)).toBe(300);
    expect(clock.enqueue(turn, pcm(500), mouth(500), 2)).toBe(700);
    // Speech after silence leaves at once: its first 10 ms chunk went out inside the first enqueue, with any chunk
    // already due (on a host at half speed the timer fired late and 20 ms left), and never ahead of the clock.
    const playedAtOnce = clock.playedMsOf(turn);
    expect(playedAtOnce).toBeGreaterThanOrEqual(10);
    expect(playedAtOnce).toBeLessThanOrEqual(performance.now() - startedAt + 10);

    while (clock.playedMsOf(turn) < 450) await sleep(5);
    clock.flush();
    const played = clock.playedMsOf(turn);
    // Everything played went out in 10 ms chunks since the turn's first sample.
    expect(Math.abs(played - (clock.mediaMs - turnStartMs))).toBeLessThanOrEqual(10);
    await sleep(100);
    expect(clock.playedMsOf(turn)).toBe(played);

    const playback = clock.playbackOf(turn)!;
    expect(playback).toEqual({
      enqueuedMs: 1200,
      playedMs: played,
      segments: [
        { segment: 0, startMs: 0, endMs: 300 },
        { segment: 1, startMs: 300, endMs: 700 },
        { segment: 2, startMs: 700, endMs: 1200 },
      ],
    });
    // What the listener heard: sentences 0 and the start of 1, not 2.
    expect(playback.segments.filter((s) => s.startMs < playback.playedMs).map((s) => s.segment)).toEqual([0, 1]);
    // Audio for a flushed turn is not queued again.
    clock.enqueue(turn, pcm(100), mouth(100), 3);
    expect(clock.queuedMs).toBe(0);
  });

  it('a finished turn keeps its playback on its own handle, however many turns follow (the clock keeps none)', async () => {
    const clock = new PlayoutClock(new TimecodeTestRenderer(64, 48, 25), SAMPLE_RATE);
    clocks.push(clock);
    clock.start();
    const turns = Array.from({ length: 9 }, (_, i) => newPlayoutTurn(`t-${i}`));
    for (const turn of turns) {
      clock.enqueue(turn, pcm(20), mouth(20));
      clock.endTurn(turn);
      await clock.whenDrained(turn);
    }
    expect(clock.playbackOf(turns[0])).toEqual({
      enqueuedMs: 20,
      playedMs: 20,
      segments: [{ segment: 0, startMs: 0, endMs: 20 }],
    });
    expect(clock.playedMsOf(turns[8])).toBe(20);
    // A flush after they settled leaves what they played alone.
    clock.flush();
    expect(clock.playedMsOf(turns[1])).toBe(20);
  });
});
