/**
 * Whole-factor upsampling (actors/audio/upsample.ts) against the ideal signal and against libsamplerate's
 * SINC_FASTEST, which it replaces behind `resamplePcm16` for every whole factor (16, 24 or 8 kHz → 48 kHz).
 */
import libsamplerate from '@alexanderolsen/libsamplerate-js';
import { describe, expect, it } from 'vitest';
import { float32ToPcm16, pcm16ToFloat32, resamplePcm16 } from '../actors/audio/resample.ts';
import { isWholeUpsample, upsamplePcm16 } from '../actors/audio/upsample.ts';
import { synthesizeWithFlite } from '../actors/tts/builtin/flite.ts';

/** What `resamplePcm16` did for whole factors before: libsamplerate's fastest sinc converter. */
async function libsamplerateResample(pcm: Int16Array, fromRate: number, toRate: number): Promise<Int16Array> {
  const converter = await libsamplerate.create(1, fromRate, toRate, {
    converterType: libsamplerate.ConverterType.SRC_SINC_FASTEST,
  });
  try {
    return float32ToPcm16(converter.simple(pcm16ToFloat32(pcm)));
  } finally {
    converter.destroy();
  }
}

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

  it.each([
    // flite's and many cloud voices' 16 kHz, cloud voices' 24 kHz, telephone-band 8 kHz uploads.
    [16_000, [300, 1_000, 3_000, 5_500, 6_000]],
    [24_000, [300, 1_000, 3_000, 6_000, 9_000]],
    [8_000, [300, 1_000, 2_000, 2_700]],
  ])(
    'keeps tones to 0.75 × Nyquist from %i Hz within 60 dB of the ideal 48 kHz signal, images 70 dB down',
    async (fromRate, tones) => {
      const factor = 48_000 / fromRate;
      for (const hz of tones) {
        const input = tone(hz, fromRate, fromRate);
        const output = upsamplePcm16(input, factor);
        expect(output.length).toBe(48_000);
        const ideal = tone(hz, 48_000, 48_000);
        // Away from the edges, where the signal starts from silence.
        expect(snrDb(output, ideal, 2_000, 46_000), `${hz} Hz`).toBeGreaterThan(60);
        const imageDb = 20 * Math.log10(amplitudeAt(output, fromRate - hz, 48_000, 2_000, 46_000) / AMPLITUDE);
        expect(imageDb, `${hz} Hz image`).toBeLessThan(-70);
        // No worse than libsamplerate in the pass band.
        const reference = await libsamplerateResample(input, fromRate, 48_000);
        expect(snrDb(output, ideal, 2_000, 46_000)).toBeGreaterThanOrEqual(snrDb(reference, ideal, 2_000, 46_000) - 8);
      }
    },
  );

  it('is what resamplePcm16 does for every whole-factor upsample, and only for those', async () => {
    const input = tone(440, 24_000, 2_400);
    expect(await resamplePcm16(input, 24_000, 48_000)).toEqual(upsamplePcm16(input, 2));
    expect(await resamplePcm16(input, 16_000, 48_000)).toEqual(upsamplePcm16(input, 3));
    expect(await resamplePcm16(input, 8_000, 48_000)).toEqual(upsamplePcm16(input, 6));
    // 22.05 kHz (eSpeak) is no whole factor: libsamplerate, byte for byte.
    expect(await resamplePcm16(input, 22_050, 48_000)).toEqual(await libsamplerateResample(input, 22_050, 48_000));
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
    const reference = await libsamplerateResample(speech.pcm, 16_000, 48_000);
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
