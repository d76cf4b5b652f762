import { afterEach, describe, expect, it } from 'vitest';
import { UNCHANGED_FRAME_REPEAT_MS, UnchangedFrameFilter, withOpusDtx } from '../actors/media/webrtc.ts';
import { DEFAULT_VIDEO_DELAY_MS, PlayoutClock, type FrameRenderer } from '../actors/media/playout.ts';
import { MOUTH_LOOKAHEAD_MS } from '../actors/media/timeline.ts';
import { newPlayoutTurn } from '../actors/media/turn-playout.ts';
import type { FrameRequest, I420Frame } from '../actors/render/types.ts';
import { loadConfig } from '../src/config.ts';
import { startMediaWithPeer } from './helpers/media-peer.ts';

const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

const IDLE = false;
const SPEECH = true;
/** The clock's scheduling grain: one 10 ms audio chunk. */
const CHUNK_MS = 10;
const SAMPLE_RATE = 16_000;

function frameOf(fill: number, width = 64, height = 48): I420Frame {
  return { width, height, data: new Uint8Array((width * height * 3) / 2).fill(fill) };
}

describe('UnchangedFrameFilter: an idle frame repeating the last one sent is not encoded again', () => {
  it('admits the first frame, skips equal frames (same buffer or same bytes) within the repeat interval, admits changed ones', () => {
    const filter = new UnchangedFrameFilter(250);
    const a = frameOf(10);
    expect(filter.admit(a, IDLE, 0)).toBe(true);
    expect(filter.admit(a, IDLE, 40)).toBe(false);
    expect(filter.admit(frameOf(10), IDLE, 80)).toBe(false);
    const b = frameOf(10);
    b.data[b.data.length - 1] = 11;
    expect(filter.admit(b, IDLE, 120)).toBe(true);
    expect(filter.admit(frameOf(10), IDLE, 160)).toBe(true);
    expect(filter.skipped).toBe(2);
  });

  it('repeats an unchanged frame once the repeat interval has passed (the floor a lost picture recovers from)', () => {
    const filter = new UnchangedFrameFilter(250);
    const a = frameOf(1);
    const admitted = [];
    for (let t = 0; t <= 1000; t += 40) if (filter.admit(a, IDLE, t)) admitted.push(t);
    expect(admitted).toEqual([0, 280, 560, 840]);
  });

  it('after reset the next frame goes out whatever it shows (a new peer)', () => {
    const filter = new UnchangedFrameFilter(250);
    const a = frameOf(5);
    expect(filter.admit(a, IDLE, 0)).toBe(true);
    filter.reset();
    expect(filter.admit(a, IDLE, 40)).toBe(true);
  });

  it('admits every speech frame, a repeat of the last one too (a photo holding its mouth), and goes on skipping idle repeats', () => {
    // Chromium showed a stream with such gaps on arrival, outside its A/V sync, and synced a clip's steady 25 fps:
    // the photo's mouth reached the page ~100 ms before a clip's (docs/performance.md, "Speech frames all sent").
    const filter = new UnchangedFrameFilter(250);
    const a = frameOf(7);
    const admitted = [];
    for (let t = 0; t < 400; t += 40) if (filter.admit(a, SPEECH, t)) admitted.push(t);
    expect(admitted).toHaveLength(10);
    expect(filter.admit(a, IDLE, 400)).toBe(false);
    expect(filter.skipped).toBe(1);
  });
});

/** Renders the same picture for every frame except every 25th (a "blink"). */
class MostlyStillRenderer implements FrameRenderer {
  readonly fps = 25;
  constructor(
    readonly width: number,
    readonly height: number,
  ) {}
  async render(requests: FrameRequest[]): Promise<I420Frame[]> {
    return requests.map((r) => {
      const data = new Uint8Array((this.width * this.height * 3) / 2).fill(128);
      if (r.frameIdx % 25 === 0) data.fill(200, 0, this.width * this.height);
      return { width: this.width, height: this.height, data };
    });
  }
}

describe('an idle avatar whose picture does not change', () => {
  it('reaches a wrtc receiver at the repeat floor plus its changes, not at 25 fps, and every change arrives', async () => {
    const renderer = new MostlyStillRenderer(128, 96);
    const { media, peer } = await startMediaWithPeer(
      { renderer: Object.assign(renderer, { close: () => undefined }), sampleRate: 16_000, videoDelayMs: 0 },
      cleanups,
    );
    await peer.until(() => peer.frames.length >= 3, 10_000, 'first frames at the receiver');
    const from = media.playout.sentFrames;
    const fromReceived = peer.frames.length;
    const fromSkipped = media.output.unchangedFramesSkipped;
    await peer.until(() => media.playout.sentFrames - from >= 75, 15_000, '3 s of frames on the clock');
    await new Promise((r) => setTimeout(r, 300));
    const clockFrames = media.playout.sentFrames - from;
    const skipped = media.output.unchangedFramesSkipped - fromSkipped;
    const received = peer.frames.slice(fromReceived);
    // 75+ frames on the clock; per second one change, one frame after it, and a repeat every 250 ms.
    expect(skipped).toBeGreaterThan(clockFrames / 2);
    expect(received.length).toBeGreaterThanOrEqual(Math.floor((clockFrames * 40) / UNCHANGED_FRAME_REPEAT_MS / 2));
    expect(received.length).toBeLessThan(clockFrames / 2);
    // The "blinks" (bright luma) all reached the viewer.
    const bright = received.filter((f) => f.data[0] > 170).length;
    expect(bright).toBeGreaterThanOrEqual(2);
  }, 30_000);
});

/** Renders one picture, the same frame object every time (as the render pool answers a held pose's repeats). */
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

describe('a speaking avatar whose picture does not change (a photo holding its mouth)', () => {
  it("reaches a wrtc receiver at the clock's 25 fps while speech plays, not at the repeat floor", async () => {
    const { media, peer } = await startMediaWithPeer(
      { renderer: new StillRenderer(128, 96), sampleRate: SAMPLE_RATE, videoDelayMs: 0 },
      cleanups,
    );
    await peer.until(() => peer.frames.length >= 1, 10_000, 'first frame at the receiver');
    media.enqueue(newPlayoutTurn('turn-1'), new Int16Array(SAMPLE_RATE * 4).fill(3_000), {
      durationMs: 4_000,
      poseAt: () => ({ open: 0.5, wide: 0, round: 0 }),
      levelAt: () => 0.5,
    });
    const from = media.playout.sentFrames;
    const fromReceived = peer.frames.length;
    await peer.until(() => media.playout.sentFrames - from >= 75, 15_000, '3 s of speech frames on the clock');
    await new Promise((r) => setTimeout(r, 300));
    const clockFrames = media.playout.sentFrames - from;
    const received = peer.frames.length - fromReceived;
    // Skipped as idle repeats, at most one in six of these would have left (the 250 ms floor at 25 fps).
    expect(received).toBeGreaterThanOrEqual(Math.floor(clockFrames * 0.8));
  }, 30_000);
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
    const clock = new PlayoutClock(new StillRenderer(64, 48), SAMPLE_RATE, { videoDelayMs: DEFAULT_VIDEO_DELAY_MS });
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

describe('withOpusDtx: the offer asks our Opus encoder for DTX (silence costs one packet per 400 ms)', () => {
  const offer = (fmtp: string | null) =>
    [
      'v=0',
      'o=- 1 2 IN IP4 127.0.0.1',
      's=-',
      't=0 0',
      'm=audio 9 UDP/TLS/RTP/SAVPF 111 0',
      'a=rtpmap:111 opus/48000/2',
      ...(fmtp === null ? [] : [`a=fmtp:111 ${fmtp}`]),
      'a=rtpmap:0 PCMU/8000',
      'm=video 9 UDP/TLS/RTP/SAVPF 96',
      'a=rtpmap:96 VP8/90000',
      'a=fmtp:96 max-fs=12288',
      '',
    ].join('\r\n');

  it('adds usedtx=1 to the Opus fmtp line only, keeping line endings', () => {
    const out = withOpusDtx(offer('minptime=10;useinbandfec=1'));
    expect(out).toContain('a=fmtp:111 minptime=10;useinbandfec=1;usedtx=1\r\n');
    expect(out).toContain('a=fmtp:96 max-fs=12288\r\n');
    expect(out.split('\r\n')).toHaveLength(offer('minptime=10;useinbandfec=1').split('\r\n').length);
  });

  it('adds an fmtp line when Opus has none, and leaves an offer that states usedtx (or has no Opus) as it is', () => {
    expect(withOpusDtx(offer(null))).toContain('a=rtpmap:111 opus/48000/2\r\na=fmtp:111 usedtx=1\r\n');
    expect(withOpusDtx(offer('usedtx=0'))).toBe(offer('usedtx=0'));
    const noOpus = offer('x=1').replace('opus/48000/2', 'ISAC/16000');
    expect(withOpusDtx(noOpus)).toBe(noOpus);
  });
});
