import type { Logger } from 'pino';
import { PlayoutClock, type FrameRenderer } from '../../actors/media/playout.ts';
import { WebRtcOutput, type IceServer } from '../../actors/media/webrtc.ts';
import type { SessionEventHub } from './event-hub.ts';

/**
 * A session's media: the playout clock feeding the WebRTC output, plus frame events for the SSE
 * stream. Recording taps the same clock (`playout.on('audio' | 'video')`), so a recording is exactly what
 * a viewer gets. The clock stays still until `start()` (the session's start): a created session renders
 * nothing and sends nothing, however many are waiting.
 */
export class SessionMedia {
  readonly playout: PlayoutClock;
  readonly output: WebRtcOutput;
  private closed = false;

  constructor(
    private readonly renderer: FrameRenderer & { close(): void },
    sampleRate: number,
    iceServers: IceServer[],
    videoDelayMs: number,
    events: SessionEventHub,
    private readonly logger: Logger,
  ) {
    this.playout = new PlayoutClock(renderer, sampleRate);
    this.output = new WebRtcOutput(iceServers, videoDelayMs);
    this.playout.on('audio', (samples, rate) => this.output.pushAudio(samples, rate));
    this.playout.on('video', (frame) => this.output.pushVideo(frame));
    this.playout.on('frame', ({ frameIdx, ptsMs }) => events.publish('frame', { frame_idx: frameIdx, pts_ms: ptsMs }));
  }

  /** Starts the media clock (idempotent; a no-op once closed). */
  start(): void {
    if (this.closed) return;
    this.playout.start();
  }

  get width(): number {
    return this.renderer.width;
  }

  get height(): number {
    return this.renderer.height;
  }

  flush(): void {
    this.playout.flush();
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.playout.close();
    this.output.close();
    this.renderer.close();
    this.logger.debug({ lateFrames: this.playout.lateFrames, sentFrames: this.playout.sentFrames }, 'session media closed');
  }
}
