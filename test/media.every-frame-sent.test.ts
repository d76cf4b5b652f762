import { afterEach, describe, expect, it } from 'vitest';
import { DEFAULT_VIDEO_DELAY_MS, PlayoutClock, type FrameRenderer } from '../actors/media/playout.ts';
import { MOUTH_LOOKAHEAD_MS } from '../actors/media/timeline.ts';
import { STEADY_START_MS } from '../actors/media/frame-send-policy.ts';
import type { FrameRequest, I420Frame } from '../actors/render/types.ts';
import { loadConfig } from '../src/config.ts';
import { newTurnHandle } from '../src/sessions/turn.ts';
import { startMediaWithPeer } from './helpers/media-peer.ts';

const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** The clock's scheduling grain: one 10 ms audio chunk. */
const CHUNK_MS = 10;

/** Renders one picture, the same frame object every time (as the render pool answers an idle avatar's repeats). */
class StillRenderer implements FrameRenderer {
  readonly fps = 25;
  private readonly picture: I420Frame;
  constructor(
    readonly width: number,
    readonly height: number,
  ) {
    this.picture = { width, height, data: new Uint8Array((width * height * 3) / 2).fill(128) };
  }
  async render(requests: FrameRequest[]): Promise<I420Frame[]> {
    return requests.map(() => this.picture);
  }
  close(): void {}
}

describe('which frames a wrtc viewer gets: every frame in its first seconds and while a turn runs, repeats too', () => {
  // Chromium showed a stream that skipped repeats (a photo's held mouth) on arrival, outside its A/V sync, and synced
  // a clip's full 25 fps: the photo's mouth then reached the page ~100 ms before a clip's; and a stream that began at
  // the idle floor entered its first turn with its jitter delay still moving (docs/performance.md, "Which frames are
  // sent"). Outside those a still picture leaves at the repeat floor (`media.unchanged-frames`).
  it("a still picture reaches a wrtc receiver at the clock's rate from connection and from a turn's start, at the floor between", async () => {
    const { media, peer, bus } = await startMediaWithPeer(
      { renderer: new StillRenderer(128, 96), sampleRate: 16_000, videoDelayMs: 0 },
      cleanups,
    );
    await peer.until(() => peer.frames.length >= 3, 10_000, 'first frames at the receiver');
    const connectedAt = performance.now();
    const share = async (clockFrames: number) => {
      const from = media.playout.sentFrames;
      const fromReceived = peer.frames.length;
      await peer.until(
        () => media.playout.sentFrames - from >= clockFrames,
        15_000,
        `${clockFrames} frames on the clock`,
      );
      await new Promise((r) => setTimeout(r, 300));
      return (peer.frames.length - fromReceived) / (media.playout.sentFrames - from);
    };
    // The viewer's first second: inside `STEADY_START_MS`.
    expect(await share(25)).toBeGreaterThanOrEqual(0.8);
    await new Promise((r) => setTimeout(r, Math.max(0, connectedAt + STEADY_START_MS + 500 - performance.now())));
    // Idle after it: a repeat per `IDLE_REPEAT_MS` (one frame in six at 25 fps), plus the odd late one.
    expect(await share(50)).toBeLessThan(0.5);
    bus.emit('turn.started', { turnId: 'turn-1', kind: 'speak', playout: newTurnHandle('turn-1').playout });
    await new Promise((r) => setTimeout(r, 200));
    expect(await share(50)).toBeGreaterThanOrEqual(0.8);
  }, 40_000);
});

describe('the hold the clock applies to video (SERVICE_VIDEO_DELAY_MS)', () => {
  it('by default puts the mouth a little ahead of its sound at a page that syncs by capture time', () => {
    // A synced frame plays with the audio sent when it was handed over, the hold after its presentation time, and
    // shows the mouth of `MOUTH_LOOKAHEAD_MS` past it: the mouth is the hold minus the lookahead after its sound.
    const { videoDelayMs } = loadConfig({});
    expect(videoDelayMs).toBe(DEFAULT_VIDEO_DELAY_MS);
    expect(videoDelayMs - MOUTH_LOOKAHEAD_MS).toBeGreaterThanOrEqual(-40);
    expect(videoDelayMs - MOUTH_LOOKAHEAD_MS).toBeLessThanOrEqual(0);
  });

  it('hands each frame to the wire the configured hold after its presentation time, not sooner', async () => {
    const clock = new PlayoutClock(new StillRenderer(64, 48), 16_000, { videoDelayMs: DEFAULT_VIDEO_DELAY_MS });
    cleanups.push(() => clock.close());
    const holds: number[] = [];
    clock.on('videoOut', (_frame, _idx, ptsMs) => holds.push(clock.mediaMs - ptsMs));
    clock.start();
    await new Promise((resolve) => setTimeout(resolve, 800));
    expect(holds.length).toBeGreaterThan(5);
    // A frame leaves with the 10 ms audio chunk its wire time falls in: the chunk's start is at most 10 ms before it.
    for (const hold of holds) expect(hold).toBeGreaterThanOrEqual(DEFAULT_VIDEO_DELAY_MS - CHUNK_MS);
  });
});
