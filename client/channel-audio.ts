// The player of a client-rendered session's audio when it comes on the `avatar` data channel (issue 47, "audio on the
// pose channel", docs/embedding.md): WebCodecs decodes each Opus packet; an AudioWorklet plays the samples from a ring
// buffer addressed by the packets' rtp (the poses' clock), on this page's AudioContext clock. rtp R plays at context
// frame R + D; D comes from the service's `sync` messages (`sync`). What is heard now is therefore known exactly, and
// the pose stream draws the pose of that rtp (`heardRtp`).
import { CHANNEL_AUDIO_PACKET_MS, rtpDiff, wrapRtp, type PoseChannelMessage } from './face-canvas.ts';

/** The rate of the pose/audio rtp clock and of the player's AudioContext, so that one context frame is one rtp tick. */
export const CHANNEL_AUDIO_RATE = 48_000;
const PACKET_TICKS = (CHANNEL_AUDIO_RATE * CHANNEL_AUDIO_PACKET_MS) / 1000;
/** What the page asks WebCodecs to decode: the service's mono Opus, decoded at the context's rate. */
export const CHANNEL_AUDIO_DECODER: AudioDecoderConfig = {
  codec: 'opus',
  sampleRate: CHANNEL_AUDIO_RATE,
  numberOfChannels: 1,
};
/**
 * The most encoder delay the player takes from the service (`audio-route` `encoderDelay`, rtp ticks): libopus' lookahead
 * is 2.5 ms (CELT) to 6.5 ms (SILK); 20 ms bounds a wrong value's effect to one packet.
 */
export const MAX_ENCODER_DELAY_TICKS = 960;
/**
 * Added to the earliest arrival of the service's `sync`s (`sync`): the service's send jitter (its event loop, the
 * SCTP path) plus the decode and the message to the worklet, so that audio sent "due at once" (speech after
 * silence) still lands before its slot. Raised when a packet is late anyway (`MAX_ANCHOR_MARGIN_MS`).
 */
export const ANCHOR_MARGIN_MS = 40;
/** How far late packets may raise the margin: beyond this the network is too poor for any lip sync to be kept. */
export const MAX_ANCHOR_MARGIN_MS = 250;
/** Each late packet raises the margin by its lateness and this much more (one packet), for the next anchor. */
const LATE_MARGIN_STEP_MS = CHANNEL_AUDIO_PACKET_MS;
/**
 * Syncs whose arrival D is taken from (the minimum): 2 s at the service's 12.5 a second, so a stall of the page or the
 * service (which makes arrivals late, never early) does not move it.
 */
export const ANCHOR_SYNCS_KEPT = 25;
/**
 * The worklet's ring buffer, in frames (a power of two): 5.5 s at 48 kHz (1 MB of Float32), far more than the
 * service sends ahead (`CHANNEL_AUDIO_LEAD_MS`, 240 ms); a packet further ahead than this is dropped.
 */
export const RING_FRAMES = 2 ** 18;
/**
 * Packets waiting in the decoder: a page that cannot keep up (a background tab) drops what is beyond, rather than
 * queueing decodes; 2 s of 20 ms packets, far more than one batch's ~5.
 */
export const MAX_DECODE_QUEUE = 100;
/** A channel `audio` message with more packets than this is refused as a whole (the service sends ≤ ~12 per batch). */
export const MAX_PACKETS_PER_MESSAGE = 50;

/**
 * The worklet's processor, as source: it reaches the page inside the client bundle (a Blob URL), so embedding pages
 * need no second file. Messages: `anchor` (D), `write` (samples from an rtp), `flush` (everything not yet played).
 * It plays the ring at `currentFrame − D`, zeroing what it played, so a slot never written plays silence.
 */
const PROCESSOR_SOURCE = `
const MASK = ${RING_FRAMES - 1};
class ChannelAudioProcessor extends AudioWorkletProcessor {
  constructor() {
    super();
    this.ring = new Float32Array(${RING_FRAMES});
    this.offset = null;
    this.port.onmessage = (event) => this.receive(event.data);
  }
  receive(message) {
    if (message.type === 'anchor') this.offset = message.offset;
    else if (message.type === 'flush') this.ring.fill(0);
    else if (message.type === 'write' && this.offset !== null) this.write(message.rtp, message.samples);
  }
  write(rtp, samples) {
    const playhead = currentFrame - this.offset;
    const from = Math.max(0, Math.min(samples.length, playhead - rtp));
    const to = Math.min(samples.length, playhead + MASK - rtp);
    for (let i = from; i < to; i++) this.ring[(rtp + i) & MASK] = samples[i];
    if (from > 0) this.port.postMessage({ type: 'late', rtp, frames: from, ticks: playhead - rtp });
  }
  process(inputs, outputs) {
    const out = outputs[0];
    if (this.offset === null || out.length === 0) return true;
    const first = out[0];
    const start = currentFrame - this.offset;
    for (let i = 0; i < first.length; i++) {
      const slot = (start + i) & MASK;
      first[i] = this.ring[slot];
      this.ring[slot] = 0;
    }
    for (let c = 1; c < out.length; c++) out[c].set(first);
    return true;
  }
}
registerProcessor('channel-audio', ChannelAudioProcessor);
`;

/** The worklet module, added once per AudioContext. */
const workletModules = new WeakMap<BaseAudioContext, Promise<void>>();
function addProcessor(context: AudioContext): Promise<void> {
  let loaded = workletModules.get(context);
  if (!loaded) {
    const url = URL.createObjectURL(new Blob([PROCESSOR_SOURCE], { type: 'text/javascript' }));
    loaded = context.audioWorklet.addModule(url).finally(() => URL.revokeObjectURL(url));
    workletModules.set(context, loaded);
  }
  return loaded;
}

/**
 * Whether this browser can play channel audio: WebCodecs' Opus decoder and an AudioWorklet (a secure context).
 * A browser that cannot keeps the audio track (the service's default).
 */
export async function channelAudioSupported(): Promise<boolean> {
  if (typeof AudioDecoder === 'undefined' || typeof AudioWorkletNode === 'undefined') return false;
  try {
    return (await AudioDecoder.isConfigSupported(CHANNEL_AUDIO_DECODER)).supported === true;
  } catch {
    return false;
  }
}

/**
 * The AudioContext channel audio plays on: at the rtp clock's rate. Create it (or resume it) in the user gesture
 * that starts the session, as browsers' autoplay policies ask; null where the browser has no Web Audio.
 */
export function channelAudioContext(existing: AudioContext | null): AudioContext | null {
  if (typeof AudioContext === 'undefined') return null;
  const context =
    existing && existing.state !== 'closed' ? existing : new AudioContext({ sampleRate: CHANNEL_AUDIO_RATE });
  if (context.state === 'suspended') void context.resume().catch(() => undefined);
  return context;
}

export interface ChannelAudioFigures {
  /** Packets received, decoded and written to the worklet. */
  packets: number;
  decoded: number;
  /** Packets refused: before the first anchor, beyond the decode queue, or not decodable. */
  dropped: number;
  /** Packets that reached the worklet after (part of) their slot had played. */
  late: number;
  /** Speech onsets (the first audio after silence) decoded after their slot: D moved for them (`write`). */
  lateOnsets: number;
  flushes: number;
  /** D: rtp R plays at context frame R + D (the rtp unwrapped from the first seen); null before the first `sync`. */
  offset: number | null;
  /** The margin in D over the earliest `sync` arrival, ms. */
  marginMs: number;
}

/**
 * WebCodecs timestamps are µs and a decoder may derive its outputs' from the first input's plus the samples decoded:
 * the rtp (unwrapped) as µs, exact both ways (a 20 ms packet is exactly 20 000 µs).
 */
const microsecondsOf = (rtp: number) => Math.round((rtp * 1e6) / CHANNEL_AUDIO_RATE);
const rtpOf = (microseconds: number) => Math.round((microseconds * CHANNEL_AUDIO_RATE) / 1e6);

/**
 * Plays a session's channel audio on `context` (`PoseChannelMessage` `audio`, `flush` `audio`, `sync`). `output` is
 * what is heard (connected to the context's destination): tap it to measure what the page plays. `close()` stops it.
 */
export class ChannelAudioPlayer {
  readonly figures: ChannelAudioFigures = {
    packets: 0,
    decoded: 0,
    dropped: 0,
    late: 0,
    lateOnsets: 0,
    flushes: 0,
    offset: null,
    marginMs: ANCHOR_MARGIN_MS,
  };
  /** What is heard: the worklet's output, into the context's destination. */
  readonly output: GainNode;
  /** Resolves when the worklet is loaded and connected (packets before it are dropped). */
  readonly ready: Promise<void>;
  private node: AudioWorkletNode | null = null;
  private decoder: AudioDecoder | null = null;
  /** The rtp (unwrapped) of the packet that would continue the current decoder's run. */
  private decoderNext = 0;
  /** Each flush starts a new generation: decodes of an older one are dropped on output. */
  private generation = 0;
  /** The last rtp seen, unwrapped (the rtp clock wraps at 2^32, every 25 h at 48 kHz). */
  private lastRtp: number | null = null;
  /** Arrivals of recent syncs: context frame at arrival − unwrapped rtp. */
  private readonly arrivals: number[] = [];
  /** The end (unwrapped rtp) of the latest audio written: while the playhead is before it, D stays. */
  private bufferedTo = -Infinity;
  /**
   * The service's Opus encoder delay (`setEncoderDelay`): a packet stamped rtp R decodes to the audio of R − this on,
   * so it is written that much earlier and the voice plays exactly at its rtp, with the mouth drawn for it.
   */
  private encoderDelayTicks = 0;
  private closed = false;

  constructor(private readonly context: AudioContext) {
    this.output = context.createGain();
    this.output.connect(context.destination);
    this.ready = addProcessor(context).then(() => {
      if (this.closed) return;
      this.node = new AudioWorkletNode(context, 'channel-audio', {
        numberOfInputs: 0,
        numberOfOutputs: 1,
        outputChannelCount: [1],
      });
      this.node.port.onmessage = (event: MessageEvent<{ type: string; ticks: number }>) => this.onLate(event.data);
      this.node.connect(this.output);
      if (this.figures.offset !== null) this.node.port.postMessage({ type: 'anchor', offset: this.figures.offset });
    });
  }

  /** The service's clock is at `rtp` now: one arrival for the anchor; re-anchored while nothing is buffered. */
  sync(rtp: number): void {
    if (this.closed) return;
    const arrival = Math.round(this.context.currentTime * CHANNEL_AUDIO_RATE) - this.unwrap(rtp);
    this.arrivals.push(arrival);
    if (this.arrivals.length > ANCHOR_SYNCS_KEPT) this.arrivals.shift();
    if (this.figures.offset === null || this.playhead() >= this.bufferedTo) this.anchor();
  }

  /** The service's encoder delay (`audio-route` `encoderDelay`, rtp ticks; anything not in 0…`MAX_ENCODER_DELAY_TICKS`: 0). */
  setEncoderDelay(ticks: unknown): void {
    this.encoderDelayTicks =
      typeof ticks === 'number' && Number.isInteger(ticks) && ticks >= 0 && ticks <= MAX_ENCODER_DELAY_TICKS
        ? ticks
        : 0;
  }

  /** A channel `audio` message: decoded, then written at its rtp (a packet sent again overwrites the first). */
  receive(message: Extract<PoseChannelMessage, { type: 'audio' }>): void {
    if (this.closed || !Array.isArray(message.packets) || message.packets.length > MAX_PACKETS_PER_MESSAGE) return;
    this.figures.packets += message.packets.length;
    if (this.figures.offset === null || !this.node) {
      this.figures.dropped += message.packets.length;
      return;
    }
    let rtp = this.unwrap(message.rtp);
    // The encoder started afresh here, or the packets do not continue the decoder's (a re-sent packet): a new
    // decoder (the old one finishes what it holds). Each decoder so sees one contiguous run, which is what its
    // output timestamps assume.
    if (this.decoder && (message.fresh || rtp !== this.decoderNext)) this.retireDecoder();
    const decoder = (this.decoder ??= this.newDecoder());
    for (const packet of message.packets) {
      if (decoder.decodeQueueSize >= MAX_DECODE_QUEUE || typeof packet !== 'string') this.figures.dropped++;
      else {
        try {
          const data = Uint8Array.from(atob(packet), (c) => c.charCodeAt(0));
          decoder.decode(new EncodedAudioChunk({ type: 'key', timestamp: microsecondsOf(rtp), data }));
        } catch {
          this.figures.dropped++;
        }
      }
      rtp += PACKET_TICKS;
    }
    this.decoderNext = rtp;
  }

  /** Barge-in (`flush` `audio: true`): everything not yet heard goes, including what is still being decoded. */
  flush(): void {
    if (this.closed) return;
    this.figures.flushes++;
    this.generation++;
    this.closeDecoder();
    this.bufferedTo = -Infinity;
    this.node?.port.postMessage({ type: 'flush' });
    this.anchor();
  }

  /** The rtp (wrapped, the poses' clock) heard now at the context's output; null before the first anchor. */
  heardRtp(): number | null {
    const offset = this.figures.offset;
    if (offset === null) return null;
    const stamp = this.context.getOutputTimestamp?.();
    const now = performance.now();
    const seconds =
      stamp?.contextTime !== undefined && stamp.performanceTime !== undefined && stamp.performanceTime > 0
        ? stamp.contextTime + Math.max(0, now - stamp.performanceTime) / 1000
        : this.context.currentTime - (this.context.outputLatency || 0) - (this.context.baseLatency || 0);
    return wrapRtp(Math.round(seconds * CHANNEL_AUDIO_RATE) - offset);
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.closeDecoder();
    this.node?.disconnect();
    this.node?.port.close();
    this.node = null;
    this.output.disconnect();
  }

  /** The rtp being rendered now (unwrapped): what the worklet plays next. */
  private playhead(): number {
    return Math.round(this.context.currentTime * CHANNEL_AUDIO_RATE) - (this.figures.offset ?? 0);
  }

  /** D = the earliest recent arrival + the margin. */
  private anchor(): void {
    if (this.arrivals.length === 0) return;
    this.setOffset(Math.min(...this.arrivals) + this.marginTicks());
  }

  private marginTicks(): number {
    return Math.round((this.figures.marginMs * CHANNEL_AUDIO_RATE) / 1000);
  }

  private setOffset(offset: number): void {
    if (offset === this.figures.offset) return;
    this.figures.offset = offset;
    this.node?.port.postMessage({ type: 'anchor', offset });
  }

  /** A packet landed after its slot: the next anchor keeps a larger margin. */
  private onLate(message: { type: string; ticks: number }): void {
    if (message?.type !== 'late') return;
    this.figures.late++;
    const lateMs = (message.ticks * 1000) / CHANNEL_AUDIO_RATE;
    this.figures.marginMs = Math.min(MAX_ANCHOR_MARGIN_MS, this.figures.marginMs + lateMs + LATE_MARGIN_STEP_MS);
  }

  private newDecoder(): AudioDecoder {
    const generation = this.generation;
    const decoder = new AudioDecoder({
      output: (data) => this.write(data, generation),
      error: () => {
        if (this.decoder === decoder) this.decoder = null;
      },
    });
    decoder.configure(CHANNEL_AUDIO_DECODER);
    return decoder;
  }

  private write(data: AudioData, generation: number): void {
    try {
      if (this.closed || generation !== this.generation || !this.node) return;
      const samples = new Float32Array(data.numberOfFrames);
      data.copyTo(samples, { planeIndex: 0, format: 'f32-planar' });
      const rtp = rtpOf(data.timestamp) - this.encoderDelayTicks;
      // The first audio after silence (nothing buffered) that came after its slot: the service sent a speech onset
      // late (its event loop was busy as the speech was queued). D moves now, before anything is heard, so the onset
      // plays whole, the margin after now, and the poses follow; D goes back at the next silence (`sync`).
      if (this.playhead() >= this.bufferedTo) {
        const onTime = Math.round(this.context.currentTime * CHANNEL_AUDIO_RATE) - rtp + this.marginTicks();
        if (onTime > this.figures.offset!) {
          this.figures.lateOnsets++;
          this.setOffset(onTime);
        }
      }
      this.bufferedTo = Math.max(this.bufferedTo, rtp + samples.length);
      this.figures.decoded++;
      this.node.port.postMessage({ type: 'write', rtp, samples }, [samples.buffer]);
    } finally {
      data.close();
    }
  }

  /** The decoder before a `fresh` packet: finishes what it holds, then goes. */
  private retireDecoder(): void {
    const decoder = this.decoder!;
    this.decoder = null;
    decoder.flush().then(
      () => decoder.close(),
      () => undefined,
    );
  }

  private closeDecoder(): void {
    if (this.decoder && this.decoder.state !== 'closed') this.decoder.close();
    this.decoder = null;
  }

  /** The rtp unwrapped around the last one seen (so the ring and D never see the 2^32 wrap). */
  private unwrap(rtp: number): number {
    if (this.lastRtp === null) return (this.lastRtp = rtp);
    return (this.lastRtp += rtpDiff(rtp, this.lastRtp));
  }
}
