/**
 * What an Opus complexity costs and what it keeps, for the service's own encoder (`@evan/opus`) on the channel audio
 * path (issue 47, "Audio on the pose channel"): the speech is encoded in 20 ms packets at the session's 16 kHz as
 * the channel sends it (`channelOpusEncoder`: CELT at 32 kb/s), decoded with `@evan/opus`'s Decoder and compared with the input.
 *
 * Why not SNR: Opus is a perceptual codec. SILK (the speech layer of a WebRTC track's 16 kHz speech) shapes its noise under the
 * formants and does not keep the waveform's phase, so a sample-by-sample error (segmental SNR) reads a few dB for
 * speech a listener cannot tell from the input, and moves with things the ear does not hear. What the ear follows is
 * the short-time spectrum, so the figure is the **log-spectral distance** (LSD) on 20 ms frames: per frame the RMS,
 * over frequency, of the difference of the two power spectra in dB (Hann window, 50 % overlap, up to 8 kHz), averaged
 * over the frames that carry speech. Two resolutions: per FFT bin (50 Hz, the textbook LSD) and per mel band
 * (`MEL_BANDS` bands, about the ear's critical bands). Per bin, any noise in the input (a fixture's background, the
 * breath between words) reads ~5 dB even when perfectly coded, because one noise's bins and another's differ at
 * random; the bands average that out, so they are the figure to compare. Parts more than `SPECTRUM_FLOOR_DB` below
 * the input frame's strongest are floored there in both spectra: masked and inaudible. Beside it the **envelope
 * correlation**: Pearson's r between the 10 ms RMS envelopes of input and output (what the mouth track and the
 * receivers' speech share read), which every complexity should keep near 1.
 */
import { Decoder, type Encoder } from '@evan/opus';
import { channelOpusEncoder } from '../actors/audio/opus-encoder.ts';
import { rms } from '../test/helpers/mp4.ts';
import { RealFft } from '../actors/audio/fft.ts';
import { round } from './stats.ts';

/** The channel's packet length (`CHANNEL_AUDIO_PACKET_MS`) at the session's 16 kHz. */
export const CHANNEL_SAMPLE_RATE = 16_000;
export const CHANNEL_PACKET_SAMPLES = (CHANNEL_SAMPLE_RATE * 20) / 1000;
/** `OPUS_SET_BITRATE_REQUEST`, `OPUS_GET_LOOKAHEAD_REQUEST` (opus_defines.h). */
const OPUS_SET_BITRATE = 4002;
const OPUS_GET_LOOKAHEAD = 4027;

/** Bins this far below the input frame's strongest are masked: both spectra are floored there (see above). */
const SPECTRUM_FLOOR_DB = 50;
/** Mel bands from 0 to 8 kHz for the banded LSD (about the ear's critical bands at this width). */
const MEL_BANDS = 20;
/** A 20 ms input frame this loud (RMS, 16-bit) carries speech (the built-in voice's words are at ~1 000–5 000). */
const SPEECH_FRAME_RMS = 300;

/** The channel's encoder as the service configures it (`channelOpusEncoder`) at `complexity`; `bitrate` overrides. */
export function channelEncoder(complexity: number, bitrate?: number): Encoder {
  const encoder = channelOpusEncoder(CHANNEL_SAMPLE_RATE, complexity);
  if (bitrate) encoder.ctl(OPUS_SET_BITRATE, bitrate);
  return encoder;
}

export interface OpusQuality {
  complexity: number;
  /** Main-thread CPU to encode one second of audio, ms (process CPU around the encode loop, best of `repeats`) */
  encode_ms_per_audio_second: number;
  /** Opus payload, kbit/s */
  kbps: number;
  /** Log-spectral distance over speech frames, dB, per mel band: mean and 95th percentile (lower is closer) */
  band_lsd_db_mean: number;
  band_lsd_db_p95: number;
  /** The same per FFT bin (reads any noise in the input as distance too; see above) */
  lsd_db_mean: number;
  lsd_db_p95: number;
  /** Pearson's r of the 10 ms RMS envelopes, input against decoded */
  envelope_r: number;
  speech_frames: number;
}

/** Encodes `speech` (16 kHz) in 20 ms packets at `complexity`, decodes it and compares (see the file's comment). */
export function opusQuality(speech: Int16Array, complexity: number, bitrate?: number, repeats = 3): OpusQuality {
  const packets = Math.floor(speech.length / CHANNEL_PACKET_SAMPLES);
  let encodeMs = Infinity;
  let encoded: Uint8Array[] = [];
  for (let r = 0; r < repeats; r++) {
    const encoder = channelEncoder(complexity, bitrate);
    const out: Uint8Array[] = [];
    const before = process.cpuUsage();
    for (let p = 0; p < packets; p++) {
      const frame = speech.subarray(p * CHANNEL_PACKET_SAMPLES, (p + 1) * CHANNEL_PACKET_SAMPLES);
      // `encode` returns a view of one shared buffer: copy it before the next call.
      out.push(encoder.encode(frame).slice());
    }
    const used = process.cpuUsage(before);
    encodeMs = Math.min(encodeMs, (used.user + used.system) / 1000);
    encoded = out;
  }
  const lookahead = channelEncoder(complexity, bitrate).ctl(OPUS_GET_LOOKAHEAD);
  const decoder = new Decoder({ sample_rate: CHANNEL_SAMPLE_RATE, channels: 1 });
  const decoded = new Int16Array(packets * CHANNEL_PACKET_SAMPLES);
  encoded.forEach((packet, p) => {
    const pcm = decoder.decode(packet);
    decoded.set(new Int16Array(pcm.buffer, pcm.byteOffset, pcm.byteLength / 2), p * CHANNEL_PACKET_SAMPLES);
  });
  // The decoder's output lags the input by the encoder's lookahead.
  const reference = speech.subarray(0, decoded.length - lookahead);
  const output = decoded.subarray(lookahead);
  const { bins: lsd, bands } = logSpectralDistances(reference, output);
  const mean = (values: number[]) => round(values.reduce((a, b) => a + b, 0) / Math.max(1, values.length), 2);
  const p95 = (values: number[]) =>
    round([...values].sort((a, b) => a - b)[Math.floor(values.length * 0.95)] ?? NaN, 2);
  const audioSeconds = (packets * CHANNEL_PACKET_SAMPLES) / CHANNEL_SAMPLE_RATE;
  const bytes = encoded.reduce((n, p) => n + p.length, 0);
  return {
    complexity,
    encode_ms_per_audio_second: round(encodeMs / audioSeconds, 2),
    kbps: round((bytes * 8) / 1000 / audioSeconds, 1),
    band_lsd_db_mean: mean(bands),
    band_lsd_db_p95: p95(bands),
    lsd_db_mean: mean(lsd),
    lsd_db_p95: p95(lsd),
    envelope_r: round(pearson(envelope(reference), envelope(output)), 4),
    speech_frames: bands.length,
  };
}

/** LSD (dB) of every 20 ms frame (10 ms hop) whose input carries speech, per FFT bin and per mel band. */
function logSpectralDistances(reference: Int16Array, output: Int16Array): { bins: number[]; bands: number[] } {
  const size = CHANNEL_PACKET_SAMPLES;
  const fft = new RealFft(size);
  const window = Float64Array.from({ length: size }, (_, i) => 0.5 - 0.5 * Math.cos((2 * Math.PI * i) / size));
  const frame = new Float64Array(size);
  const re = new Float64Array(fft.bins);
  const im = new Float64Array(fft.bins);
  // Bins 1..n/2 (DC says nothing a listener hears), and the mel band of each.
  const mel = (hz: number) => 2595 * Math.log10(1 + hz / 700);
  const top = mel(CHANNEL_SAMPLE_RATE / 2);
  const bandOf = Array.from({ length: fft.bins - 1 }, (_, k) =>
    Math.min(MEL_BANDS - 1, Math.floor((mel(((k + 1) * CHANNEL_SAMPLE_RATE) / size) / top) * MEL_BANDS)),
  );
  const spectrum = (pcm: Int16Array, at: number): Float64Array => {
    for (let i = 0; i < size; i++) frame[i] = pcm[at + i]! * window[i]!;
    fft.forward(frame, re, im);
    return Float64Array.from({ length: fft.bins - 1 }, (_, k) => re[k + 1]! ** 2 + im[k + 1]! ** 2);
  };
  const banded = (power: Float64Array): Float64Array => {
    const out = new Float64Array(MEL_BANDS);
    power.forEach((p, k) => (out[bandOf[k]!]! += p));
    return out;
  };
  const distance = (a: Float64Array, b: Float64Array): number => {
    const floor = Math.max(...a) * 10 ** (-SPECTRUM_FLOOR_DB / 10);
    let sum = 0;
    let n = 0;
    for (let k = 0; k < a.length; k++) {
      if (a[k] === 0 && b[k] === 0) continue; // a band with no bin in it
      sum += (10 * Math.log10(Math.max(a[k]!, floor) / Math.max(b[k]!, floor))) ** 2;
      n++;
    }
    return Math.sqrt(sum / Math.max(1, n));
  };
  const bins: number[] = [];
  const bands: number[] = [];
  for (let at = 0; at + size <= Math.min(reference.length, output.length); at += size / 2) {
    if (rms(reference.subarray(at, at + size)) < SPEECH_FRAME_RMS) continue;
    const a = spectrum(reference, at);
    const b = spectrum(output, at);
    bins.push(distance(a, b));
    bands.push(distance(banded(a), banded(b)));
  }
  return { bins, bands };
}

/** 10 ms RMS envelope. */
function envelope(pcm: Int16Array): number[] {
  const step = CHANNEL_SAMPLE_RATE / 100;
  const out: number[] = [];
  for (let at = 0; at + step <= pcm.length; at += step) out.push(rms(pcm.subarray(at, at + step)));
  return out;
}

function pearson(a: number[], b: number[]): number {
  const n = Math.min(a.length, b.length);
  const meanA = a.slice(0, n).reduce((s, v) => s + v, 0) / n;
  const meanB = b.slice(0, n).reduce((s, v) => s + v, 0) / n;
  let ab = 0;
  let aa = 0;
  let bb = 0;
  for (let i = 0; i < n; i++) {
    ab += (a[i]! - meanA) * (b[i]! - meanB);
    aa += (a[i]! - meanA) ** 2;
    bb += (b[i]! - meanB) ** 2;
  }
  return ab / Math.sqrt(aa * bb);
}
