// The browser's side of a client-rendered session's pose stream (issue 47): reads the `avatar` data channel
// (`PoseChannelMessage`), keeps a bounded buffer of poses, and at each display frame draws the pose of the audio being
// heard. With channel audio (the page asked for the session's audio on the channel and plays it itself,
// `client/channel-audio.ts`), "heard" is exactly the rtp the player's output is at. Otherwise (the track fallback) it is
// the RTP timestamp the audio receiver is playing (`getSynchronizationSources()`); a pose's `rtp` is that clock less
// the track's random initial offset, which `sync` messages let us estimate (see `sync`).
import { ChannelAudioPlayer, channelAudioSupported } from './channel-audio.ts';
import {
  loadFaceCanvas,
  type FaceCanvas,
  type FramePose,
  type PoseChannelData,
  type PoseChannelMessage,
  type ChannelAudioRequest,
  rtpDiff,
  wrapRtp,
} from './face-canvas.ts';

/** Poses kept ahead of (and just behind) what is heard: 2 s at 25 fps, far more than the service's lead (160 ms). */
export const MAX_BUFFERED_POSES = 50;
/**
 * Offset estimates kept (the service sends a `sync` with each pair of poses, 12.5 a second): their median over 2 s is
 * used, so estimates taken
 * during a stall do not move the face.
 */
export const OFFSET_ESTIMATES_KEPT = 25;
/**
 * Time from a chunk leaving the service to its Opus packet leaving: a 10 ms chunk waits for the second half of its
 * 20 ms Opus frame, 5–10 ms on average, plus the encode. Part of the offset estimate (`offsetEstimate`).
 */
export const OPUS_PACKETISATION_MS = 10;
/** How often the receiver's jitter-buffer delay is read from `getStats()` (an async call, kept off the frame loop). */
const JITTER_STATS_INTERVAL_MS = 1_000;

/**
 * How far the played RTP time is carried forward from the last packet played (by the time since). An idle session's
 * audio goes as DTX, one packet per 400 ms, while the receiver's clock runs on (comfort noise): the time since that
 * packet is part of what plays now. Longer than that, the audio has stalled and the face waits with it.
 */
const MAX_EXTRAPOLATION_MS = 500;

/** Resolves true once `context` runs (at once if it does), false if it closes first. */
function running(context: AudioContext): Promise<boolean> {
  if (context.state === 'running') return Promise.resolve(true);
  void context.resume().catch(() => undefined);
  return new Promise((resolve) => {
    const changed = () => {
      if (context.state === 'suspended') return;
      context.removeEventListener('statechange', changed);
      resolve(context.state === 'running');
    };
    context.addEventListener('statechange', changed);
  });
}

/** The receiver's stats this reads (`inbound-rtp` and `media-playout`). */
interface AudioStats {
  type: string;
  jitterBufferDelay?: number;
  jitterBufferEmittedCount?: number;
  totalPlayoutDelay?: number;
  totalSamplesCount?: number;
}

export interface PoseStreamFigures {
  hello: Extract<PoseChannelMessage, { type: 'hello' }> | null;
  poses: number;
  flushes: number;
  syncs: number;
  /** The estimated RTP offset of the audio track (played RTP = pose rtp + offset); null before the first `sync`. */
  offset: number | null;
  /** The audio receiver's recent jitter-buffer delay, ms, part of the offset estimate; null until read. */
  jitterMs: number | null;
  /** The audio device's delay after the jitter buffer (`media-playout` stats), ms; null where not reported. */
  outputDelayMs: number | null;
  /**
   * Where the session's audio is heard from: `track` (the receiver, the default) or `channel` (the page asked for
   * it on the channel, `audio-route` said yes, and the player plays it).
   */
  audioRoute: 'track' | 'channel';
  /**
   * The last drawn poses: their `rtp`, the rtp heard when drawn (on the poses' clock), how it was known (`channel`:
   * the player's output; `track`: the receiver's RTP less `offset`), that offset (the track's); at most 200.
   */
  drawn: Array<{
    poseRtp: number;
    heardRtp: number;
    offset: number | null;
    route: 'track' | 'channel';
    frameIdx: number;
    speaking: boolean;
  }>;
}

/** A client-rendered page's channel audio: the context it plays on, and what to do when the route changes. */
export interface ChannelAudioOptions {
  /** The page's AudioContext (`channelAudioContext`, made in the user gesture that started the session). */
  context: AudioContext;
  /** The service switched the audio (`audio-route`): the page mutes the track's audio on `channel`. */
  onRoute: (route: 'track' | 'channel') => void;
}

/**
 * Draws a client-rendered session's face in `canvas` from the poses on `channel`, in step with the audio of
 * `receiver`. `close()` stops it; the FaceCanvas is loaded from the render kit named by `hello`.
 */
export class PoseStream {
  readonly figures: PoseStreamFigures = {
    hello: null,
    poses: 0,
    flushes: 0,
    syncs: 0,
    offset: null,
    jitterMs: null,
    outputDelayMs: null,
    audioRoute: 'track',
    drawn: [],
  };
  /** The channel audio player (null when the page cannot play channel audio, or until the hello offers it). */
  audio: ChannelAudioPlayer | null = null;
  private readonly buffer: FramePose[] = [];
  private readonly rtpOf = new WeakMap<FramePose, number>();
  private readonly estimates: number[] = [];
  /** The receiver's recent jitter-buffer delay, ms; null until `getStats()` told it (no offset is estimated before). */
  private jitterMs: number | null = null;
  private jitterSeen = { delay: 0, count: 0 };
  /**
   * How long audio leaving the jitter buffer takes to be heard (the audio device's buffers), ms, from the receiver's
   * `media-playout` stats (`totalPlayoutDelay` / `totalSamplesCount`); 0 where the browser does not report it.
   */
  private outputDelayMs = 0;
  private playoutSeen = { delay: 0, count: 0 };
  private lastJitterRead = -Infinity;
  private face: FaceCanvas | null = null;
  private shown: FramePose | null = null;
  private frame = 0;
  private closed = false;
  private readonly loading = new AbortController();

  constructor(
    private readonly channel: RTCDataChannel,
    private readonly receiver: RTCRtpReceiver,
    private readonly canvas: HTMLCanvasElement | null,
    /** The service's base URL, to which the kit's path is relative. */
    private readonly server: string,
    private readonly onError: (error: unknown) => void = () => undefined,
    /** Where the page plays channel audio; absent: the page keeps the track (it never asks). */
    private readonly channelAudio: ChannelAudioOptions | null = null,
  ) {
    channel.addEventListener('message', (event: MessageEvent) => this.receive(event.data));
    if (typeof requestAnimationFrame === 'function') this.frame = requestAnimationFrame(() => this.tick());
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.loading.abort();
    if (this.frame && typeof cancelAnimationFrame === 'function') cancelAnimationFrame(this.frame);
    this.face?.close();
    this.face = null;
    this.audio?.close();
    this.audio = null;
  }

  private receive(data: unknown): void {
    if (this.closed || typeof data !== 'string') return;
    let parsed: PoseChannelData;
    try {
      parsed = JSON.parse(data) as PoseChannelData;
    } catch {
      return;
    }
    // One message of the channel carries one clock tick's messages: a JSON array when there are several.
    for (const message of Array.isArray(parsed) ? parsed : [parsed]) this.handle(message);
  }

  private handle(message: PoseChannelMessage): void {
    switch (message?.type) {
      case 'hello':
        this.figures.hello = message;
        if (this.canvas) {
          this.canvas.width = message.width;
          this.canvas.height = message.height;
          loadFaceCanvas(this.canvas, `${this.server}${message.kitUrl}`, this.loading.signal).then(
            (face) => {
              if (this.closed) face.close();
              else this.face = face;
            },
            (error: unknown) => this.onError(error),
          );
        }
        if (message.channelAudio?.includes('opus')) void this.askForChannelAudio();
        break;
      case 'pose':
        this.figures.poses++;
        this.add(message.pose, message.rtp);
        break;
      case 'flush':
        this.figures.flushes++;
        this.flush(message.fromRtp);
        if (message.audio) this.audio?.flush();
        break;
      case 'sync':
        this.figures.syncs++;
        this.audio?.sync(message.rtp);
        this.sync(message.rtp);
        break;
      case 'audio':
        this.audio?.receive(message);
        break;
      case 'audio-route':
        if (message.route !== 'channel' && message.route !== 'track') break;
        if (message.route === 'channel' && !this.audio) break;
        this.figures.audioRoute = message.route;
        if (message.route === 'channel') this.audio?.setEncoderDelay(message.encoderDelay);
        this.channelAudio?.onRoute(message.route);
        break;
    }
  }

  /**
   * The hello offers Opus on the channel: when this page can decode and play it, and its AudioContext runs (a context
   * made outside a user gesture waits, suspended, until the page resumes it in one), the player is made and the
   * service asked (`ChannelAudioRequest`). Until `audio-route` `channel` comes, the track plays.
   */
  private async askForChannelAudio(): Promise<void> {
    if (!this.channelAudio || this.audio || !(await channelAudioSupported()) || this.closed) return;
    const context = this.channelAudio.context;
    if (!(await running(context)) || this.closed || this.audio) return;
    const player = new ChannelAudioPlayer(context);
    this.audio = player;
    try {
      await player.ready;
    } catch (error) {
      // No worklet (a page whose policy refuses blob: scripts): the track stays.
      this.onError(error);
      player.close();
      this.audio = null;
      return;
    }
    if (this.closed || this.channel.readyState !== 'open') return;
    this.channel.send(JSON.stringify({ type: 'audio', codec: 'opus' } satisfies ChannelAudioRequest));
  }

  /** In frame order; a pose sent again for the same frame (new audio under it) replaces the first. */
  private add(pose: FramePose, rtp: number): void {
    this.rtpOf.set(pose, rtp);
    let at = this.buffer.length;
    while (at > 0 && this.buffer[at - 1].frameIdx >= pose.frameIdx) at--;
    const replaces = this.buffer[at]?.frameIdx === pose.frameIdx ? 1 : 0;
    this.buffer.splice(at, replaces, pose);
    if (this.buffer.length > MAX_BUFFERED_POSES) this.buffer.splice(0, this.buffer.length - MAX_BUFFERED_POSES);
  }

  private flush(fromRtp: number | undefined): void {
    if (fromRtp === undefined) {
      this.buffer.length = 0;
      return;
    }
    for (let i = this.buffer.length - 1; i >= 0; i--)
      if (rtpDiff(this.rtpOf.get(this.buffer[i])!, fromRtp) >= 0) this.buffer.splice(i, 1);
  }

  /** The RTP timestamp being played now, extrapolated from the last one played; null before any audio. */
  private playedRtp(): number | null {
    const source = this.receiver.getSynchronizationSources?.()[0];
    if (!source) return null;
    const now = performance.timeOrigin + performance.now();
    const sinceMs = Math.max(0, Math.min(MAX_EXTRAPOLATION_MS, now - source.timestamp));
    return wrapRtp(source.rtpTimestamp + Math.round(sinceMs * 48));
  }

  /**
   * `sync` names the audio leaving the service now (`rtp`, pose clock). What is played now left
   * `OPUS_PACKETISATION_MS` + the jitter buffer's delay earlier (the data channel and the audio share the network
   * path, so it cancels), so: offset = played + (packetisation + jitter buffer) × 48 − rtp. Assumes the two paths
   * take the same time, which holds on one transport; measured in Chromium (test/browser.pose-stream.test.ts).
   */
  private sync(rtp: number): void {
    this.readJitter();
    const played = this.playedRtp();
    if (played === null || this.jitterMs === null) return;
    const estimate = wrapRtp(played + Math.round((OPUS_PACKETISATION_MS + this.jitterMs) * 48) - rtp);
    this.estimates.push(estimate);
    if (this.estimates.length > OFFSET_ESTIMATES_KEPT) this.estimates.shift();
    // The median on the wrapped circle: relative to the newest estimate, so a wrap inside the window is harmless.
    const relative = this.estimates.map((e) => rtpDiff(e, estimate)).sort((a, b) => a - b);
    this.figures.offset = wrapRtp(estimate + relative[relative.length >> 1]);
  }

  /** The receiver's recent jitter-buffer delay (ms), from the growth of `jitterBufferDelay` / `jitterBufferEmittedCount`. */
  private readJitter(): void {
    const now = performance.now();
    if (now - this.lastJitterRead < JITTER_STATS_INTERVAL_MS) return;
    this.lastJitterRead = now;
    void this.receiver.getStats().then(
      (report) =>
        report.forEach((stat: AudioStats) => {
          if (stat.type === 'media-playout') this.readPlayout(stat);
          if (stat.type !== 'inbound-rtp' || stat.jitterBufferEmittedCount === undefined) return;
          const delay = stat.jitterBufferDelay ?? 0;
          const count = stat.jitterBufferEmittedCount;
          if (count > this.jitterSeen.count)
            this.jitterMs = this.figures.jitterMs =
              ((delay - this.jitterSeen.delay) / (count - this.jitterSeen.count)) * 1000;
          this.jitterSeen = { delay, count };
        }),
      () => undefined,
    );
  }

  /** The audio device's recent delay, from the growth of `totalPlayoutDelay` over `totalSamplesCount`. */
  private readPlayout(stat: AudioStats): void {
    if (stat.totalPlayoutDelay === undefined || stat.totalSamplesCount === undefined) return;
    const delay = stat.totalPlayoutDelay;
    const count = stat.totalSamplesCount;
    if (count > this.playoutSeen.count)
      this.outputDelayMs = this.figures.outputDelayMs =
        ((delay - this.playoutSeen.delay) / (count - this.playoutSeen.count)) * 1000;
    this.playoutSeen = { delay, count };
  }

  private tick(): void {
    if (this.closed) return;
    this.frame = requestAnimationFrame(() => this.tick());
    const pose = this.choose();
    if (!pose || pose === this.shown) return;
    this.shown = pose;
    try {
      this.face?.draw(pose);
    } catch (error) {
      this.onError(error);
    }
  }

  /** The rtp heard now on the poses' clock: the player's output with channel audio, else the track's estimate. */
  private heardRtp(): number | null {
    if (this.figures.audioRoute === 'channel' && this.audio) return this.audio.heardRtp();
    const played = this.playedRtp();
    const offset = this.figures.offset;
    if (played === null || offset === null) return null;
    // What is heard now left the jitter buffer the audio device's delay ago.
    return wrapRtp(played - offset - Math.round(this.outputDelayMs * 48));
  }

  /**
   * The pose of the audio heard: the latest whose time has come (older ones are dropped). Without a heard time yet,
   * or when every pose is still ahead (just after a flush), the earliest one.
   */
  private choose(): FramePose | null {
    if (this.buffer.length === 0) return this.shown;
    const heard = this.heardRtp();
    if (heard === null) return this.buffer[0];
    let at = -1;
    for (let i = 0; i < this.buffer.length; i++) {
      if (rtpDiff(this.rtpOf.get(this.buffer[i])!, heard) <= 0) at = i;
      else break;
    }
    if (at < 0) return this.buffer[0];
    if (at > 0) this.buffer.splice(0, at);
    const pose = this.buffer[0];
    if (pose !== this.shown) {
      this.figures.drawn.push({
        poseRtp: this.rtpOf.get(pose)!,
        heardRtp: heard,
        offset: this.figures.offset,
        route: this.figures.audioRoute,
        frameIdx: pose.frameIdx,
        speaking: pose.speaking,
      });
      if (this.figures.drawn.length > 200) this.figures.drawn.shift();
    }
    return pose;
  }
}
