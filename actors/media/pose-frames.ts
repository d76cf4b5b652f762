/**
 * What a client-rendered session's media clock renders with (issue 47). The clock stays the one source of poses: it
 * asks for each frame as it does for a server-rendered session, and `PoseFrames` hands every request to the pose
 * sink (the `avatar` data channel) and, only while some server-side output wants pictures (a recording, a WHEP viewer,
 * an RTMP/WHIP push), to a server renderer as well. Without one it renders nothing: no frame, no VP8 encode.
 */
import type { FrameRenderer } from './playout.ts';
import type { FrameRequest, I420Frame } from '../render/types.ts';

/**
 * How many frames ahead of the clock poses are asked for and sent: 4 frames (160 ms at 25 fps). A pose must reach the
 * browser before its audio is heard; the audio itself is heard 60–150 ms after it leaves the clock (20 ms Opus
 * packets, network, the receiver's jitter buffer), so even a pose sent as its audio leaves is usually in time, and
 * the lead covers a data channel that is slower than the audio path (an SCTP retransmission, a busy event loop).
 * Not longer: every pose sent ahead is void when new audio arrives under it (the first frames of each reply are sent
 * twice), and a server renderer attached for outputs renders as far ahead.
 */
export const POSE_LEAD_FRAMES = 4;
/**
 * Poses are asked for two at a time (one tick of the clock), so they go two to a data channel message
 * (`src/sessions/pose-channel.ts`): half the messages, each a blocking call into libwebrtc and an SCTP message. The
 * nearest pose asked for is still `POSE_LEAD_FRAMES` ahead; the other is one frame further.
 */
export const POSE_BATCH_FRAMES = 2;

/** Where a client-rendered session's frame requests go, besides an optional server renderer. */
export type PoseSink = (request: FrameRequest) => void;

export class PoseFrames implements FrameRenderer {
  readonly renderAhead = { frames: POSE_LEAD_FRAMES + POSE_BATCH_FRAMES - 1, burst: POSE_BATCH_FRAMES };
  private server: FrameRenderer | null = null;

  constructor(
    readonly width: number,
    readonly height: number,
    readonly fps: number,
    private readonly sink: PoseSink,
  ) {}

  /** True while a server renderer draws the poses for server-side outputs. */
  get rendersOnServer(): boolean {
    return this.server !== null;
  }

  /**
   * From the next request on, also renders on `renderer` (null: stops). The caller has the clock ask again for frames
   * it asked for already (`PlayoutClock.useRenderer`), so outputs get pictures from the next frame.
   */
  renderOnServer(renderer: FrameRenderer | null): void {
    this.server = renderer;
  }

  render(requests: FrameRequest[], signal?: AbortSignal): Promise<I420Frame[]> {
    for (const request of requests) this.sink(request);
    return this.server ? this.server.render(requests, signal) : Promise.resolve([]);
  }
}
