/**
 * The pure parts of the voice input: the streaming resampler (chunking must not change the output, the
 * band above the new Nyquist must go) and the echo-onset guard (the avatar's own voice heard back is
 * recognised, independent speech is not).
 */
import { describe, expect, it } from 'vitest';
import { StreamResampler } from '../actors/audio/stream-resampler.ts';
import {
  ECHO_CORRELATION,
  ECHO_ONSET_WINDOW_MS,
  ENVELOPE_MS,
  Envelope,
  echoCorrelation,
  isEcho,
} from '../actors/vad/echo-guard.ts';
import { loadVadFixture, whiteNoise } from './helpers/vad-fixture.ts';

const fixture = loadVadFixture();
const speech = fixture.labels.segments.filter((segment) => segment.kind === 'speech');

function sine(rate: number, ms: number, freq: number, amplitude = 10_000): Int16Array {
  return Int16Array.from({ length: Math.round((rate * ms) / 1000) }, (_, i) =>
    Math.round(amplitude * Math.sin((2 * Math.PI * freq * i) / rate)),
  );
}

function rms(pcm: Int16Array, from = 0, to = pcm.length): number {
  let sum = 0;
  for (let i = from; i < to; i++) sum += pcm[i] * pcm[i];
  return Math.sqrt(sum / Math.max(1, to - from));
}

function resampleInChunks(pcm: Int16Array, from: number, to: number, chunk: number): Int16Array {
  const resampler = new StreamResampler(from, to);
  const parts: Int16Array[] = [];
  for (let offset = 0; offset < pcm.length; offset += chunk)
    parts.push(resampler.push(pcm.subarray(offset, offset + chunk)));
  const out = new Int16Array(parts.reduce((n, p) => n + p.length, 0));
  let offset = 0;
  for (const part of parts) {
    out.set(part, offset);
    offset += part.length;
  }
  return out;
}

describe('streaming resampler', () => {
  it('gives the same output however the input is chunked (10 ms WebRTC buffers, 20 ms frames, odd sizes)', () => {
    const input = sine(48_000, 500, 440);
    const whole = resampleInChunks(input, 48_000, 16_000, input.length);
    for (const chunk of [480, 960, 337]) {
      const chunked = resampleInChunks(input, 48_000, 16_000, chunk);
      expect(chunked.length).toBeGreaterThanOrEqual(whole.length - 1);
      for (let i = 0; i < Math.min(whole.length, chunked.length); i++)
        expect(Math.abs(chunked[i] - whole[i]), `sample ${i}, chunk ${chunk}`).toBeLessThanOrEqual(1);
    }
    // 48 → 16 kHz: a third of the samples, less the filter's half-width of delay.
    expect(Math.abs(whole.length - input.length / 3)).toBeLessThanOrEqual(48);
  });

  it('keeps a 440 Hz tone at its level and removes a 10 kHz tone above the new Nyquist frequency', () => {
    const low = resampleInChunks(sine(48_000, 500, 440), 48_000, 16_000, 480);
    const high = resampleInChunks(sine(48_000, 500, 10_000), 48_000, 16_000, 480);
    expect(rms(low, 200, low.length - 200) / (10_000 / Math.SQRT2)).toBeCloseTo(1, 1);
    // More than 40 dB down.
    expect(rms(high, 200, high.length - 200)).toBeLessThan(10_000 / Math.SQRT2 / 100);
  });

  it('upsamples 8 kHz to 16 kHz and passes 16 kHz through', () => {
    const up = resampleInChunks(sine(8_000, 400, 300), 8_000, 16_000, 160);
    expect(Math.abs(up.length - 6_400)).toBeLessThanOrEqual(40);
    expect(rms(up, 400, up.length - 400) / (10_000 / Math.SQRT2)).toBeCloseTo(1, 1);
    const same = new StreamResampler(16_000, 16_000).push(Int16Array.from([1, 2, 3]));
    expect(Array.from(same)).toEqual([1, 2, 3]);
  });
});

describe('echo-onset guard', () => {
  const chunk = 160; // 10 ms at 16 kHz
  /** Feeds `pcm` into an envelope as 10 ms chunks timed from `startMs`, scaled by `gain`. */
  function feed(envelope: Envelope, pcm: Int16Array, startMs: number, gain = 1): void {
    for (let offset = 0, at = startMs; offset + chunk <= pcm.length; offset += chunk, at += ENVELOPE_MS) {
      envelope.add(
        pcm.subarray(offset, offset + chunk).map((s) => Math.round(s * gain)),
        at,
      );
    }
  }
  const reply = fixture.pcm.slice(speech[1].startMs * 16, (speech[1].startMs + 1_500) * 16);
  const user = fixture.pcm.slice(speech[3].startMs * 16, (speech[3].startMs + 1_500) * 16);

  it('recognises the avatar’s own voice heard back 120 ms later, quieter and with room noise', () => {
    const sent = new Envelope();
    const mic = new Envelope();
    feed(sent, reply, 10_000);
    const noise = whiteNoise(reply.length, -55, 3);
    const echo = reply.map((s, i) => s * 0.2 + noise[i]);
    feed(mic, echo, 10_120);
    const { correlation, delayMs } = echoCorrelation(mic, sent, 10_100, 10_700);
    expect(correlation).toBeGreaterThanOrEqual(ECHO_CORRELATION);
    expect(Math.abs(delayMs - 120)).toBeLessThanOrEqual(20);
    expect(isEcho(mic, sent, 10_300, 10_000)).toBe(true);
  });

  it('never takes one fixture voice talking over another for an echo (every pair, onsets 0.3–1.3 s into the avatar’s speech); catches the echoes', () => {
    const noise = whiteNoise(16_000 * 4, -60, 9);
    const clip = (index: number) =>
      fixture.pcm.slice(speech[index].startMs * 16, Math.min(speech[index].endMs, speech[index].startMs + 1_800) * 16);
    let falseEchoes = 0;
    let pairs = 0;
    for (let a = 0; a < speech.length; a++) {
      for (let u = 0; u < speech.length; u++) {
        if (u === a) continue;
        for (const offsetMs of [300, 800, 1_300]) {
          const sent = new Envelope();
          const mic = new Envelope();
          feed(sent, clip(a), 10_000);
          feed(mic, noise.subarray(0, (offsetMs + 1_000) * 16), 10_000 - 1_000);
          feed(mic, clip(u), 10_000 + offsetMs);
          const onset = 10_000 + offsetMs;
          pairs++;
          if (isEcho(mic, sent, onset, 10_000)) falseEchoes++;
        }
      }
    }
    expect(pairs).toBe(speech.length * (speech.length - 1) * 3);
    expect(falseEchoes).toBe(0);
    let caught = 0;
    for (let a = 0; a < speech.length; a++) {
      const sent = new Envelope();
      const mic = new Envelope();
      feed(sent, clip(a), 10_000);
      feed(mic, noise.subarray(0, 16_000), 9_120);
      feed(
        mic,
        clip(a).map((s, i) => s * 0.2 + noise[i]),
        10_120,
      );
      if (isEcho(mic, sent, 10_120, 10_000)) caught++;
    }
    expect(caught).toBe(speech.length);
  });

  it('lets independent speech over the avatar through (barge-in), and does not check onsets after the window', () => {
    const sent = new Envelope();
    const mic = new Envelope();
    feed(sent, reply, 10_000);
    feed(mic, user, 10_200);
    expect(echoCorrelation(mic, sent, 10_100, 10_700).correlation).toBeLessThan(ECHO_CORRELATION);
    expect(isEcho(mic, sent, 10_200, 10_000)).toBe(false);
    // Even a perfect echo is not checked once the avatar has been speaking longer than the window.
    const late = new Envelope();
    feed(late, reply, 10_000);
    expect(isEcho(late, sent, 10_300, 10_300 - ECHO_ONSET_WINDOW_MS - 1)).toBe(false);
  });
});
