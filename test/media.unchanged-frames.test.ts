import { afterEach, describe, expect, it } from 'vitest';
import { UNCHANGED_FRAME_REPEAT_MS, UnchangedFrameFilter, withOpusDtx } from '../actors/media/webrtc.ts';
import type { FrameRenderer } from '../actors/media/playout.ts';
import type { FrameRequest, I420Frame } from '../actors/render/types.ts';
import { startMediaWithPeer } from './helpers/media-peer.ts';
import { opusOffer } from './helpers/opus-offer.ts';

const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

function frameOf(fill: number, width = 64, height = 48): I420Frame {
  return { width, height, data: new Uint8Array((width * height * 3) / 2).fill(fill) };
}

describe('UnchangedFrameFilter: a frame repeating the last one sent is not encoded again', () => {
  it('admits the first frame, skips equal frames (same buffer or same bytes) within the repeat interval, admits changed ones', () => {
    const filter = new UnchangedFrameFilter(250);
    const a = frameOf(10);
    expect(filter.admit(a, 0)).toBe(true);
    expect(filter.admit(a, 40)).toBe(false);
    expect(filter.admit(frameOf(10), 80)).toBe(false);
    const b = frameOf(10);
    b.data[b.data.length - 1] = 11;
    expect(filter.admit(b, 120)).toBe(true);
    expect(filter.admit(frameOf(10), 160)).toBe(true);
    expect(filter.skipped).toBe(2);
  });

  it('repeats an unchanged frame once the repeat interval has passed (the floor a lost picture recovers from)', () => {
    const filter = new UnchangedFrameFilter(250);
    const a = frameOf(1);
    const admitted = [];
    for (let t = 0; t <= 1000; t += 40) if (filter.admit(a, t)) admitted.push(t);
    expect(admitted).toEqual([0, 280, 560, 840]);
  });

  it('after reset the next frame goes out whatever it shows (a new peer)', () => {
    const filter = new UnchangedFrameFilter(250);
    const a = frameOf(5);
    expect(filter.admit(a, 0)).toBe(true);
    filter.reset();
    expect(filter.admit(a, 40)).toBe(true);
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

describe('withOpusDtx: the offer asks our Opus encoder for DTX (silence costs one packet per 400 ms)', () => {
  const offer = opusOffer;

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
