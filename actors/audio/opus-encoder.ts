/**
 * The service's own Opus encoder for a client-rendered session's audio on the `avatar` data channel (issue 47,
 * `src/sessions/pose-channel.ts`): mono 20 ms packets at the session's sample rate, VOIP mode. wrtc's audio track
 * encodes with libwebrtc's Opus at complexity 9 in a thread of its own, plus its RTP path and pacer, and exposes no
 * setting; encoding here at a complexity we choose and sending the packets in the pose batches that go anyway is what
 * takes that cost off a client-rendered session (docs/performance.md, "Audio on the pose channel").
 */
import { Encoder } from '@evan/opus';

/**
 * Opus complexity of channel audio. Measured with `@evan/opus` on the 20 s speech fixture at 16 kHz in 20 ms packets
 * (docs/performance.md, "Audio on the pose channel"), CPU per audio-second / waveform SNR after decoding: complexity 9
 * (libwebrtc's) 7.2–9.4 ms / 11.2 dB, 5 5.1 ms / 11.0 dB, 2 3.4 ms / 10.6 dB, 0 1.8 ms / 10.5 dB, all 17–18 kb/s.
 * 5 keeps what 9 codes (within 0.2 dB) at 55–70 % of its cost; going lower saves ~1 ms more per speaking
 * session-second and loses two to three times as much (0.4–0.5 dB). The larger saving is wrtc's RTP path and pacer,
 * which channel audio skips.
 */
export const CHANNEL_OPUS_COMPLEXITY = 5;

/** `OPUS_SET_COMPLEXITY` (opus_defines.h): the request number `Encoder.ctl` takes. */
const OPUS_SET_COMPLEXITY = 4010;

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
  private readonly encoder: Encoder;

  constructor(
    readonly sampleRate: number,
    packetMs: number,
  ) {
    if (!opusEncodes(sampleRate)) throw new RangeError(`Opus does not encode at ${sampleRate} Hz`);
    this.packetSamples = (sampleRate * packetMs) / 1000;
    this.encoder = new Encoder({ sample_rate: sampleRate as 16_000, channels: 1, application: 'voip' });
    this.encoder.ctl(OPUS_SET_COMPLEXITY, CHANNEL_OPUS_COMPLEXITY);
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
