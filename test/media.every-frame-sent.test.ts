import { afterEach, describe, expect, it } from 'vitest';
import { withOpusDtx } from '../actors/media/webrtc.ts';
import { DEFAULT_VIDEO_DELAY_MS, PlayoutClock, type FrameRenderer } from '../actors/media/playout.ts';
import { MOUTH_LOOKAHEAD_MS } from '../actors/media/timeline.ts';
import type { FrameRequest, I420Frame } from '../actors/render/types.ts';
import { loadConfig } from '../src/config.ts';
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

describe('every frame the clock plays is sent, a repeat of the last picture too', () => {
  // Chromium showed a stream that skipped repeats (an idle or held photo) on arrival, outside its A/V sync, and
  // synced a clip's full 25 fps: the photo's mouth then reached the page ~100 ms before a clip's (docs/performance.md,
  // "Every frame sent"). Repeats used to be skipped (a still head reached a viewer at 4 fps).
  it("a still picture reaches a wrtc receiver at the clock's rate, not at a repeat floor", async () => {
    const { media, peer } = await startMediaWithPeer(
      { renderer: new StillRenderer(128, 96), sampleRate: 16_000, videoDelayMs: 0 },
      cleanups,
    );
    await peer.until(() => peer.frames.length >= 3, 10_000, 'first frames at the receiver');
    const from = media.playout.sentFrames;
    const fromReceived = peer.frames.length;
    await peer.until(() => media.playout.sentFrames - from >= 75, 15_000, '3 s of frames on the clock');
    await new Promise((r) => setTimeout(r, 300));
    const clockFrames = media.playout.sentFrames - from;
    const received = peer.frames.length - fromReceived;
    // Skipping repeats, at most one frame in six of these would have left (a 250 ms floor at 25 fps).
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
