import { afterEach, describe, expect, it } from 'vitest';
import { withOpusDtx } from '../actors/media/webrtc.ts';
import { FrameSendPolicy, IDLE_REPEAT_MS, STEADY_START_MS } from '../actors/media/frame-send-policy.ts';
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

/** The policy with no start window or tail: what is sent while nothing is said. */
const IDLE_ONLY = { repeatMs: 250, startMs: 0, tailMs: 0 };

describe('FrameSendPolicy: which frames the WebRTC output sends', () => {
  it('outside a turn: admits the first frame, skips equal frames (same buffer or same bytes) within the repeat interval, admits changed ones', () => {
    const policy = new FrameSendPolicy(IDLE_ONLY);
    const a = frameOf(10);
    expect(policy.admit(a, 0)).toBe(true);
    expect(policy.admit(a, 40)).toBe(false);
    expect(policy.admit(frameOf(10), 80)).toBe(false);
    const b = frameOf(10);
    b.data[b.data.length - 1] = 11;
    expect(policy.admit(b, 120)).toBe(true);
    expect(policy.admit(frameOf(10), 160)).toBe(true);
    expect(policy.skipped).toBe(2);
  });

  it('outside a turn: repeats an unchanged frame once the repeat interval has passed (the floor a lost picture recovers from)', () => {
    const policy = new FrameSendPolicy(IDLE_ONLY);
    const a = frameOf(1);
    const admitted = [];
    for (let t = 0; t <= 1000; t += 40) if (policy.admit(a, t)) admitted.push(t);
    expect(admitted).toEqual([0, 280, 560, 840]);
  });

  it("from a turn's start until the tail after its end every frame is sent, repeats too; then idle repeats are skipped again", () => {
    const policy = new FrameSendPolicy({ repeatMs: 250, startMs: 0, tailMs: 1_000 });
    const still = frameOf(7);
    const sentAt = (from: number, to: number) => {
      const sent = [];
      for (let t = from; t < to; t += 40) if (policy.admit(still, t)) sent.push(t);
      return sent;
    };
    expect(sentAt(0, 400)).toEqual([0, 280]);
    policy.turnStarted();
    // 2 s of a turn: 50 frames, all sent, a held picture's too.
    expect(sentAt(400, 2_400)).toHaveLength(50);
    policy.turnEnded(2_400);
    // The tail (1 s here): still every frame.
    expect(sentAt(2_400, 3_400)).toHaveLength(25);
    // Then the floor again: one repeat per 250 ms at most.
    expect(sentAt(3_400, 4_400).length).toBeLessThanOrEqual(4);
  });

  it('a turn that starts before the last one settled keeps every frame going until it settles too', () => {
    const policy = new FrameSendPolicy({ repeatMs: 250, startMs: 0, tailMs: 0 });
    const still = frameOf(3);
    policy.turnStarted();
    policy.turnStarted();
    policy.turnEnded(0);
    expect([0, 40, 80].every((t) => policy.admit(still, t))).toBe(true);
    policy.turnEnded(100);
    expect(policy.admit(still, 120)).toBe(false);
    // An unmatched end does not make a later turn's frames skippable.
    policy.turnEnded(130);
    policy.turnStarted();
    expect(policy.admit(still, 160)).toBe(true);
  });

  it('a new viewer gets the next frame whatever it shows, then every frame for the start window, then the floor', () => {
    const policy = new FrameSendPolicy({ repeatMs: 250, startMs: 1_000, tailMs: 5_000 });
    const still = frameOf(5);
    expect(policy.admit(still, 0)).toBe(true);
    expect(policy.admit(still, 40)).toBe(false);
    policy.viewerStarted(100);
    const sent = [];
    for (let t = 120; t < 2_120; t += 40) if (policy.admit(still, t)) sent.push(t);
    // 1 s of the start window: all 25 frames (120…1080); the next second at the floor (≤ 4).
    expect(sent.filter((t) => t < 1_100)).toHaveLength(25);
    expect(sent.filter((t) => t >= 1_100).length).toBeLessThanOrEqual(4);
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
    // A new viewer gets every frame for its first seconds (`media.every-frame-sent`); the floor comes after them.
    await new Promise((r) => setTimeout(r, STEADY_START_MS + 500));
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
    expect(received.length).toBeGreaterThanOrEqual(Math.floor((clockFrames * 40) / IDLE_REPEAT_MS / 2));
    expect(received.length).toBeLessThan(clockFrames / 2);
    // The "blinks" (bright luma) all reached the viewer.
    const bright = received.filter((f) => f.data[0] > 170).length;
    expect(bright).toBeGreaterThanOrEqual(2);
  }, 40_000);
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
