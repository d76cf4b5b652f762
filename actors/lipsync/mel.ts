/**
 * Wav2Lip's mel spectrogram (audio.py + hparams.py of the public Wav2Lip repository), in TypeScript.
 *
 * Recipe, in order: 16 kHz mono float samples (int16 / 32768) → pre-emphasis y[n] = x[n] − 0.97·x[n−1] →
 * librosa's STFT (center=True: 400 samples of reflect padding each side; periodic Hann window of 800; n_fft 800;
 * hop 200 → one column per 12.5 ms, 80 per second) → magnitude → librosa's Slaney mel filterbank (80 bands,
 * 55–7600 Hz, Slaney area normalisation) → 20·log10(max(1e-5, ·)) − 20 dB → clip(8·(S + 100)/100 − 4, −4, 4).
 *
 * A video frame `i` at `fps` is driven by the 16 columns (200 ms) starting at int(i · 80/fps); past the end of
 * the spectrogram Wav2Lip takes the last 16 columns (`melWindowForFrame`).
 */
import { RealFft } from '../audio/fft.ts';

export const WAV2LIP_MEL = {
  sampleRate: 16_000,
  nFft: 800,
  hopLength: 200,
  winLength: 800,
  bands: 80,
  fminHz: 55,
  fmaxHz: 7_600,
  preemphasis: 0.97,
  refLevelDb: 20,
  minLevelDb: -100,
  maxAbsValue: 4,
} as const;

/** Columns per second of audio (sampleRate / hop). */
export const MEL_COLUMNS_PER_SECOND = WAV2LIP_MEL.sampleRate / WAV2LIP_MEL.hopLength;
/** Columns per video frame's window (Wav2Lip's `mel_step_size`): 200 ms of audio. */
export const MEL_WINDOW_COLUMNS = 16;
/** The normalised value of silence (every level at or below min_level_db clips to −max_abs_value). */
export const MEL_SILENCE = -WAV2LIP_MEL.maxAbsValue;

/** Row-major [bands × columns], the layout of Wav2Lip's numpy `mel` (mel[band, column] = data[band·columns + column]). */
export interface MelSpectrogram {
  bands: number;
  columns: number;
  data: Float32Array;
}

/** Columns librosa produces for `samples` samples with center=True: 1 + floor(samples / hop). */
export function melColumnsForSamples(samples: number): number {
  return 1 + Math.floor(samples / WAV2LIP_MEL.hopLength);
}

// Slaney mel scale (librosa's default, htk=False): linear below 1 kHz (200/3 Hz per mel), logarithmic above.
const SLANEY_HZ_PER_MEL = 200 / 3;
const SLANEY_LOG_START_HZ = 1_000;
const SLANEY_LOG_START_MEL = SLANEY_LOG_START_HZ / SLANEY_HZ_PER_MEL;
const SLANEY_LOG_STEP = Math.log(6.4) / 27;

export function hzToSlaneyMel(hz: number): number {
  if (hz < SLANEY_LOG_START_HZ) return hz / SLANEY_HZ_PER_MEL;
  return SLANEY_LOG_START_MEL + Math.log(hz / SLANEY_LOG_START_HZ) / SLANEY_LOG_STEP;
}

export function slaneyMelToHz(mel: number): number {
  if (mel < SLANEY_LOG_START_MEL) return mel * SLANEY_HZ_PER_MEL;
  return SLANEY_LOG_START_HZ * Math.exp(SLANEY_LOG_STEP * (mel - SLANEY_LOG_START_MEL));
}

/** One triangular filter, stored sparsely: weights for FFT bins firstBin..firstBin + weights.length − 1. */
export interface MelFilter {
  firstBin: number;
  weights: Float64Array;
  /** Centre frequency of the triangle (Hz). */
  centreHz: number;
}

/**
 * librosa.filters.mel(sr, n_fft, n_mels, fmin, fmax) with htk=False and norm='slaney': band b is a triangle over
 * the band edges edges[b]..edges[b+2] (n_mels + 2 points evenly spaced in Slaney mel), scaled by
 * 2 / (edges[b+2] − edges[b]) so every band has the same area.
 */
export function slaneyMelFilterbank(
  sampleRate: number,
  nFft: number,
  bands: number,
  fminHz: number,
  fmaxHz: number,
): MelFilter[] {
  const bins = 1 + nFft / 2;
  const melMin = hzToSlaneyMel(fminHz);
  const melMax = hzToSlaneyMel(fmaxHz);
  const edges = Array.from({ length: bands + 2 }, (_, i) =>
    slaneyMelToHz(melMin + ((melMax - melMin) * i) / (bands + 1)),
  );
  const binHz = (bin: number): number => (bin * sampleRate) / nFft;
  const filters: MelFilter[] = [];
  for (let b = 0; b < bands; b++) {
    const [lower, centre, upper] = [edges[b], edges[b + 1], edges[b + 2]];
    const areaNorm = 2 / (upper - lower);
    const weightOf = (hz: number): number =>
      Math.max(0, Math.min((hz - lower) / (centre - lower), (upper - hz) / (upper - centre))) * areaNorm;
    let firstBin = -1;
    let lastBin = -1;
    for (let bin = 0; bin < bins; bin++) {
      if (weightOf(binHz(bin)) > 0) {
        if (firstBin < 0) firstBin = bin;
        lastBin = bin;
      }
    }
    // A band narrower than one bin spacing can hold no bin at all (librosa warns and leaves it empty).
    const weights =
      firstBin < 0
        ? new Float64Array(0)
        : Float64Array.from({ length: lastBin - firstBin + 1 }, (_, i) => weightOf(binHz(firstBin + i)));
    filters.push({ firstBin: Math.max(0, firstBin), weights, centreHz: centre });
  }
  return filters;
}

/**
 * A streaming window: the frame's first column is centred on its presentation sample, so the window needs
 * half an FFT (plus one sample for pre-emphasis) before it and 15 hops plus half an FFT after it.
 */
export const MEL_STREAM_LEAD_SAMPLES = WAV2LIP_MEL.nFft / 2 + 1;
export const MEL_STREAM_WINDOW_SAMPLES =
  MEL_STREAM_LEAD_SAMPLES + (MEL_WINDOW_COLUMNS - 1) * WAV2LIP_MEL.hopLength + WAV2LIP_MEL.nFft / 2;

/**
 * The [1, 80, 16] window of a live stream for a frame whose presentation sample is `MEL_STREAM_LEAD_SAMPLES`
 * into `samples` (16 kHz, floats in [−1, 1], `MEL_STREAM_WINDOW_SAMPLES` long; silence where nothing plays).
 * Equal to `melWindowForFrame` of the whole clip's spectrogram wherever that window lies inside the clip
 * (`test/lipsync.mel-stream.test.ts`).
 */
export function melWindowFromStream(
  samples: Float32Array,
  out = new Float32Array(WAV2LIP_MEL.bands * MEL_WINDOW_COLUMNS),
): Float32Array {
  if (samples.length !== MEL_STREAM_WINDOW_SAMPLES)
    throw new RangeError(`a stream window takes ${MEL_STREAM_WINDOW_SAMPLES} samples`);
  sharedAnalyzer ??= new MelAnalyzer();
  sharedAnalyzer.streamWindow(samples, out);
  return out;
}

/** Shared by every call: the plan and tables only depend on the fixed recipe. */
let sharedAnalyzer: MelAnalyzer | undefined;

/** Wav2Lip's `audio.melspectrogram(wav)` of 16 kHz mono PCM. */
export function wav2lipMelSpectrogram(pcm: Int16Array | Float32Array): MelSpectrogram {
  sharedAnalyzer ??= new MelAnalyzer();
  return sharedAnalyzer.analyze(pcm);
}

class MelAnalyzer {
  private readonly fft = new RealFft(WAV2LIP_MEL.nFft);
  private readonly filters = slaneyMelFilterbank(
    WAV2LIP_MEL.sampleRate,
    WAV2LIP_MEL.nFft,
    WAV2LIP_MEL.bands,
    WAV2LIP_MEL.fminHz,
    WAV2LIP_MEL.fmaxHz,
  );
  /** Periodic Hann (scipy.signal.get_window('hann', 800, fftbins=True), librosa's default). */
  private readonly window = Float64Array.from(
    { length: WAV2LIP_MEL.winLength },
    (_, n) => 0.5 - 0.5 * Math.cos((2 * Math.PI * n) / WAV2LIP_MEL.winLength),
  );
  private readonly frame = new Float64Array(WAV2LIP_MEL.nFft);
  private readonly spectrumRe = new Float64Array(WAV2LIP_MEL.nFft / 2 + 1);
  private readonly spectrumIm = new Float64Array(WAV2LIP_MEL.nFft / 2 + 1);
  private readonly magnitude = new Float64Array(WAV2LIP_MEL.nFft / 2 + 1);

  /**
   * The 16 columns centred at samples LEAD, LEAD + 200, …, LEAD + 3000 of `samples` (16 kHz floats in [−1, 1],
   * `MEL_STREAM_WINDOW_SAMPLES` long): the same columns the whole-clip spectrogram has there, without padding,
   * because the stream goes on past both ends. The first sample only feeds pre-emphasis.
   */
  streamWindow(samples: Float32Array, out: Float32Array): void {
    const { nFft, hopLength, preemphasis } = WAV2LIP_MEL;
    for (let column = 0; column < MEL_WINDOW_COLUMNS; column++) {
      const start = 1 + column * hopLength;
      for (let n = 0; n < nFft; n++)
        this.frame[n] = (samples[start + n] - preemphasis * samples[start + n - 1]) * this.window[n];
      this.melColumnOfFrame(out, column, MEL_WINDOW_COLUMNS);
    }
  }

  /** The mel levels of the windowed samples in `frame`, written as column `column` of a band-major array of `columns` columns. */
  private melColumnOfFrame(out: Float32Array, column: number, columns: number): void {
    this.fft.forward(this.frame, this.spectrumRe, this.spectrumIm);
    for (let k = 0; k < this.magnitude.length; k++)
      this.magnitude[k] = Math.sqrt(this.spectrumRe[k] ** 2 + this.spectrumIm[k] ** 2);
    for (let band = 0; band < WAV2LIP_MEL.bands; band++) {
      const { firstBin, weights } = this.filters[band];
      let energy = 0;
      for (let i = 0; i < weights.length; i++) energy += weights[i] * this.magnitude[firstBin + i];
      out[band * columns + column] = normalizedLevel(energy);
    }
  }

  analyze(pcm: Int16Array | Float32Array): MelSpectrogram {
    const { nFft, hopLength, bands } = WAV2LIP_MEL;
    const padded = reflectPadded(preemphasized(pcm), nFft / 2);
    const columns = melColumnsForSamples(pcm.length);
    const data = new Float32Array(bands * columns);
    for (let column = 0; column < columns; column++) {
      const start = column * hopLength;
      for (let n = 0; n < nFft; n++) this.frame[n] = padded[start + n] * this.window[n];
      this.melColumnOfFrame(data, column, columns);
    }
    return { bands, columns, data };
  }
}

// 10^(min_level_db / 20): the amplitude floor before the log, Wav2Lip's `min_level`.
const MIN_AMPLITUDE = 10 ** (WAV2LIP_MEL.minLevelDb / 20);

/** _amp_to_db − ref_level_db, then the symmetric, clipped normalisation to ±max_abs_value. */
function normalizedLevel(amplitude: number): number {
  const { refLevelDb, minLevelDb, maxAbsValue } = WAV2LIP_MEL;
  const db = 20 * Math.log10(Math.max(MIN_AMPLITUDE, amplitude)) - refLevelDb;
  const normalized = 2 * maxAbsValue * ((db - minLevelDb) / -minLevelDb) - maxAbsValue;
  return Math.min(maxAbsValue, Math.max(-maxAbsValue, normalized));
}

/** scipy.signal.lfilter([1, −k], [1], x) from rest: y[0] = x[0]. Int16 is scaled to [−1, 1) like librosa.load. */
function preemphasized(pcm: Int16Array | Float32Array): Float64Array {
  const scale = pcm instanceof Int16Array ? 1 / 32768 : 1;
  const out = new Float64Array(pcm.length);
  let previous = 0;
  for (let n = 0; n < pcm.length; n++) {
    const x = pcm[n] * scale;
    out[n] = x - WAV2LIP_MEL.preemphasis * previous;
    previous = x;
  }
  return out;
}

/**
 * numpy.pad(x, pad, mode='reflect'): mirror around the end samples without repeating them. For a signal shorter
 * than the pad numpy keeps reflecting, which is the periodic extension with period 2·(n − 1) used here. Fewer
 * than two samples cannot be reflected (librosa refuses); they are zero-padded instead.
 */
function reflectPadded(signal: Float64Array, pad: number): Float64Array {
  const n = signal.length;
  const out = new Float64Array(n + 2 * pad);
  if (n < 2) {
    out.set(signal, pad);
    return out;
  }
  out.set(signal, pad);
  const period = 2 * (n - 1);
  const mirrored = (i: number): number => {
    let j = (((i - pad) % period) + period) % period;
    if (j >= n) j = period - j;
    return signal[j];
  };
  for (let i = 0; i < pad; i++) {
    out[i] = mirrored(i);
    out[pad + n + i] = mirrored(pad + n + i);
  }
  return out;
}

/**
 * The [1, 80, 16] window (row-major: band, column) for video frame `frameIdx` at `fps`, as Wav2Lip's inference.py
 * cuts it: start = int(frameIdx · (80 / fps)); a window running past the end is replaced by the last 16 columns.
 * A spectrogram shorter than 16 columns (under 187.5 ms of audio, where Wav2Lip would fail) is placed at the
 * start and the rest filled with silence.
 */
export function melWindowForFrame(mel: MelSpectrogram, frameIdx: number, fps: number): Float32Array {
  if (!Number.isInteger(frameIdx) || frameIdx < 0) throw new RangeError('frame index must be a non-negative integer');
  if (!(fps > 0)) throw new RangeError('fps must be positive');
  const window = new Float32Array(mel.bands * MEL_WINDOW_COLUMNS).fill(MEL_SILENCE);
  let start = Math.trunc(frameIdx * (MEL_COLUMNS_PER_SECOND / fps));
  if (start + MEL_WINDOW_COLUMNS > mel.columns) start = Math.max(0, mel.columns - MEL_WINDOW_COLUMNS);
  const count = Math.min(MEL_WINDOW_COLUMNS, mel.columns - start);
  for (let band = 0; band < mel.bands; band++) {
    const from = band * mel.columns + start;
    window.set(mel.data.subarray(from, from + count), band * MEL_WINDOW_COLUMNS);
  }
  return window;
}
