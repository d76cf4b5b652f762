/**
 * A client-rendered session's pose stream (issue 47): the frame requests of the media clock, sent ahead of playout
 * on the current peer's `avatar` data channel (`client/face-canvas.ts`, `PoseChannelMessage`), each stamped with the
 * audio RTP time it plays with.
 *
 * RTP time: libwebrtc stamps the Opus packets of a peer's audio track with a random initial offset plus the samples
 * the track was given, at 48 kHz (checked in Chromium with `getSynchronizationSources()`: the played `rtpTimestamp`
 * minus the samples pushed stays constant). wrtc does not expose the offset, so a pose's `rtp` is the media clock's
 * sample count at `RTP_CLOCK_RATE` (every chunk the clock plays goes to the track, so the two differ by a constant
 * per peer), and `sync` messages, sent as the audio they name leaves, let the browser find that constant.
 *
 * A pose is stamped with the time its MOUTH sounds, not its frame's presentation time: the media timeline gives each
 * frame the mouth of `MOUTH_LOOKAHEAD_MS` later (to meet the server path's video delay, which a canvas drawn at the
 * heard time does not have), so the browser, which draws the pose whose time is being heard, shows each mouth with
 * its sound. Blinks and sway move that much later, which no one can see. Measured in Chromium on the canvas frames
 * (test/browser.client-render.test.ts): without the shift the mouth led the heard sound by ~140 ms.
 *
 * What one tick of the media clock produces goes as ONE data channel message (a JSON array when it is more than one):
 * the poses the clock asks for together (`POSE_BATCH_FRAMES`) and the `sync` of the audio that left in that tick.
 * Each `send` on a wrtc data channel is a blocking call into libwebrtc's signalling thread and one SCTP message on
 * the network thread; ~35 of them a second per session were most of what a client-rendered session cost beyond
 * its audio (docs/performance.md, "Client-rendered sessions").
 */
import type { FramePose, PoseChannelMessage } from '../../client/face-canvas.ts';
import type { FrameRequest } from '../../actors/render/types.ts';
import type { PeerDataChannel } from '../../actors/media/webrtc.ts';
import { MOUTH_LOOKAHEAD_MS } from '../../actors/media/timeline.ts';

/** The Opus RTP clock of the audio track (RFC 7587: always 48 kHz, whatever the session's sample rate). */
export const RTP_CLOCK_RATE = 48_000;
/**
 * How often a `sync` goes out at least: 10 a second. The browser takes the median of its recent estimates, so several
 * a second follow a jitter buffer that grows or shrinks within a second or two; each is ~30 bytes, beside 25 poses of
 * ~200. A sync also rides with every batch of poses sent in the tick its audio left (12.5 a second), at no extra
 * message; one goes alone only when no batch took one for this long.
 */
export const SYNC_INTERVAL_MS = 100;
/**
 * Above this much unsent data on the channel, poses and syncs are skipped (counted in `skippedPoses`) instead of
 * queued: 16 KiB is ~3 s of poses (~200 bytes, 25 a second), far more than a browser that reads needs (a pose is
 * useful for `POSE_LEAD_FRAMES` plus the audio's way to the ear, well under a second); a browser that stopped
 * reading (a tab in the background, a stalled link) would otherwise make SCTP buffer every pose of the session.
 * The browser keeps showing its last pose meanwhile.
 */
export const MAX_POSE_BUFFERED_BYTES = 16 * 1024;
/**
 * `hello` and `flush` go unless even this much is buffered: without them the browser would draw void poses or no
 * kit, and they are rare (a peer's start, an interrupt or new audio) and small.
 */
export const MAX_CONTROL_BUFFERED_BYTES = 64 * 1024;

/** What the browser needs to know before the first pose (`hello`, less its `type`). */
export type PoseChannelHello = Omit<Extract<PoseChannelMessage, { type: 'hello' }>, 'type' | 'rtpClockRate'>;

/** A time on the session's media clock (ms) as a pose's `rtp` (`RTP_CLOCK_RATE`, modulo 2^32). */
export function rtpOfMediaMs(ms: number): number {
  return Math.round((ms * RTP_CLOCK_RATE) / 1000) % 2 ** 32;
}

export interface PoseChannelFigures {
  /** Poses sent on a channel. */
  sentPoses: number;
  /** Of those, poses sent after their audio had left the clock (a browser can only show them late, if at all). */
  latePoses: number;
  /** Poses not sent because the channel held `MAX_POSE_BUFFERED_BYTES` already. */
  skippedPoses: number;
}

/**
 * A client-rendered session's `avatar` channel. Its state is not read from it: each read of a wrtc data channel's `readyState` or `bufferedAmount` is a
 * blocking call into libwebrtc's signalling thread (as is each `send`). Read on every message, with `readyState` on
 * every 10 ms audio chunk, they were most of a client-rendered session's service CPU (24 sessions: ~240 thread hops a
 * second each; docs/performance.md, "Client-rendered sessions"). The channel's state is followed by its events
 * instead, and its buffered amount, which only our sends can raise, is bounded by the last reading plus what was sent
 * since; it is read again only once that sum passes the bound (every ~3 s for a browser that reads: 16 KiB at ~5 KB/s).
 */
export class PoseChannel {
  private channel: PeerDataChannel | null = null;
  /** Whether `channel` is open, as its `open` and `close` events told (no call into libwebrtc). */
  private channelOpen = false;
  /** The channel's `bufferedAmount` at its last reading, plus the bytes sent since: never below the real amount. */
  private bufferedAtMost = 0;
  private lastSyncMs = -Infinity;
  /** The audio that left in this tick of the clock (`audioLeft`), for the `sync` of the batch sent in it. */
  private syncDue: number | null = null;
  /** This tick's messages (JSON texts), sent as one when the tick's synchronous work is done. */
  private readonly batch: string[] = [];
  private batchBytes = 0;
  private batchPoses = 0;
  private readonly figures: PoseChannelFigures = { sentPoses: 0, latePoses: 0, skippedPoses: 0 };

  constructor(
    private readonly hello: PoseChannelHello,
    /** The media clock's position (ms of audio that left): a pose for an earlier time is late. */
    private readonly mediaMs: () => number,
  ) {}

  get counts(): Readonly<PoseChannelFigures> {
    return this.figures;
  }

  /** True while a peer's `avatar` channel is open. */
  get open(): boolean {
    return this.channelOpen;
  }

  /** The current peer opened its `avatar` channel: it replaces the previous peer's, and gets `hello` once open. */
  attach(channel: PeerDataChannel): void {
    this.dropBatch();
    this.channel = channel;
    this.channelOpen = false;
    this.bufferedAtMost = 0;
    this.lastSyncMs = -Infinity;
    const greet = () => {
      if (this.channel !== channel || this.channelOpen) return;
      this.channelOpen = true;
      this.add({ type: 'hello', ...this.hello, rtpClockRate: RTP_CLOCK_RATE }, MAX_CONTROL_BUFFERED_BYTES);
    };
    channel.addEventListener('open', greet);
    if (channel.readyState === 'open') greet();
    channel.addEventListener('close', () => {
      if (this.channel !== channel) return;
      this.channel = null;
      this.channelOpen = false;
    });
  }

  /** A frame the clock asked for: its pose, stamped with its audio's RTP time. */
  pose(request: FrameRequest): void {
    if (!this.channelOpen) return;
    // The audio that left in this tick names its time first: the browser reads it as the batch arrives.
    if (this.syncDue !== null) this.sync(this.syncDue);
    const { audio: _audio, ...pose } = request;
    const message: PoseChannelMessage = {
      type: 'pose',
      rtp: rtpOfMediaMs(request.ptsMs + MOUTH_LOOKAHEAD_MS),
      pose: pose as FramePose,
    };
    if (!this.add(message, MAX_POSE_BUFFERED_BYTES)) {
      this.figures.skippedPoses++;
      return;
    }
    this.batchPoses++;
    if (request.ptsMs < this.mediaMs()) this.figures.latePoses++;
  }

  /** Poses from `fromMs` on (all not yet heard: null) are void (the clock's `framesVoid`). */
  flush(fromMs: number | null): void {
    if (!this.channelOpen) return;
    this.add(
      fromMs === null ? { type: 'flush' } : { type: 'flush', fromRtp: rtpOfMediaMs(fromMs + MOUTH_LOOKAHEAD_MS) },
      MAX_CONTROL_BUFFERED_BYTES,
    );
  }

  /**
   * The clock sent the audio chunk starting at `mediaMs` to the track. Its `sync` goes with the poses asked for in the
   * same tick; if none are, alone once `SYNC_INTERVAL_MS` passed since the last.
   */
  audioLeft(mediaMs: number): void {
    if (!this.channelOpen) return;
    if (this.syncDue === null) {
      queueMicrotask(() => {
        const due = this.syncDue;
        this.syncDue = null;
        if (due !== null && due - this.lastSyncMs >= SYNC_INTERVAL_MS) {
          this.sync(due);
          this.sendBatch();
        }
      });
    }
    this.syncDue = mediaMs;
  }

  close(): void {
    this.dropBatch();
    this.channel = null;
    this.channelOpen = false;
  }

  private sync(mediaMs: number): void {
    this.syncDue = null;
    this.lastSyncMs = mediaMs;
    this.add({ type: 'sync', rtp: rtpOfMediaMs(mediaMs) }, MAX_POSE_BUFFERED_BYTES);
  }

  /**
   * Adds a message to this tick's batch unless more than `maxBuffered` bytes would wait before it; false when skipped.
   * The first message of a tick schedules the batch's send for the end of the tick.
   */
  private add(message: PoseChannelMessage, maxBuffered: number): boolean {
    const channel = this.channel;
    if (!channel || !this.channelOpen || this.buffered(channel, maxBuffered) + this.batchBytes > maxBuffered)
      return false;
    const text = JSON.stringify(message);
    if (this.batch.length === 0) queueMicrotask(() => this.sendBatch());
    this.batch.push(text);
    this.batchBytes += Buffer.byteLength(text) + 1;
    return true;
  }

  /** Sends this tick's messages as one: the message itself, or a JSON array of them. */
  private sendBatch(): void {
    const channel = this.channel;
    if (this.batch.length === 0) return;
    const text = this.batch.length === 1 ? this.batch[0] : `[${this.batch.join(',')}]`;
    const poses = this.batchPoses;
    const bytes = this.batchBytes;
    this.dropBatch();
    try {
      if (!channel || !this.channelOpen) throw new Error('closed');
      channel.send(text);
    } catch {
      // Closing under us (the next `close` event forgets it): its poses were not sent after all.
      this.figures.skippedPoses += poses;
      return;
    }
    this.figures.sentPoses += poses;
    this.bufferedAtMost += bytes;
  }

  private dropBatch(): void {
    this.batch.length = 0;
    this.batchBytes = 0;
    this.batchPoses = 0;
  }

  /** The channel's buffered bytes, or an upper bound on them: read from the channel only when the bound passes `maxBuffered`. */
  private buffered(channel: PeerDataChannel, maxBuffered: number): number {
    if (this.bufferedAtMost > maxBuffered) this.bufferedAtMost = channel.bufferedAmount;
    return this.bufferedAtMost;
  }
}
