/**
 * The built-in voices' whole-factor upsampling (actors/audio/upsample.ts) against the ideal signal and against
 * libsamplerate (actors/audio/resample.ts), which it replaces for 16 → 48 kHz and 8 → 48 kHz.
 */
import { describe, expect, it } from 'vitest';
import { resamplePcm16 } from '../actors/audio/resample.ts';
import { isWholeUpsample, upsamplePcm16 } from '../actors/audio/upsample.ts';
import { synthesizeWithFlite } from '../actors/tts/builtin/flite.ts';

const AMPLITUDE = 10_000;

function tone(hz: number, rate: number, samples: number): Int16Array {
  return Int16Array.from({ length: samples }, (_, i) =>
    Math.round(AMPLITUDE * Math.sin((2 * Math.PI * hz * i) / rate)),
  );
}

/** Amplitude of the `hz` component of `pcm[from, to)`. */
function amplitudeAt(pcm: Int16Array, hz: number, rate: number, from: number, to: number): number {
  let sine = 0;
  let cosine = 0;
  for (let i = from; i < to; i++) {
    sine += pcm[i]! * Math.sin((2 * Math.PI * hz * i) / rate);
    cosine += pcm[i]! * Math.cos((2 * Math.PI * hz * i) / rate);
  }
  return (Math.hypot(sine, cosine) * 2) / (to - from);
}

function snrDb(actual: Int16Array, reference: Int16Array, from: number, to: number): number {
  let error = 0;
  let power = 0;
  for (let i = from; i < to; i++) {
    error += (actual[i]! - reference[i]!) ** 2;
    power += reference[i]! ** 2;
  }
  return error === 0 ? Infinity : 10 * Math.log10(power / error);
}

describe('whole-factor upsampling', () => {
  it('serves whole factors 2–12 and leaves every other ratio to libsamplerate', () => {
    expect(isWholeUpsample(16_000, 48_000)).toBe(true);
    expect(isWholeUpsample(8_000, 48_000)).toBe(true);
    expect(isWholeUpsample(22_050, 48_000)).toBe(false);
    expect(isWholeUpsample(48_000, 16_000)).toBe(false);
    expect(isWholeUpsample(48_000, 48_000)).toBe(false);
    expect(() => upsamplePcm16(new Int16Array(4), 1.5)).toThrow(RangeError);
  });

  it('keeps tones up to 6 kHz within 60 dB of the ideal 48 kHz signal, images 70 dB down', async () => {
    for (const hz of [300, 1_000, 3_000, 5_500, 6_000]) {
      const input = tone(hz, 16_000, 16_000);
      const output = upsamplePcm16(input, 3);
      expect(output.length).toBe(48_000);
      const ideal = tone(hz, 48_000, 48_000);
      // Away from the edges, where the signal starts from silence.
      expect(snrDb(output, ideal, 2_000, 46_000), `${hz} Hz`).toBeGreaterThan(60);
      const imageDb = 20 * Math.log10(amplitudeAt(output, 16_000 - hz, 48_000, 2_000, 46_000) / AMPLITUDE);
      expect(imageDb, `${hz} Hz image`).toBeLessThan(-70);
      // No worse than libsamplerate in the pass band.
      const reference = await resamplePcm16(input, 16_000, 48_000);
      expect(snrDb(output, ideal, 2_000, 46_000)).toBeGreaterThanOrEqual(snrDb(reference, ideal, 2_000, 46_000) - 8);
    }
  });

  it('keeps a constant exactly constant and silence silent, at every phase', () => {
    const constant = upsamplePcm16(new Int16Array(400).fill(1234), 6);
    expect([...constant.subarray(200, 2_200)].every((sample) => sample === 1234)).toBe(true);
    expect([...upsamplePcm16(new Int16Array(100), 3)].every((sample) => sample === 0)).toBe(true);
    expect(upsamplePcm16(new Int16Array(0), 3).length).toBe(0);
  });

  it("gives flite's speech as libsamplerate does, in time (no delay) and level", async () => {
    const speech = await synthesizeWithFlite('slt', 'Would you like to hear more about the mountains of Norway?');
    expect(speech.sampleRate).toBe(16_000);
    const ours = upsamplePcm16(speech.pcm, 3);
    const reference = await resamplePcm16(speech.pcm, 16_000, 48_000);
    expect(ours.length).toBe(reference.length);
    expect(snrDb(ours, reference, 0, ours.length)).toBeGreaterThan(30);
    // Output sample 3n is input sample n's instant.
    expect(
      snrDb(
        Int16Array.from({ length: speech.pcm.length }, (_, n) => ours[3 * n]!),
        speech.pcm,
        0,
        speech.pcm.length,
      ),
    ).toBeGreaterThan(25);
  }, 60_000);
});
