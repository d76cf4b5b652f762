import { afterEach, describe, expect, it } from 'vitest';
import { VIDEO_MAX_BITRATE_KBPS, offerAsApplied, withVideoBitrateCap } from '../actors/media/webrtc.ts';
import type { FrameRenderer } from '../actors/media/playout.ts';
import type { FrameRequest, I420Frame } from '../actors/render/types.ts';
import { startMediaWithPeer } from './helpers/media-peer.ts';
import type { ReceivingPeer } from './helpers/peer.ts';

const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

const offer = (videoLines: string[] = []) =>
  [
    'v=0',
    'o=- 1 2 IN IP4 127.0.0.1',
    's=-',
    't=0 0',
    'm=audio 9 UDP/TLS/RTP/SAVPF 111',
    'c=IN IP4 0.0.0.0',
    'a=rtpmap:111 opus/48000/2',
    'a=fmtp:111 usedtx=1',
    'm=video 9 UDP/TLS/RTP/SAVPF 96',
    'c=IN IP4 0.0.0.0',
    ...videoLines,
    'a=mid:1',
    'a=rtpmap:96 VP8/90000',
    '',
  ].join('\r\n');

describe('withVideoBitrateCap: each video section of the offer asks for at most VIDEO_MAX_BITRATE_KBPS', () => {
  it('adds b=AS after the connection line of the video section only, keeping line endings', () => {
    const out = withVideoBitrateCap(offer());
    expect(out).toContain(
      `m=video 9 UDP/TLS/RTP/SAVPF 96\r\nc=IN IP4 0.0.0.0\r\nb=AS:${VIDEO_MAX_BITRATE_KBPS}\r\na=mid:1\r\n`,
    );
    expect(out.match(/b=AS:/g)).toHaveLength(1);
    expect(out.split('\r\n')).toHaveLength(offer().split('\r\n').length + 1);
    expect(withVideoBitrateCap(offer().replaceAll('\r\n', '\n'))).toContain(
      `c=IN IP4 0.0.0.0\nb=AS:${VIDEO_MAX_BITRATE_KBPS}\na=mid:1\n`,
    );
  });

  it('an offer asking for less keeps its figure; one asking for more (or by TIAS) is lowered to the cap', () => {
    expect(withVideoBitrateCap(offer(['b=AS:300']))).toBe(offer(['b=AS:300']));
    const greedy = withVideoBitrateCap(offer(['b=AS:8000', 'b=TIAS:8000000']));
    expect(greedy).toContain(`b=AS:${VIDEO_MAX_BITRATE_KBPS}\r\n`);
    expect(greedy).not.toMatch(/b=AS:8000|b=TIAS/);
  });

  it('a Firefox-style b=TIAS below the cap is kept (as b=AS), and of several figures the least one wins', () => {
    expect(withVideoBitrateCap(offer(['b=TIAS:500000']))).toBe(offer(['b=AS:500']));
    expect(withVideoBitrateCap(offer(['b=AS:300', 'b=TIAS:8000000']))).toBe(offer(['b=AS:300']));
    expect(withVideoBitrateCap(offer(['b=AS:900', 'b=TIAS:400000']))).toBe(offer(['b=AS:400']));
    // Other bandwidth types (RTCP's b=RR/b=RS) are not ours to change.
    expect(withVideoBitrateCap(offer(['b=RR:0']))).toBe(offer([`b=AS:${VIDEO_MAX_BITRATE_KBPS}`, 'b=RR:0']));
  });

  it('an offer without video is left as it is, and the applied offer also asks for Opus DTX', () => {
    const audioOnly = offer().split('m=video')[0];
    expect(withVideoBitrateCap(audioOnly)).toBe(audioOnly);
    const applied = offerAsApplied(offer().replace('a=fmtp:111 usedtx=1\r\n', ''));
    expect(applied).toContain('a=fmtp:111 usedtx=1');
    expect(applied).toContain(`b=AS:${VIDEO_MAX_BITRATE_KBPS}`);
  });
});

/** Every frame different noise: the picture an encoder cannot compress, so it spends every bit it may. */
class NoiseRenderer implements FrameRenderer {
  readonly fps = 25;
  readonly width = 512;
  readonly height = 512;
  private readonly frames: Uint8Array[];
  constructor() {
    let seed = 1;
    const next = () => (seed = (seed * 1103515245 + 12345) & 0x7fffffff);
    this.frames = Array.from({ length: 8 }, () =>
      Uint8Array.from({ length: (this.width * this.height * 3) / 2 }, () => next() >> 23),
    );
  }
  async render(requests: FrameRequest[]): Promise<I420Frame[]> {
    return requests.map((r) => ({
      width: this.width,
      height: this.height,
      data: this.frames[r.frameIdx % this.frames.length],
    }));
  }
  close(): void {}
}

async function videoBytesReceived(peer: ReceivingPeer): Promise<number> {
  let bytes = 0;
  (await peer.pc.getStats()).forEach(
    (stat: { type: string; kind?: string; mediaType?: string; bytesReceived?: number }) => {
      if (stat.type === 'inbound-rtp' && (stat.kind ?? stat.mediaType) === 'video') bytes += stat.bytesReceived ?? 0;
    },
  );
  return bytes;
}

describe("a session's video to a viewer (real wrtc peer)", () => {
  it('an incompressible picture reaches the viewer at no more than VIDEO_MAX_BITRATE_KBPS', async () => {
    const { peer } = await startMediaWithPeer(
      { renderer: new NoiseRenderer(), sampleRate: 16_000, videoDelayMs: 0 },
      cleanups,
    );
    // libwebrtc probes its bandwidth within the first seconds; the cap must hold after that, when it would be spent.
    await new Promise((resolve) => setTimeout(resolve, 3_000));
    const before = await videoBytesReceived(peer);
    const start = performance.now();
    await new Promise((resolve) => setTimeout(resolve, 4_000));
    const kbps = (((await videoBytesReceived(peer)) - before) * 8) / (performance.now() - start);
    // Something flowed, and (headers and a burst at the window's edge aside) no more than the cap.
    expect(kbps).toBeGreaterThan(50);
    expect(kbps).toBeLessThanOrEqual(VIDEO_MAX_BITRATE_KBPS * 1.15);
  }, 30_000);
});
