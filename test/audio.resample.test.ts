import { describe, expect, it } from 'vitest';
import { resamplePcm16 } from '../actors/audio/resample.ts';

function sine(frequencyHz: number, sampleRate: number, seconds: number, amplitude = 12_000): Int16Array {
  const samples = new Int16Array(Math.round(sampleRate * seconds));
  for (let i = 0; i < samples.length; i++) {
    samples[i] = Math.round(amplitude * Math.sin((2 * Math.PI * frequencyHz * i) / sampleRate));
  }
  return samples;
}

/** Estimates frequency from rising zero crossings, ignoring the filter's edge transients. */
function estimateFrequency(pcm: Int16Array, sampleRate: number): number {
  const margin = Math.floor(pcm.length * 0.1);
  const crossings: number[] = [];
  for (let i = margin + 1; i < pcm.length - margin; i++) {
    if (pcm[i - 1] < 0 && pcm[i] >= 0) crossings.push(i - pcm[i] / (pcm[i] - pcm[i - 1]));
  }
  const periods = crossings.length - 1;
  return (periods * sampleRate) / (crossings[crossings.length - 1] - crossings[0]);
}

function rms(pcm: Int16Array): number {
  let sum = 0;
  for (const sample of pcm) sum += sample * sample;
  return Math.sqrt(sum / pcm.length);
}

describe('resamplePcm16', () => {
  it.each([
    [16_000, 48_000],
    [22_050, 16_000],
    [16_000, 24_000],
    [48_000, 16_000],
  ])('keeps a 440 Hz sine at 440 Hz from %i to %i Hz with the right length', async (fromRate, toRate) => {
    const input = sine(440, fromRate, 1);
    const output = await resamplePcm16(input, fromRate, toRate);
    expect(Math.abs(output.length - (input.length * toRate) / fromRate)).toBeLessThanOrEqual(2);
    expect(estimateFrequency(output, toRate)).toBeCloseTo(440, 0);
    // A sinc converter keeps the in-band amplitude; a broken one (zeros, clipping) would not.
    expect(rms(output) / rms(input)).toBeGreaterThan(0.95);
    expect(rms(output) / rms(input)).toBeLessThan(1.05);
  });

  it('removes content above the new Nyquist frequency when downsampling', async () => {
    // 7 kHz cannot exist at 8 kHz sampling; a naive decimator would alias it to 1 kHz.
    const output = await resamplePcm16(sine(7_000, 16_000, 0.5), 16_000, 8_000);
    const middle = output.subarray(400, output.length - 400);
    expect(rms(middle)).toBeLessThan(12_000 * 0.05);
  });

  it('returns an equal copy without resampling when the rates match', async () => {
    const input = sine(300, 16_000, 0.1);
    const output = await resamplePcm16(input, 16_000, 16_000);
    expect(output).toEqual(input);
    expect(output).not.toBe(input);
  });

  it('handles empty input and rejects nonsense rates', async () => {
    expect((await resamplePcm16(new Int16Array(0), 16_000, 48_000)).length).toBe(0);
    await expect(resamplePcm16(new Int16Array(10), 0, 16_000)).rejects.toThrow(RangeError);
  });
});
