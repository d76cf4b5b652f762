/**
 * The Wav2Lip mel front end (actors/lipsync/mel.ts) against two independent references:
 * - a direct computation written here in float64 with naive loops (numpy-style iterative reflect padding, a plain
 *   DFT, the librosa filterbank written from its definition), on a sine, a chirp, noise, silence and a short clip;
 * - librosa itself (test/fixtures/wav2lip-mel-librosa.json, made by wav2lip-mel-librosa.py beside it).
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parseWav } from '../actors/audio/wav.ts';
import { ComplexFft, RealFft } from '../actors/audio/fft.ts';
import {
  MEL_SILENCE,
  melColumnsForSamples,
  melWindowForFrame,
  wav2lipMelSpectrogram,
  type MelSpectrogram,
} from '../actors/lipsync/mel.ts';

const SR = 16_000;

// ---------------------------------------------------------------------------------------------------------------
// The reference: Wav2Lip's audio.melspectrogram spelled out step by step, slow on purpose.

/** np.pad(x, pad, mode='reflect') the way numpy does it: reflect the already padded array until wide enough. */
function numpyReflectPad(x: number[], pad: number): number[] {
  let out = x.slice();
  let left = pad;
  let right = pad;
  while (left > 0 || right > 0) {
    const chunk = out.length - 1;
    const takeLeft = Math.min(left, chunk);
    const takeRight = Math.min(right, chunk);
    const leftPart: number[] = [];
    for (let i = takeLeft; i >= 1; i--) leftPart.push(out[i]);
    const rightPart: number[] = [];
    for (let i = 1; i <= takeRight; i++) rightPart.push(out[out.length - 1 - i]);
    out = [...leftPart, ...out, ...rightPart];
    left -= takeLeft;
    right -= takeRight;
  }
  return out;
}

/** librosa.filters.mel(sr=16000, n_fft=800, n_mels=80, fmin=55, fmax=7600), htk=False, norm='slaney', dense. */
function referenceFilterbank(): number[][] {
  const fSp = 200 / 3;
  const minLogHz = 1000;
  const minLogMel = minLogHz / fSp;
  const logStep = Math.log(6.4) / 27;
  const toMel = (f: number) => (f >= minLogHz ? minLogMel + Math.log(f / minLogHz) / logStep : f / fSp);
  const toHz = (m: number) => (m >= minLogMel ? minLogHz * Math.exp(logStep * (m - minLogMel)) : fSp * m);
  const melF: number[] = [];
  for (let i = 0; i < 82; i++) melF.push(toHz(toMel(55) + ((toMel(7600) - toMel(55)) * i) / 81));
  const fftFreqs: number[] = [];
  for (let k = 0; k <= 400; k++) fftFreqs.push((8000 * k) / 400);
  const weights: number[][] = [];
  for (let i = 0; i < 80; i++) {
    const row: number[] = [];
    for (const f of fftFreqs) {
      const lower = (f - melF[i]) / (melF[i + 1] - melF[i]);
      const upper = (melF[i + 2] - f) / (melF[i + 2] - melF[i + 1]);
      row.push(Math.max(0, Math.min(lower, upper)) * (2 / (melF[i + 2] - melF[i])));
    }
    weights.push(row);
  }
  return weights;
}

const FILTERBANK = referenceFilterbank();
const COS = Array.from({ length: 800 }, (_, i) => Math.cos((2 * Math.PI * i) / 800));
const SIN = Array.from({ length: 800 }, (_, i) => Math.sin((2 * Math.PI * i) / 800));

/** Returns [band][column], like numpy's mel[80, T]. */
function referenceMel(wav: number[]): number[][] {
  const y = wav.map((x, n) => x - 0.97 * (n > 0 ? wav[n - 1] : 0));
  const padded = numpyReflectPad(y, 400);
  const columns = 1 + Math.floor((padded.length - 800) / 200);
  const mel: number[][] = Array.from({ length: 80 }, () => []);
  for (let c = 0; c < columns; c++) {
    const frame: number[] = [];
    for (let n = 0; n < 800; n++) frame.push(padded[c * 200 + n] * (0.5 - 0.5 * COS[n]));
    const magnitude: number[] = [];
    for (let k = 0; k <= 400; k++) {
      let re = 0;
      let im = 0;
      for (let n = 0; n < 800; n++) {
        re += frame[n] * COS[(n * k) % 800];
        im -= frame[n] * SIN[(n * k) % 800];
      }
      magnitude.push(Math.sqrt(re * re + im * im));
    }
    for (let b = 0; b < 80; b++) {
      let energy = 0;
      for (let k = 0; k <= 400; k++) energy += FILTERBANK[b][k] * magnitude[k];
      const db = 20 * Math.log10(Math.max(1e-5, energy)) - 20;
      mel[b].push(Math.min(4, Math.max(-4, 8 * ((db + 100) / 100) - 4)));
    }
  }
  return mel;
}

function maxAbsDifference(actual: MelSpectrogram, expected: number[][]): number {
  expect(actual.bands).toBe(expected.length);
  expect(actual.columns).toBe(expected[0].length);
  let worst = 0;
  for (let b = 0; b < actual.bands; b++) {
    for (let c = 0; c < actual.columns; c++)
      worst = Math.max(worst, Math.abs(actual.data[b * actual.columns + c] - expected[b][c]));
  }
  return worst;
}

/** Deterministic uniform noise in [−1, 1) (32-bit LCG), so a failure reproduces. */
function seededNoise(length: number, seed: number): number[] {
  let state = seed >>> 0;
  return Array.from({ length }, () => {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    return state / 2 ** 31 - 1;
  });
}

const tone = (hz: number, seconds: number, amplitude: number) =>
  Array.from({ length: Math.round(seconds * SR) }, (_, n) => amplitude * Math.sin((2 * Math.PI * hz * n) / SR));
const chirp = (seconds: number) =>
  Array.from({ length: Math.round(seconds * SR) }, (_, n) => {
    const t = n / SR;
    return 0.5 * Math.sin(2 * Math.PI * (80 * t + ((7000 - 80) / (2 * seconds)) * t * t));
  });

// ---------------------------------------------------------------------------------------------------------------

describe('the FFT behind the mel front end', () => {
  it('matches a direct DFT for mixed-radix sizes, including 800 = 2^5·5^2 and odd factors', () => {
    for (const size of [1, 2, 5, 12, 42, 105, 400, 800]) {
      const noiseRe = seededNoise(size, size);
      const noiseIm = seededNoise(size, size + 1);
      const re = Float64Array.from(noiseRe);
      const im = Float64Array.from(noiseIm);
      new ComplexFft(size).forward(re, im);
      let worst = 0;
      for (let k = 0; k < size; k++) {
        let sumRe = 0;
        let sumIm = 0;
        for (let n = 0; n < size; n++) {
          const angle = (-2 * Math.PI * ((n * k) % size)) / size;
          sumRe += noiseRe[n] * Math.cos(angle) - noiseIm[n] * Math.sin(angle);
          sumIm += noiseRe[n] * Math.sin(angle) + noiseIm[n] * Math.cos(angle);
        }
        worst = Math.max(worst, Math.abs(sumRe - re[k]), Math.abs(sumIm - im[k]));
      }
      expect(worst, `size ${size}`).toBeLessThan(1e-9);
    }
  });

  it('turns 800 real samples into the 401 bins a direct DFT gives', () => {
    const x = seededNoise(800, 7);
    const re = new Float64Array(401);
    const im = new Float64Array(401);
    new RealFft(800).forward(x, re, im);
    let worst = 0;
    for (let k = 0; k <= 400; k++) {
      let sumRe = 0;
      let sumIm = 0;
      for (let n = 0; n < 800; n++) {
        sumRe += x[n] * COS[(n * k) % 800];
        sumIm -= x[n] * SIN[(n * k) % 800];
      }
      worst = Math.max(worst, Math.abs(sumRe - re[k]), Math.abs(sumIm - im[k]));
    }
    expect(worst).toBeLessThan(1e-9);
  });
});

describe('Wav2Lip mel spectrogram', () => {
  const signals: Array<[string, number[]]> = [
    ['a 440 Hz sine, 0.5 s', tone(440, 0.5, 0.5)],
    ['a chirp 80 → 7000 Hz, 0.5 s', chirp(0.5)],
    ['seeded noise, 0.4 s', seededNoise(6400, 42).map((v) => 0.3 * v)],
    ['silence, 0.3 s', new Array(4800).fill(0)],
    ['a clip shorter than the reflect padding (300 samples)', tone(300, 300 / SR, 0.4)],
  ];

  for (const [name, wav] of signals) {
    it(`matches a direct float64 DFT computation of the recipe on ${name}`, () => {
      const mel = wav2lipMelSpectrogram(Float32Array.from(wav));
      expect(mel.columns).toBe(melColumnsForSamples(wav.length));
      expect(maxAbsDifference(mel, referenceMel(wav))).toBeLessThan(1e-3);
    });
  }

  it('reads silence as the floor, −4 in every cell', () => {
    const mel = wav2lipMelSpectrogram(new Int16Array(3200));
    expect(mel.data.every((v) => v === MEL_SILENCE)).toBe(true);
  });

  it('matches librosa on the committed reference signals (chirp, vowel, recorded speech)', () => {
    const fixture = JSON.parse(
      readFileSync(new URL('./fixtures/wav2lip-mel-librosa.json', import.meta.url), 'utf8'),
    ) as {
      signals: Record<string, number[][]>;
    };
    const t = (n: number) => n / SR;
    const vowel = Array.from({ length: 6400 }, (_, n) => {
      let sum = 0;
      for (let h = 1; h <= 20; h++) sum += (0.3 / h) * Math.sin(2 * Math.PI * 140 * h * t(n));
      return Math.sin((Math.PI * t(n)) / 0.4) * sum;
    });
    const { pcm } = parseWav(readFileSync(new URL('./fixtures/vad-speech-16k.wav', import.meta.url)));
    const inputs: Record<string, Int16Array | Float32Array> = {
      'chirp 80-7000 Hz, 0.5 s, amplitude 0.5': Float32Array.from(chirp(0.5)),
      'vowel 140 Hz, 20 harmonics, 0.4 s sine envelope': Float32Array.from(vowel),
      'vad-speech-16k.wav samples 16000-32000 (int16 / 32768)': pcm.slice(16_000, 32_000),
    };
    expect(Object.keys(fixture.signals).sort()).toEqual(Object.keys(inputs).sort());
    for (const [name, samples] of Object.entries(inputs)) {
      expect(maxAbsDifference(wav2lipMelSpectrogram(samples), fixture.signals[name]), name).toBeLessThan(1e-3);
    }
  });

  it('puts a 1 kHz tone and a 4 kHz tone in the bands whose centres are nearest', () => {
    const fSp = 200 / 3;
    const logStep = Math.log(6.4) / 27;
    const toMel = (f: number) => (f >= 1000 ? 15 + Math.log(f / 1000) / logStep : f / fSp);
    const bandCentreMel = (b: number) => toMel(55) + ((toMel(7600) - toMel(55)) * (b + 1)) / 81;
    for (const hz of [1000, 4000]) {
      const mel = wav2lipMelSpectrogram(Float32Array.from(tone(hz, 0.5, 0.5)));
      const column = Math.floor(mel.columns / 2);
      let loudest = 0;
      for (let b = 1; b < mel.bands; b++)
        if (mel.data[b * mel.columns + column] > mel.data[loudest * mel.columns + column]) loudest = b;
      let nearest = 0;
      for (let b = 1; b < 80; b++)
        if (Math.abs(bandCentreMel(b) - toMel(hz)) < Math.abs(bandCentreMel(nearest) - toMel(hz))) nearest = b;
      expect(loudest, `${hz} Hz`).toBe(nearest);
      // Far from the tone the spectrum is at least 2 units (25 dB) down.
      expect(
        mel.data[loudest * mel.columns + column] - mel.data[(loudest > 40 ? 5 : 75) * mel.columns + column],
      ).toBeGreaterThan(2);
    }
  });
});

describe('melWindowForFrame', () => {
  /** A spectrogram whose cell (b, c) holds b·1000 + c, so a window shows exactly which columns it took. */
  function labelled(columns: number): MelSpectrogram {
    const data = new Float32Array(80 * columns);
    for (let b = 0; b < 80; b++) for (let c = 0; c < columns; c++) data[b * columns + c] = b * 1000 + c;
    return { bands: 80, columns, data };
  }
  const columnsOf = (window: Float32Array, band: number) =>
    Array.from(window.subarray(band * 16, band * 16 + 16)).map((v) => v - band * 1000);
  const range = (start: number) => Array.from({ length: 16 }, (_, i) => start + i);

  it('takes the 16 columns from int(frame · 80 / fps), band by band', () => {
    const mel = labelled(400);
    expect(melWindowForFrame(mel, 0, 25)).toHaveLength(80 * 16);
    expect(columnsOf(melWindowForFrame(mel, 0, 25), 0)).toEqual(range(0));
    expect(columnsOf(melWindowForFrame(mel, 7, 25), 79)).toEqual(range(22)); // 7 · 3.2 = 22.4
    expect(columnsOf(melWindowForFrame(mel, 10, 30), 40)).toEqual(range(26)); // 10 · 2.667 = 26.67
    expect(columnsOf(melWindowForFrame(mel, 5, 25), 3)).toEqual(range(16));
  });

  it('takes the last 16 columns once the window would run past the end, as Wav2Lip does', () => {
    const mel = labelled(50);
    expect(columnsOf(melWindowForFrame(mel, 11, 25), 2)).toEqual(range(34)); // start 35 would end at 51
    expect(columnsOf(melWindowForFrame(mel, 1000, 25), 2)).toEqual(range(34));
  });

  it('fills a spectrogram shorter than one window with silence after its columns', () => {
    const window = melWindowForFrame(labelled(5), 3, 25);
    expect(columnsOf(window, 1).slice(0, 5)).toEqual([0, 1, 2, 3, 4]);
    expect(Array.from(window.subarray(16 + 5, 32))).toEqual(new Array(11).fill(MEL_SILENCE));
  });

  it('windows a real spectrogram so that speech frames are louder than the leading silence', () => {
    const { pcm } = parseWav(readFileSync(new URL('./fixtures/vad-speech-16k.wav', import.meta.url)));
    const mel = wav2lipMelSpectrogram(pcm.slice(0, 3 * SR)); // 1 s of noise floor, then speech
    const mean = (w: Float32Array) => w.reduce((s, v) => s + v, 0) / w.length;
    expect(mean(melWindowForFrame(mel, 30, 25))).toBeGreaterThan(mean(melWindowForFrame(mel, 5, 25)) + 1);
  });
});
