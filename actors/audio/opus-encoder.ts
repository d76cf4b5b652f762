/**
 * The service's own Opus encoder for a client-rendered session's audio on the `avatar` data channel (issue 47,
 * `src/sessions/pose-channel.ts`): mono 20 ms packets at the session's sample rate (`channelOpusEncoder`). wrtc's audio track
 * encodes with libwebrtc's Opus at complexity 9 in a thread of its own, plus its RTP path and pacer, and exposes no
 * setting; encoding here at a complexity we choose and sending the packets in the pose batches that go anyway is what
 * takes that cost off a client-rendered session (docs/performance.md, "Audio on the pose channel").
 */
import { Encoder } from '@evan/opus';

/**
 * How channel audio is coded: Opus's CELT layer only (`restricted_lowdelay`) at `CHANNEL_OPUS_BITRATE`, complexity
 * `CHANNEL_OPUS_COMPLEXITY`. Measured with `@evan/opus` on the 20 s speech fixture at 16 kHz in 20 ms packets
 * (`bench/opus-quality.ts`: log-spectral distance per mel band against the input, lower is closer; encode CPU per
 * audio-second; docs/performance.md, "Audio on the pose channel"):
 * - SILK (`voip`, what a WebRTC track's speech uses) at its own ~17 kb/s: complexity 9 7.5 ms / 2.73 dB, 5 5.2 ms /
 *   2.99 dB, 2 3.5 ms / 3.68 dB, 0 1.8 ms / 3.81 dB;
 * - CELT at 32 kb/s: complexity 9 2.8 ms / 1.93 dB, **5 1.7 ms / 2.12 dB**, 2 1.1 ms / 2.29 dB, 0 0.7 ms / 1.77 dB.
 * CELT at 32 kb/s keeps the speech's spectrum closer than SILK at any complexity, for a third of SILK's CPU at the
 * same complexity. SILK is built for lossy low-rate links (a reliable SCTP channel is neither), and 32 kb/s is what a
 * WebRTC audio track sends by default anyway. Complexity 5 rather than 0: 0 turns off CELT's pitch pre-filter, which
 * a listener hears on voiced speech even where the spectral distance does not move (it reads lower at 0).
 */
export const CHANNEL_OPUS_APPLICATION = 'restricted_lowdelay';
export const CHANNEL_OPUS_BITRATE = 32_000;
export const CHANNEL_OPUS_COMPLEXITY = 5;

/** `OPUS_SET_COMPLEXITY`, `OPUS_SET_BITRATE` (opus_defines.h): the request numbers `Encoder.ctl` takes. */
const OPUS_SET_COMPLEXITY = 4010;
const OPUS_SET_BITRATE = 4002;
/** `OPUS_GET_LOOKAHEAD`: the encoder's delay, samples at its rate. */
const OPUS_GET_LOOKAHEAD = 4027;

/**
 * An Opus encoder configured as channel audio is coded (the service's, and the bench's when it compares complexities).
 */
export function channelOpusEncoder(sampleRate: number, complexity = CHANNEL_OPUS_COMPLEXITY): Encoder {
  const encoder = new Encoder({
    sample_rate: sampleRate as 16_000,
    channels: 1,
    application: CHANNEL_OPUS_APPLICATION,
  });
  encoder.ctl(OPUS_SET_COMPLEXITY, complexity);
  encoder.ctl(OPUS_SET_BITRATE, CHANNEL_OPUS_BITRATE);
  return encoder;
}

/** The sample rates Opus encodes at (RFC 6716); a session at another rate gets no channel audio. */
const OPUS_SAMPLE_RATES: readonly number[] = [8_000, 12_000, 16_000, 24_000, 48_000];

/** Whether `OpusPacketEncoder` can encode a session at `sampleRate` without resampling. */
export function opusEncodes(sampleRate: number): boolean {
  return OPUS_SAMPLE_RATES.includes(sampleRate);
}

/** A mono Opus encoder of fixed-length packets; `reset` starts its stream afresh (after a gap or a barge-in). */
export class OpusPacketEncoder {
  /** Samples in one packet at the encoder's rate. */
  readonly packetSamples: number;
  /** The encoder's delay (its lookahead, samples): a packet decodes to the input from this many samples before it. */
  readonly delaySamples: number;
  private readonly encoder: Encoder;

  constructor(
    readonly sampleRate: number,
    packetMs: number,
  ) {
    if (!opusEncodes(sampleRate)) throw new RangeError(`Opus does not encode at ${sampleRate} Hz`);
    this.packetSamples = (sampleRate * packetMs) / 1000;
    this.encoder = channelOpusEncoder(sampleRate);
    this.delaySamples = this.encoder.ctl(OPUS_GET_LOOKAHEAD);
  }

  /** One packet of `packetSamples` samples, base64 (copied out at once: the binding reuses its output buffer). */
  encode(pcm: Int16Array): string {
    if (pcm.length !== this.packetSamples) throw new RangeError(`an Opus packet takes ${this.packetSamples} samples`);
    return Buffer.from(this.encoder.encode(pcm)).toString('base64');
  }

  /** Forgets the stream so far: the next packet starts a new one (its decoder must reset too). */
  reset(): void {
    this.encoder.reset();
  }
}
