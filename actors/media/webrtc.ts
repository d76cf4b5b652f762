import wrtc from '@roamhq/wrtc';
import type { I420Frame } from '../render/types.ts';
import { FrameSendPolicy } from './frame-send-policy.ts';

const { RTCPeerConnection, nonstandard } = wrtc;

/** Non-trickle signaling: the answer must carry candidates, so wait for gathering — but never forever. */
export const ICE_GATHER_TIMEOUT_MS = 3_000;

export class MalformedSdpError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'MalformedSdpError';
  }
}

/** The offer lost its peer while being answered: the session closed, or a newer offer replaced it. */
export class PeerGoneError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'PeerGoneError';
  }
}

/**
 * The client's microphone on the peer (hands-free conversation): an offer whose audio section is `sendrecv`
 * gets a `sendrecv` answer, and what the client sends arrives here through an `RTCAudioSink` as mono 16-bit
 * PCM at the decoder's rate (48 kHz for Opus), in 10 ms buffers. `opened` when a peer with a microphone
 * becomes the session's peer; `closed` when that peer is replaced or closed.
 */
export interface MicrophoneListener {
  opened(): void;
  audio(samples: Int16Array, sampleRate: number): void;
  closed(): void;
}

export interface IceServer {
  urls: string | string[];
  username?: string;
  credential?: string;
}

/**
 * The answer has one audio and one video track; a browser offers two or three sections (audio, video,
 * maybe data). Each further section costs libwebrtc a transceiver, so an offer with dozens is refused.
 */
export const MAX_MEDIA_SECTIONS = 16;

/**
 * Edits the parameters of every Opus payload type's `a=fmtp` line by `edit` (given `''` where the payload type has
 * no fmtp line: a non-empty result adds one right after its rtpmap), keeping the offer's line endings.
 */
function withOpusParameters(sdp: string, edit: (parameters: string) => string): string {
  const eol = sdp.includes('\r\n') ? '\r\n' : '\n';
  const lines = sdp.split(eol);
  const opus = new Set<string>();
  for (const line of lines) {
    const m = /^a=rtpmap:(\d+) opus\/48000/i.exec(line);
    if (m) opus.add(m[1]);
  }
  if (opus.size === 0) return sdp;
  const withFmtp = new Set<string>();
  const out = lines.map((line) => {
    const m = /^a=fmtp:(\d+) (.*)$/.exec(line);
    if (!m || !opus.has(m[1])) return line;
    withFmtp.add(m[1]);
    return `a=fmtp:${m[1]} ${edit(m[2])}`;
  });
  return out
    .flatMap((line) => {
      const m = /^a=rtpmap:(\d+) opus\/48000/i.exec(line);
      const added = m && !withFmtp.has(m[1]) ? edit('') : '';
      return added ? [line, `a=fmtp:${m![1]} ${added}`] : [line];
    })
    .join(eol);
}

/** `parameters` (an fmtp line's `a=b;c=d`) with `name=value` added at the end. */
function addParameter(parameters: string, name: string, value: number): string {
  return parameters ? `${parameters};${name}=${value}` : `${name}=${value}`;
}

/**
 * Asks our Opus encoder for DTX (discontinuous transmission) by adding `usedtx=1` to the offer's Opus
 * parameters before libwebrtc applies it: libwebrtc configures its send codec from the remote description,
 * and `usedtx` is how a receiver says it accepts DTX (RFC 7587). An idle session sends silence; with DTX its
 * Opus encoder takes the digital-silence path and sends one packet per 400 ms instead of 50 a second, and
 * the RTP timestamps run on, so receivers keep their A/V sync (they play comfort noise in the gaps).
 * Offers that already state `usedtx` keep their choice.
 */
export function withOpusDtx(sdp: string): string {
  return withOpusParameters(sdp, (parameters) =>
    /(^|;)\s*usedtx=/.test(parameters) ? parameters : addParameter(parameters, 'usedtx', 1),
  );
}

/** Opus's RTP clock and widest band (RFC 7587): the rate above which `maxplaybackrate` says nothing. */
const OPUS_RTP_RATE = 48_000;

/**
 * Tells our Opus encoder that the session's audio has nothing above `audioRate`'s Nyquist frequency, by
 * `maxplaybackrate` (RFC 7587 §6.1) at that rate: libwebrtc limits its encoder's bandwidth by the receiver's
 * `maxplaybackrate` (16 kHz → wideband, 19 instead of 32 kb/s). A receiver hears the same speech: there is none above
 * 8 kHz in a 16 kHz session. With 24 speaking audio senders, Opus 17.9 → 16.5 ms and the whole sender 35.2 → 33.4 ms
 * CPU per stream-second, speech onset → first audible unchanged (58 ms; `npm run bench -- audio_path`, 4 rounds,
 * docs/performance.md "The audio path").
 * A 48 kHz session, and an offer that states a lower rate, are left as they are.
 */
export function withOpusBandwidth(sdp: string, audioRate: number): string {
  if (audioRate >= OPUS_RTP_RATE) return sdp;
  return withOpusParameters(sdp, (parameters) => {
    const stated = /(^|;)\s*maxplaybackrate=(\d+)/.exec(parameters);
    if (!stated) return addParameter(parameters, 'maxplaybackrate', audioRate);
    if (Number(stated[2]) <= audioRate) return parameters;
    return parameters.replace(/maxplaybackrate=\d+/, `maxplaybackrate=${audioRate}`);
  });
}

/**
 * The most our VP8 encoder sends to one receiver, in kb/s. Uncapped, libwebrtc's bandwidth estimate on a good link
 * climbs to ~1.7 Mb/s for a 512² avatar, and the encoder's CPU follows the bits it has to spend (its time goes to
 * tokenising and packing coefficients), so a video avatar whose head moves in every frame cost the encoder about 2× a
 * photo's (docs/performance.md, "Clip avatars"). A talking head at 512² and 25 fps keeps its face landmarks and
 * identity at 1 Mb/s (`npm run bench -- avatar_fidelity`), and a viewer on a phone link is spared the rest. Not
 * lower: 600 kb/s cut the encoder's CPU by another 20 %, but a real person's mouth then followed the audio less at
 * the viewer (r 0.45 → 0.35–0.39 on one clip, 0.49 → 0.40–0.41 on another, two runs each; docs/performance.md,
 * "Seventeenth session").
 */
export const VIDEO_MAX_BITRATE_KBPS = 1000;

/**
 * Caps what we send on each video section to `VIDEO_MAX_BITRATE_KBPS` by its `b=AS` line, before libwebrtc applies
 * the offer: libwebrtc sizes its send bitrate from the remote description's bandwidth line (RFC 4566 §5.8), which
 * is how a receiver says how much it wants. An offer that asks for less, by `b=AS` (kb/s) or `b=TIAS` (b/s, as
 * Firefox users are told to write it), keeps the least it asked for; the section then says it once, as `b=AS`.
 */
export function withVideoBitrateCap(sdp: string, kbps = VIDEO_MAX_BITRATE_KBPS): string {
  const eol = sdp.includes('\r\n') ? '\r\n' : '\n';
  const sections = sdp.split(new RegExp(`(?=${eol}m=)`));
  return sections
    .map((section) => {
      if (!section.startsWith(`${eol}m=video `)) return section;
      const lines = section.split(eol);
      let wanted = kbps;
      for (const line of lines) {
        const as = /^b=AS:(\d+)$/.exec(line);
        const tias = /^b=TIAS:(\d+)$/.exec(line);
        if (as) wanted = Math.min(wanted, Number(as[1]));
        if (tias) wanted = Math.min(wanted, Math.floor(Number(tias[1]) / 1000));
      }
      const isBandwidth = (line: string) => line.startsWith('b=AS:') || line.startsWith('b=TIAS:');
      const kept = lines.filter((line) => !isBandwidth(line));
      if (lines.length - kept.length === 1 && lines.includes(`b=AS:${wanted}`)) return section;
      // RFC 4566 order: m=, i=, c=, then b=.
      let at = 2;
      while (at < kept.length && (kept[at].startsWith('i=') || kept[at].startsWith('c='))) at++;
      kept.splice(at, 0, `b=AS:${wanted}`);
      return kept.join(eol);
    })
    .join('');
}

/**
 * The offer as we apply it: Opus DTX asked for, Opus's band limited to what a session at `audioRate` has (omitted:
 * full band), the video capped.
 */
export function offerAsApplied(sdp: string, audioRate = OPUS_RTP_RATE): string {
  return withVideoBitrateCap(withOpusBandwidth(withOpusDtx(sdp), audioRate));
}

/** Cheap structural checks before libwebrtc sees the text: it must be an SDP offer with media sections. */
export function assertPlausibleSdp(sdp: string): void {
  if (sdp.length > 64 * 1024) throw new MalformedSdpError('SDP is larger than 64 KiB');
  if (!sdp.startsWith('v=0')) throw new MalformedSdpError('SDP must start with "v=0"');
  const mediaSections = sdp.match(/\r?\nm=/g)?.length ?? 0;
  if (!/\r?\nm=(audio|video|application) /.test(sdp)) throw new MalformedSdpError('SDP has no media section');
  if (mediaSections > MAX_MEDIA_SECTIONS)
    throw new MalformedSdpError(`SDP has ${mediaSections} media sections; at most ${MAX_MEDIA_SECTIONS} are answered`);
}

/**
 * The session's outgoing media: one audio and one video source that live as long as the session, and
 * at most one peer connection at a time (a new offer replaces the previous peer).
 *
 * Offers are answered one at a time: libwebrtc calls on a peer that a concurrent offer just closed fail
 * with InvalidStateError. The offer being answered always finishes (200, then a newer offer replaces
 * its peer); an offer still waiting its turn when a newer one arrives is refused at once with
 * `PeerGoneError` (409), since only the newest would survive anyway. So at most one offer runs and
 * one waits, and the wait is bounded by one negotiation (`ICE_GATHER_TIMEOUT_MS` plus a few ms).
 */
/**
 * The session's video source: rendered frames carry no sensor noise, so libwebrtc's VP8 temporal denoiser (on by
 * default for a camera-like source) only costs CPU — 17–23 % of the encoder's time at 512² 25 fps, for a still face
 * with a moving mouth as for a moving head (measured with three senders side by side, docs/performance.md).
 */
export const VIDEO_SOURCE_INIT = { isScreencast: false, needsDenoising: false } as const;

/** The label of a client-rendered session's data channel, on which the service sends the face's poses (issue 47). */
export const POSE_CHANNEL_LABEL = 'avatar';

/** A data channel of the current peer, as the output hands it on (the structural part of wrtc's RTCDataChannel). */
export interface PeerDataChannel {
  readonly label: string;
  readonly readyState: string;
  readonly bufferedAmount: number;
  send(data: string): void;
  close(): void;
  addEventListener(type: 'open' | 'close', listener: () => void): void;
  /** A message from the browser: `data` a string for text, binary otherwise. */
  addEventListener(type: 'message', listener: (event: { data: unknown }) => void): void;
}

export interface WebRtcOutputOptions {
  /**
   * The rate `pushAudio` is fed at (the session's sample rate; default 48 kHz): offers are applied with Opus's band
   * limited to it (`withOpusBandwidth`).
   */
  audioRate?: number;
  /**
   * Whether the main peer gets the video track (default true). A client-rendered session's viewer draws the face
   * itself: its answer has no video (an offered video section is answered inactive) and nothing is encoded for it.
   */
  video?: boolean;
  /** A data channel labelled `POSE_CHANNEL_LABEL` that the current peer opened. */
  onPoseChannel?: (channel: PeerDataChannel) => void;
  /** The send-only feeds (WHEP viewers, WHIP outputs) came or went: `count` is how many there are now. */
  onFeedsChanged?: (count: number) => void;
}

export class WebRtcOutput {
  private readonly audioSource = new nonstandard.RTCAudioSource();
  private readonly videoSource = new nonstandard.RTCVideoSource(VIDEO_SOURCE_INIT);
  private readonly sendPolicy = new FrameSendPolicy();
  private plainFrame: Uint8Array | null = null;
  private peer: InstanceType<typeof RTCPeerConnection> | null = null;
  private tracks: MediaStreamTrack[] = [];
  private closed = false;
  /** Settles when the offer being answered is done (either way). */
  private negotiation: Promise<unknown> = Promise.resolve();
  /** Wakes the offer waiting its turn so it can give way to a newer one or to close(). */
  private wakeWaitingOffer: (() => void) | null = null;
  /** Ends an ICE-gathering wait at once when the output closes. */
  private readonly closing = new AbortController();
  private micListener: MicrophoneListener | null = null;
  /** The current peer's microphone sink, if its offer sent audio. */
  private micSink: { stop(): void } | null = null;
  /**
   * Send-only peers beside the main one (WHEP viewers, WHIP outputs), each fed by tracks of the same two sources:
   * one media clock for all. Each entry is the feed's close, called when the output closes.
   */
  private readonly feeds = new Set<() => void>();
  /** The current peer's `avatar` data channel, once it opened one (`onPoseChannel`). */
  private poseChannel: PeerDataChannel | null = null;
  /**
   * The current peer's page takes the session's audio on its `avatar` channel (`audioToChannel`): its track gets
   * none. Until the peer is replaced.
   */
  private mainAudioOnChannel = false;

  constructor(
    private readonly iceServers: IceServer[] = [],
    private readonly options: WebRtcOutputOptions = {},
  ) {}

  /** An offer from a peer of this output's sources as libwebrtc is to apply it (`offerAsApplied`). */
  offerAsApplied(sdp: string): string {
    return offerAsApplied(sdp, this.options.audioRate);
  }

  /** Send-only feeds beside the main peer (WHEP viewers, WHIP outputs). */
  get feedCount(): number {
    return this.feeds.size;
  }

  get connected(): boolean {
    return this.peer !== null && this.peer.connectionState === 'connected';
  }

  /** Who hears the client's microphone (one listener; the session's voice input). */
  onMicrophone(listener: MicrophoneListener | null): void {
    this.micListener = listener;
  }

  /** True while the current peer carries the client's microphone. */
  get hasMicrophone(): boolean {
    return this.micSink !== null;
  }

  /** Whether anyone receives the sources: the main peer or a send-only feed. Nobody: nothing is encoded. */
  private get fed(): boolean {
    return this.peer !== null || this.feeds.size > 0;
  }

  /**
   * The main peer's page takes the session's audio on `channel` instead of its track (a client-rendered session's
   * channel audio; the decision is `PoseChannel`'s, `src/sessions/pose-channel.ts`): from now on the audio source is
   * fed only while a send-only feed needs it. False, and nothing changes, when `channel` is not the current peer's.
   * A new peer starts on its track again.
   */
  audioToChannel(channel: PeerDataChannel): boolean {
    if (this.closed || !this.peer || channel !== this.poseChannel) return false;
    this.mainAudioOnChannel = true;
    return true;
  }

  /**
   * Feeds the audio source, whose tracks are the main peer's and every send-only feed's: skipped while nobody
   * receives it, or while the main peer takes its audio on its channel and no feed exists (wrtc's Opus encoder, RTP
   * path and pacer then cost nothing for it).
   */
  pushAudio(samples: Int16Array, sampleRate: number): void {
    if (this.closed || !this.fed) return;
    if (this.mainAudioOnChannel && this.feeds.size === 0) return;
    this.audioSource.onData({
      samples,
      sampleRate,
      bitsPerSample: 16,
      channelCount: 1,
      numberOfFrames: samples.length,
    });
  }

  /**
   * Sends a frame now — unless `FrameSendPolicy` (the one owner of which frames are sent) skips it: an idle repeat
   * of the last picture sent, outside a turn. When frames go out is the media clock's decision
   * (`actors/media/playout.ts`), video delay included.
   */
  pushVideo(frame: I420Frame): void {
    if (this.closed || !this.fed) return;
    if (!this.sendPolicy.admit(frame)) return;
    this.videoSource.onFrame(frame.data.buffer instanceof SharedArrayBuffer ? this.unshared(frame) : frame);
  }

  /**
   * wrtc refuses frames in shared memory (the render pool's reused buffers) and copies every frame it takes
   * before returning, so one plain buffer per output, rewritten per frame, carries them (~20 µs at 512²).
   */
  private unshared(frame: I420Frame): I420Frame {
    if (this.plainFrame?.length !== frame.data.length) this.plainFrame = new Uint8Array(frame.data.length);
    this.plainFrame.set(frame.data);
    return { width: frame.width, height: frame.height, data: this.plainFrame };
  }

  /** A turn started: every frame is sent, repeats too, until it ends (`FrameSendPolicy`). */
  turnStarted(): void {
    this.sendPolicy.turnStarted();
  }

  /** A turn ended: idle repeats are skipped again after `STEADY_TAIL_MS` (`FrameSendPolicy`). */
  turnEnded(): void {
    this.sendPolicy.turnEnded();
  }

  /** Frames not sent because they repeated the previous one (an idle avatar between breaths and blinks). */
  get unchangedFramesSkipped(): number {
    return this.sendPolicy.skipped;
  }

  /**
   * Answers an offer (non-trickle: the answer carries the candidates). `MalformedSdpError` when the text
   * is not an SDP offer or libwebrtc rejects it (the current peer stays connected); `PeerGoneError` when
   * the output closed or a newer offer superseded this one while it waited.
   */
  async answer(offerSdp: string, signal?: AbortSignal): Promise<{ sdp: string; type: 'answer' }> {
    assertPlausibleSdp(offerSdp);
    if (this.closed) throw new PeerGoneError('media output closed');
    this.wakeWaitingOffer?.();
    let superseded = false;
    const wake = new Promise<void>((resolve) => {
      this.wakeWaitingOffer = () => {
        superseded = true;
        resolve();
      };
    });
    await Promise.race([this.negotiation, wake]);
    if (this.closed) throw new PeerGoneError('media output closed');
    if (superseded) throw new PeerGoneError('superseded by a newer offer');
    this.wakeWaitingOffer = null;
    if (signal?.aborted) throw new PeerGoneError('the client went away before its offer was answered');
    const answer = this.negotiate(offerSdp, signal);
    this.negotiation = answer.catch(() => undefined);
    return answer;
  }

  /**
   * An audio and a video track of the session's sources for a send-only peer beside the main one (a WHEP viewer,
   * a WHIP output): the same media clock as the main peer. `onClosed` runs when the output closes (the session
   * ends); `release` stops the tracks and forgets the feed (idempotent). `PeerGoneError` once closed.
   */
  openFeed(onClosed: () => void): {
    tracks: MediaStreamTrack[];
    stream: MediaStream;
    release(): void;
    firstPicture(): void;
  } {
    if (this.closed) throw new PeerGoneError('media output closed');
    const tracks = [this.audioSource.createTrack(), this.videoSource.createTrack()];
    const stream = new wrtc.MediaStream(tracks) as MediaStream;
    let released = false;
    const release = (): void => {
      if (released) return;
      released = true;
      this.feeds.delete(onClosed);
      for (const track of tracks) track.stop();
      this.options.onFeedsChanged?.(this.feeds.size);
    };
    this.feeds.add(onClosed);
    this.options.onFeedsChanged?.(this.feeds.size);
    // A new receiver's first picture must not wait for the avatar to move, and its stream starts steady.
    this.sendPolicy.viewerStarted();
    return { tracks, stream, release, firstPicture: () => this.sendPolicy.viewerStarted() };
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.closing.abort();
    this.wakeWaitingOffer?.();
    this.closePeer();
    for (const closeFeed of [...this.feeds]) closeFeed();
    this.feeds.clear();
    this.sendPolicy.close();
  }

  /** One offer/answer exchange; the new peer replaces the current one only once the offer proved answerable. */
  private async negotiate(offerSdp: string, signal?: AbortSignal): Promise<{ sdp: string; type: 'answer' }> {
    const peer = new RTCPeerConnection({ iceServers: this.iceServers });
    const audioTrack = this.audioSource.createTrack();
    // Without a local video track an offered video section is answered `inactive`: nothing is encoded for this peer.
    const tracks = this.options.video === false ? [audioTrack] : [audioTrack, this.videoSource.createTrack()];
    const discard = () => {
      for (const track of tracks) track.stop();
      peer.close();
    };
    const stream = new wrtc.MediaStream(tracks);
    for (const track of tracks) peer.addTrack(track, stream);
    // The pose channel opens once the peer is connected, by which time this peer is the session's (or replaced).
    const onPoseChannel = this.options.onPoseChannel;
    if (onPoseChannel) {
      peer.ondatachannel = (event: { channel: PeerDataChannel }) => {
        if (this.peer === peer && event.channel.label === POSE_CHANNEL_LABEL) {
          // A channel opened again starts on the track, as `PoseChannel.attach` does.
          this.poseChannel = event.channel;
          this.mainAudioOnChannel = false;
          onPoseChannel(event.channel);
        } else event.channel.close();
      };
    }
    // A `sendrecv` audio section: the client's microphone. It is listened to once this peer is the session's.
    let microphone: MediaStreamTrack | null = null;
    peer.ontrack = (event: { track: MediaStreamTrack }) => {
      if (event.track.kind === 'audio') microphone = event.track;
    };
    try {
      await peer.setRemoteDescription({ type: 'offer', sdp: this.offerAsApplied(offerSdp) });
    } catch (error) {
      discard();
      throw this.closed
        ? new PeerGoneError('media output closed')
        : new MalformedSdpError(`SDP offer rejected: ${(error as Error).message}`);
    }
    try {
      await peer.setLocalDescription(await peer.createAnswer());
    } catch (error) {
      // The offer parsed but nothing in it can be answered (no codec, transport or direction we share).
      discard();
      throw this.closed
        ? new PeerGoneError('media output closed')
        : new MalformedSdpError(`SDP offer cannot be answered: ${(error as Error).message}`);
    }
    if (this.closed) {
      discard();
      throw new PeerGoneError('media output closed');
    }
    this.closePeer();
    this.peer = peer;
    this.tracks = tracks;
    if (microphone) this.listenToMicrophone(microphone);
    // The new peer's first picture must not wait for the avatar to move, nor once it is connected, and its stream
    // starts steady (`STEADY_START_MS`).
    this.sendPolicy.viewerStarted();
    peer.addEventListener('connectionstatechange', () => {
      if (this.peer === peer && peer.connectionState === 'connected') this.sendPolicy.viewerStarted();
    });
    await waitForIceGathering(peer, signal ? AbortSignal.any([signal, this.closing.signal]) : this.closing.signal);
    // A closed peer's description is not read: libwebrtc can crash on it (node-webrtc #696).
    if (this.peer !== peer) throw new PeerGoneError('media output closed');
    const local = peer.localDescription;
    if (!local) throw new PeerGoneError('media output closed');
    return { sdp: local.sdp, type: 'answer' };
  }

  private listenToMicrophone(track: MediaStreamTrack): void {
    const sink = new nonstandard.RTCAudioSink(track);
    this.micSink = sink;
    sink.ondata = (data: { samples: Int16Array; sampleRate: number; channelCount?: number }) => {
      if (this.micSink !== sink) return;
      this.micListener?.audio(downmix(data.samples, data.channelCount ?? 1), data.sampleRate);
    };
    this.micListener?.opened();
  }

  private closePeer(): void {
    if (this.micSink) {
      this.micSink.stop();
      this.micSink = null;
      this.micListener?.closed();
    }
    for (const track of this.tracks) track.stop();
    this.tracks = [];
    this.poseChannel = null;
    this.mainAudioOnChannel = false;
    if (this.peer) {
      this.peer.close();
      this.peer = null;
    }
  }
}

/** Interleaved multi-channel PCM to mono (average); mono passes through as is. */
function downmix(samples: Int16Array, channels: number): Int16Array {
  if (channels <= 1) return samples;
  const frames = Math.floor(samples.length / channels);
  const mono = new Int16Array(frames);
  for (let i = 0; i < frames; i++) {
    let sum = 0;
    for (let c = 0; c < channels; c++) sum += samples[i * channels + c];
    mono[i] = Math.round(sum / channels);
  }
  return mono;
}

export function waitForIceGathering(peer: InstanceType<typeof RTCPeerConnection>, signal?: AbortSignal): Promise<void> {
  if (peer.iceGatheringState === 'complete' || signal?.aborted) return Promise.resolve();
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      peer.removeEventListener('icegatheringstatechange', onChange);
      signal?.removeEventListener('abort', done);
      resolve();
    };
    const onChange = () => {
      if (peer.iceGatheringState === 'complete') done();
    };
    const timer = setTimeout(done, ICE_GATHER_TIMEOUT_MS);
    peer.addEventListener('icegatheringstatechange', onChange);
    signal?.addEventListener('abort', done, { once: true });
  });
}
