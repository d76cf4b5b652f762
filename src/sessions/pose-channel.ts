/**
 * A client-rendered session's pose stream (issue 47): the frame requests of the media clock, sent ahead of playout
 * on the current peer's `avatar` data channel (`client/face-canvas.ts`, `PoseChannelMessage`), each stamped with the
 * audio RTP time it plays with.
 *
 * RTP time: libwebrtc stamps the Opus packets of a peer's audio track with a random initial offset plus the samples
 * the track was given, at 48 kHz (checked in Chromium with `getSynchronizationSources()`: the played `rtpTimestamp`
 * minus the samples pushed stays constant). wrtc does not expose the offset, so a pose's `rtp` is the media clock's
 * sample count at `RTP_CLOCK_RATE` (every chunk the clock plays goes to the track while the page takes its audio
 * there, so the two differ by a constant per peer), and `sync` messages, sent as the audio they name leaves, let the
 * browser find that constant. With channel audio the same `rtp` addresses the packets the page plays itself.
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
 *
 * Channel audio (docs/performance.md, "Audio on the pose channel"): a browser that asks (`ChannelAudioRequest`) gets
 * the session's audio on this channel instead of the peer's track, Opus-encoded here (`OpusPacketEncoder`) in
 * `CHANNEL_AUDIO_PACKET_MS` packets on the media clock's 20 ms grid, read AHEAD from the speech the clock has queued
 * (`PlayoutClock.queuedAudio`) and riding in the batches that go anyway. This class owns where the session's audio
 * goes: the track, until the current peer's page asks; then the channel (`audio-route`), and the WebRTC output stops
 * feeding the track (`WebRtcOutput.audioToChannel`); a new peer starts on the track again.
 */
import {
  CHANNEL_AUDIO_PACKET_MS,
  type ChannelAudioCodec,
  type FramePose,
  type PoseChannelMessage,
} from '../../client/face-canvas.ts';
import type { FrameRequest } from '../../actors/render/types.ts';
import type { PeerDataChannel } from '../../actors/media/webrtc.ts';
import { MOUTH_LOOKAHEAD_MS } from '../../actors/media/timeline.ts';
import { AUDIO_CHUNK_MS } from '../../actors/media/playout.ts';
import { OpusPacketEncoder, opusEncodes } from '../../actors/audio/opus-encoder.ts';

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

/**
 * How far ahead of the media clock channel audio is sent: each batch carries the queued audio up to this far ahead.
 * At least the poses' lead (`POSE_LEAD_FRAMES`, 160 ms) plus the interval between batches (80 ms), so a packet is
 * with the browser as early as the poses it plays with, and the browser's player, which starts a packet at the
 * clock's time plus its network margin, always has the next ones; a pose batch then carries ~4 packets (~300 bytes).
 * Not more: audio sent ahead is dropped on a barge-in (`flush` `audio`) and counts against `MAX_POSE_BUFFERED_BYTES`.
 */
export const CHANNEL_AUDIO_LEAD_MS = 240;
/**
 * A packet whose samples are not all queued yet waits for them (the rest of a sentence still being synthesised)
 * unless it starts this close to the clock: the next batch may come a batch interval (80 ms) later, and by then the
 * packet would be playing. It goes zero-padded, and again, whole, if the audio lands in it later.
 */
export const CHANNEL_AUDIO_DUE_MS = 100;
/**
 * How far behind the clock channel audio still starts. Speech queued while the event loop was busy leaves in one
 * catch-up tick of the clock (2–4 chunks of 10 ms at once, measured in Chromium under load), so by the next batch its
 * first packets have left already. They are sent all the same (counted late): the browser plays a late first packet of
 * speech after silence whole, moving its anchor (`client/channel-audio.ts`), where skipping them cut the reply's first
 * 10–30 ms. Not further: a packet this late is heard that much late, and the clock re-anchors past `MAX_CATCH_UP_MS`.
 */
export const CHANNEL_AUDIO_CATCH_UP_MS = 100;
/**
 * A message from the browser longer than this is dropped unread: the one message it may send (`ChannelAudioRequest`)
 * is ~30 characters, so anything this long is not one, and parsing it would cost the event loop for nothing.
 */
export const MAX_CHANNEL_REQUEST_CHARS = 256;

/** What the browser needs to know before the first pose (`hello`, less its `type`). */
export type PoseChannelHello = Omit<
  Extract<PoseChannelMessage, { type: 'hello' }>,
  'type' | 'rtpClockRate' | 'channelAudio'
>;

/** What channel audio needs from the session: its media clock's queued speech and its WebRTC output. */
export interface PoseChannelAudio {
  /** The media clock's sample rate (the session's): channel audio is offered only where Opus encodes at it. */
  readonly sampleRate: number;
  /** The speech queued on the media clock between two of its samples (`PlayoutClock.queuedAudio`). */
  queuedAudio(from: number, to: number): { pcm: Int16Array; complete: boolean } | null;
  /**
   * Takes the main peer's audio off its track because its page takes it on `channel` (`WebRtcOutput.audioToChannel`):
   * false when `channel` is not the current peer's.
   */
  routeToChannel(channel: PeerDataChannel): boolean;
}

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
  /** Channel audio packets sent (each `CHANNEL_AUDIO_PACKET_MS`; a packet sent again counts again). */
  sentAudioPackets: number;
  /**
   * Of those, packets sent after some of their speech had left the clock before the tick they went in (the browser
   * may hear their start late, or not at all). Speech after silence, whose first chunk leaves as it is queued, goes in
   * that same tick with that chunk's `sync`: not late.
   */
  lateAudioPackets: number;
  /** Channel audio packets not sent because the channel held `MAX_POSE_BUFFERED_BYTES` already. */
  skippedAudioPackets: number;
}

/** The codec of a well-formed `ChannelAudioRequest` in a text the browser sent; null for anything else. */
export function channelAudioRequest(data: unknown): ChannelAudioCodec | null {
  if (typeof data !== 'string' || data.length > MAX_CHANNEL_REQUEST_CHARS) return null;
  let parsed: unknown;
  try {
    parsed = JSON.parse(data);
  } catch {
    return null;
  }
  if (typeof parsed !== 'object' || parsed === null) return null;
  const { type, codec } = parsed as Record<string, unknown>;
  return type === 'audio' && codec === 'opus' ? codec : null;
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
  private batchAudioPackets = 0;
  private readonly figures: PoseChannelFigures = {
    sentPoses: 0,
    latePoses: 0,
    skippedPoses: 0,
    sentAudioPackets: 0,
    lateAudioPackets: 0,
    skippedAudioPackets: 0,
  };
  /** Whether the `hello` offers channel audio (and a request for it is taken): audio given, at a rate Opus encodes. */
  private readonly offersAudio: boolean;
  /** Where the current peer's audio goes: its track until its page asks for channel audio. */
  private audioRoute: 'track' | 'channel' = 'track';
  /** One encoder for the session's channel audio, made when a page first asks (reset on every gap and barge-in). */
  private encoder: OpusPacketEncoder | null = null;
  /** The next packet (index on the clock's 20 ms grid) not sent yet; null: from the clock's position. */
  private nextPacket: number | null = null;
  /** The last packet encoded: the next one continues its stream only if it follows it (or is it, sent again). */
  private lastEncoded: number | null = null;
  /** The last packet sent zero-padded (its audio was not all queued), with what it held: sent again if audio lands. */
  private padded: { packet: number; pcm: Int16Array } | null = null;

  constructor(
    private readonly hello: PoseChannelHello,
    /** The media clock's position (ms of audio that left): a pose for an earlier time is late. */
    private readonly mediaMs: () => number,
    /** Channel audio; without it (or at a rate Opus does not encode) the `hello` offers none. */
    private readonly audio?: PoseChannelAudio,
  ) {
    this.offersAudio = !!audio && opusEncodes(audio.sampleRate);
  }

  get counts(): Readonly<PoseChannelFigures> {
    return this.figures;
  }

  /** True while a peer's `avatar` channel is open. */
  get open(): boolean {
    return this.channelOpen;
  }

  /** Where the current peer's audio goes (`track` until its page asks for it on the channel). */
  get route(): 'track' | 'channel' {
    return this.audioRoute;
  }

  /**
   * The current peer opened its `avatar` channel: it replaces the previous peer's, gets `hello` once open, and its
   * audio is on its track until its page asks for it on the channel.
   */
  attach(channel: PeerDataChannel): void {
    this.dropBatch();
    this.channel = channel;
    this.channelOpen = false;
    this.bufferedAtMost = 0;
    this.lastSyncMs = -Infinity;
    this.audioRoute = 'track';
    this.restartAudio();
    const greet = () => {
      if (this.channel !== channel || this.channelOpen) return;
      this.channelOpen = true;
      const channelAudio: ChannelAudioCodec[] | undefined = this.offersAudio ? ['opus'] : undefined;
      this.add(
        { type: 'hello', ...this.hello, rtpClockRate: RTP_CLOCK_RATE, ...(channelAudio && { channelAudio }) },
        MAX_CONTROL_BUFFERED_BYTES,
      );
    };
    channel.addEventListener('open', greet);
    if (channel.readyState === 'open') greet();
    channel.addEventListener('close', () => {
      if (this.channel !== channel) return;
      this.channel = null;
      this.channelOpen = false;
    });
    channel.addEventListener('message', (event) => {
      if (this.channel === channel && this.channelOpen) this.browserSent(channel, event.data);
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

  /**
   * Poses from `fromMs` on (all not yet heard: null) are void (the clock's `framesVoid`). Null is a barge-in: channel
   * audio not yet heard is void too (`audio: true`), and what is queued after it starts a fresh stream.
   *
   * New speech voids the poses sent ahead under it (the clock re-asks for them): that flush goes at once, at the end of
   * the enqueue's tick, and the speech's first packets ride with it (`sendBatch`). This is the one extra send of a
   * speech onset, whose first chunk leaves the clock as it is queued.
   */
  flush(fromMs: number | null): void {
    if (!this.channelOpen) return;
    const audio = fromMs === null && this.audioRoute === 'channel';
    if (audio) this.restartAudio();
    this.add(
      fromMs === null
        ? { type: 'flush', ...(audio && { audio }) }
        : { type: 'flush', fromRtp: rtpOfMediaMs(fromMs + MOUTH_LOOKAHEAD_MS) },
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
    this.audioRoute = 'track';
  }

  /**
   * A text from the browser: only a `ChannelAudioRequest` for a codec the `hello` offered does anything, once per peer;
   * anything else is ignored (`channelAudioRequest` reads at most `MAX_CHANNEL_REQUEST_CHARS`).
   */
  private browserSent(channel: PeerDataChannel, data: unknown): void {
    const audio = this.audio;
    if (!audio || !this.offersAudio || this.audioRoute === 'channel') return;
    if (channelAudioRequest(data) !== 'opus') return;
    // The browser must learn of the switch, or it would hear nothing: only when `audio-route` can go.
    if (!this.fits(MAX_CONTROL_BUFFERED_BYTES) || !audio.routeToChannel(channel)) return;
    this.audioRoute = 'channel';
    this.encoder ??= new OpusPacketEncoder(audio.sampleRate, CHANNEL_AUDIO_PACKET_MS);
    this.restartAudio();
    // What the track played stays played: the channel starts with the first packet the clock has not begun.
    this.nextPacket = Math.ceil(this.clockSample(audio) / this.encoder.packetSamples);
    const encoderDelay = Math.round((this.encoder.delaySamples * RTP_CLOCK_RATE) / audio.sampleRate);
    this.add({ type: 'audio-route', route: 'channel', encoderDelay }, MAX_CONTROL_BUFFERED_BYTES);
  }

  /** Channel audio starts afresh from the clock's position: a new peer, a barge-in, a new route. */
  private restartAudio(): void {
    this.nextPacket = null;
    this.lastEncoded = null;
    this.padded = null;
  }

  /**
   * Adds to this tick's batch the channel audio due: every packet from where the channel's audio stands up to
   * `CHANNEL_AUDIO_LEAD_MS` ahead of the clock whose samples are all queued, or which is due
   * (`CHANNEL_AUDIO_DUE_MS`, then zero-padded); and the last padded packet again if audio landed in it.
   */
  private addAudio(): void {
    const audio = this.audio;
    const encoder = this.encoder;
    if (!audio || !encoder || this.audioRoute !== 'channel') return;
    const size = encoder.packetSamples;
    const samplesIn = (ms: number) => (ms * audio.sampleRate) / 1000;
    const clock = this.clockSample(audio);
    const lead = clock + samplesIn(CHANNEL_AUDIO_LEAD_MS);
    const due = clock + samplesIn(CHANNEL_AUDIO_DUE_MS);
    const clockPacket = Math.floor(clock / size);
    // The chunk that left in this tick: its `sync` rides in this batch, so audio in it is timed with it, not late.
    const chunk = samplesIn(AUDIO_CHUNK_MS);
    if (this.padded && this.padded.packet < clockPacket) this.padded = null;
    // Speech that left in a catch-up tick before this batch is still sent (`CHANNEL_AUDIO_CATCH_UP_MS`), from its start.
    const reach = Math.max(0, Math.floor((clock - samplesIn(CHANNEL_AUDIO_CATCH_UP_MS)) / size));
    let packet = Math.max(this.padded?.packet ?? this.nextPacket ?? reach, reach);
    const queuedAt = (index: number) => audio.queuedAudio(index * size, (index + 1) * size);
    while (packet < clockPacket && !queuedAt(packet)) packet++;
    // Only an onset reaches back: speech that went on from before the reach was sent on time, or not at all (a page
    // that stopped reading), and resumes at the clock.
    if (packet < clockPacket && packet === reach && queuedAt(packet - 1)) packet = clockPacket;
    const first = packet;
    const packets: string[] = [];
    let fresh = false;
    let late = 0;
    for (; packet * size < lead; packet++) {
      const queued = queuedAt(packet);
      // Nothing queued here: speech ahead of the clock is contiguous, so nothing further either.
      if (!queued || (!queued.complete && packet * size >= due)) break;
      if (this.padded?.packet === packet && samePcm(this.padded.pcm, queued.pcm)) {
        if (packets.length === 0) continue;
        break;
      }
      // Digital silence (a pause between sentences) is not encoded nor sent: the browser plays silence where nothing
      // came, and the speech after it starts a fresh stream (`fresh`), as after any gap.
      if (queued.complete && !speechIn(queued.pcm, size)) {
        if (packets.length === 0) continue;
        break;
      }
      if (packets.length === 0 && this.lastEncoded !== packet && this.lastEncoded !== packet - 1) {
        // After a gap (or a barge-in, a new route) the stream starts afresh, and the browser's decoder with it.
        encoder.reset();
        fresh = true;
      }
      packets.push(encoder.encode(queued.pcm));
      this.lastEncoded = packet;
      if (speechIn(queued.pcm, clock - chunk - packet * size)) late++;
      this.padded = queued.complete ? null : { packet, pcm: queued.pcm };
      if (!queued.complete) {
        packet++;
        break;
      }
    }
    if (packets.length === 0) return;
    const start = packet - packets.length;
    const message: PoseChannelMessage = {
      type: 'audio',
      rtp: rtpOfMediaMs(start * CHANNEL_AUDIO_PACKET_MS),
      packets,
      ...(fresh && { fresh }),
    };
    if (!this.add(message, MAX_POSE_BUFFERED_BYTES)) {
      // Not sent: the browser's decoder did not see these packets, so the next ones start a fresh stream.
      this.figures.skippedAudioPackets += packets.length;
      this.lastEncoded = null;
      this.padded = null;
      this.nextPacket = first;
      return;
    }
    this.nextPacket = packet;
    this.batchAudioPackets += packets.length;
    this.figures.lateAudioPackets += late;
  }

  /** The media clock's position in samples of the session's audio (what has left it). */
  private clockSample(audio: PoseChannelAudio): number {
    return Math.round((this.mediaMs() * audio.sampleRate) / 1000);
  }

  private sync(mediaMs: number): void {
    this.syncDue = null;
    this.lastSyncMs = mediaMs;
    this.add({ type: 'sync', rtp: rtpOfMediaMs(mediaMs) }, MAX_POSE_BUFFERED_BYTES);
  }

  /** Whether a message added now would wait behind at most `maxBuffered` bytes. */
  private fits(maxBuffered: number): boolean {
    const channel = this.channel;
    return (
      !!channel &&
      this.channelOpen &&
      this.buffered(channel, maxBuffered - this.batchBytes) + this.batchBytes <= maxBuffered
    );
  }

  /**
   * Adds a message to this tick's batch unless more than `maxBuffered` bytes would wait before it; false when skipped.
   * The first message of a tick schedules the batch's send for the end of the tick.
   */
  private add(message: PoseChannelMessage, maxBuffered: number): boolean {
    if (!this.fits(maxBuffered)) return false;
    const text = JSON.stringify(message);
    if (this.batch.length === 0) queueMicrotask(() => this.sendBatch());
    this.batch.push(text);
    this.batchBytes += Buffer.byteLength(text) + 1;
    return true;
  }

  /** Sends this tick's messages as one (the message itself, or a JSON array of them), with the channel audio due. */
  private sendBatch(): void {
    const channel = this.channel;
    if (this.batch.length === 0) return;
    this.addAudio();
    const text = this.batch.length === 1 ? this.batch[0] : `[${this.batch.join(',')}]`;
    const poses = this.batchPoses;
    const audioPackets = this.batchAudioPackets;
    const bytes = this.batchBytes;
    this.dropBatch();
    try {
      if (!channel || !this.channelOpen) throw new Error('closed');
      channel.send(text);
    } catch {
      // Closing under us (the next `close` event forgets it): its poses and audio were not sent after all.
      this.figures.skippedPoses += poses;
      this.figures.skippedAudioPackets += audioPackets;
      return;
    }
    this.figures.sentPoses += poses;
    this.figures.sentAudioPackets += audioPackets;
    this.bufferedAtMost += bytes;
  }

  private dropBatch(): void {
    this.batch.length = 0;
    this.batchBytes = 0;
    this.batchPoses = 0;
    this.batchAudioPackets = 0;
  }

  /**
   * The channel's buffered bytes, or an upper bound on them: read from the channel only when the bound passes
   * `maxBuffered` (what may wait besides this tick's batch; reading only past the whole bound left the bound stuck just
   * below it, and everything skipped, until a control message pushed it over).
   */
  private buffered(channel: PeerDataChannel, maxBuffered: number): number {
    if (this.bufferedAtMost > maxBuffered) this.bufferedAtMost = channel.bufferedAmount;
    return this.bufferedAtMost;
  }
}

/** Whether any of the first `samples` of `pcm` is speech (not a zero). */
function speechIn(pcm: Int16Array, samples: number): boolean {
  for (let i = 0; i < Math.min(samples, pcm.length); i++) if (pcm[i] !== 0) return true;
  return false;
}

function samePcm(a: Int16Array, b: Int16Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}
