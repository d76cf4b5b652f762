/**
 * Short-time audio features on a 10 ms hop: RMS level, and spectral brightness in Hz. Brightness comes
 * from the energy ratio of the first difference to the signal (a cheap high-band/low-band ratio that
 * needs no FFT): for a pure tone of f Hz that ratio is 2·sin(πf/fs), so inverting it gives an
 * "equivalent frequency" that does not depend on the sample rate — low for /u/ /o/, higher for /i/ /e/,
 * thousands of Hz for /s/.
 */
import { RealFft } from '../audio/fft.ts';

export const HOP_MS = 10;
/** 25 ms analysis window: the usual speech frame, long enough for a 100 Hz voice's period. */
const WINDOW_MS = 25;
/** dBFS mapped linearly onto level 0..1; below the floor counts as silence. */
const LEVEL_FLOOR_DBFS = -60;

export interface AudioFeatures {
  /** Normalised level per hop, 0..1. */
  level: Float32Array;
  /** Brightness per hop in Hz (see module comment), 0 when silent. */
  brightness: Float32Array;
  /** Energy centroid of the 200-1000 Hz band per hop (tracks F1, i.e. jaw opening), Hz. */
  lowCentroid: Float32Array;
  /** log10 of energy in 1500-3500 Hz over 200-1000 Hz per hop (high F2 = spread lips, low = rounded). */
  highToLowRatio: Float32Array;
  hopCount: number;
}

const LOW_BAND_HZ = [200, 1000] as const;
const HIGH_BAND_HZ = [1500, 3500] as const;

/**
 * Band energies of one Hann-windowed frame around `center`: the frame is written into `frame` (the FFT's size) and its
 * spectrum into `real` and `imaginary` (size / 2 + 1), all overwritten. The caller hands the same arrays to every hop:
 * fresh 4 KiB arrays per hop were the largest share of the main thread's garbage that lived until a mark-compact GC
 * (8 of 74 MB over a 45 s run of three speaking sessions), and those GCs (65–115 ms) stalled every session's frames at
 * once (docs/performance.md, "Seventeenth session"). The transform is the service's one FFT (`RealFft`).
 */
function spectralShape(
  pcm: Int16Array,
  center: number,
  sampleRate: number,
  window: Float64Array,
  transform: { fft: RealFft; frame: Float64Array; real: Float64Array; imaginary: Float64Array },
) {
  const { fft, frame, real, imaginary } = transform;
  const size = frame.length;
  const offset = center - size / 2;
  for (let i = 0; i < size; i++) {
    const index = offset + i;
    frame[i] = index >= 0 && index < pcm.length ? pcm[index] * window[i] : 0;
  }
  fft.forward(frame, real, imaginary);
  const binHz = sampleRate / size;
  let lowEnergy = 0;
  let lowWeighted = 0;
  let highEnergy = 0;
  for (let bin = 1; bin < size / 2; bin++) {
    const hz = bin * binHz;
    const power = real[bin] * real[bin] + imaginary[bin] * imaginary[bin];
    if (hz >= LOW_BAND_HZ[0] && hz < LOW_BAND_HZ[1]) {
      lowEnergy += power;
      lowWeighted += power * hz;
    } else if (hz >= HIGH_BAND_HZ[0] && hz < HIGH_BAND_HZ[1]) {
      highEnergy += power;
    }
  }
  return {
    lowCentroid: lowEnergy > 0 ? lowWeighted / lowEnergy : 0,
    highToLowRatio: lowEnergy > 0 && highEnergy > 0 ? Math.log10(highEnergy / lowEnergy) : 0,
  };
}

export function rmsToLevel(rms: number): number {
  if (!(rms > 0)) return 0;
  const dbfs = 20 * Math.log10(rms / 32768);
  return Math.min(1, Math.max(0, (dbfs - LEVEL_FLOOR_DBFS) / -LEVEL_FLOOR_DBFS));
}

/**
 * The features of one chunk of speech, computed hop by hop as far as they are asked for. The playout asks for
 * a frame's mouth ~40 ms at a time, so the work is spread over the chunk's playback instead of running in one
 * block when the chunk is queued: a sentence took 8.5–19 ms there on a quiet host, a minute of direct audio
 * hundreds of ms, and each such block stalled every session's clock on the main thread (docs/performance.md,
 * "Nineteenth session").
 */
export class AudioAnalysis implements AudioFeatures {
  readonly hopCount: number;
  readonly level: Float32Array;
  readonly brightness: Float32Array;
  readonly lowCentroid: Float32Array;
  readonly highToLowRatio: Float32Array;
  /** Hops analysed so far (0..hopCount); the arrays hold zeros past it. */
  private analysed = 0;
  /** Released once every hop is analysed: the features are all the track keeps. */
  private pcm: Int16Array | null;
  private readonly halfWindow: number;
  private readonly hann: Float64Array;
  /** The FFT and its arrays, reused by every hop (`spectralShape`). */
  private readonly transform: { fft: RealFft; frame: Float64Array; real: Float64Array; imaginary: Float64Array };

  constructor(
    pcm: Int16Array,
    private readonly sampleRate: number,
  ) {
    const durationMs = (pcm.length / sampleRate) * 1000;
    this.hopCount = Math.max(1, Math.ceil(durationMs / HOP_MS));
    this.level = new Float32Array(this.hopCount);
    this.brightness = new Float32Array(this.hopCount);
    this.lowCentroid = new Float32Array(this.hopCount);
    this.highToLowRatio = new Float32Array(this.hopCount);
    this.pcm = pcm;
    // ~32 ms FFT frames: fine enough (31 Hz bins at 16 kHz) to place F1 within the low band.
    const fftSize = 2 ** Math.ceil(Math.log2(Math.max(64, 0.032 * sampleRate)));
    this.hann = hannWindow(fftSize);
    const fft = realFftOf(fftSize);
    this.transform = {
      fft,
      frame: new Float64Array(fftSize),
      real: new Float64Array(fft.bins),
      imaginary: new Float64Array(fft.bins),
    };
    this.halfWindow = Math.max(1, Math.round(((WINDOW_MS / 1000) * sampleRate) / 2));
  }

  /** Analyses every hop up to and including `hop` (clamped to the chunk) that is not analysed yet. */
  analyseThrough(hop: number): void {
    const last = Math.min(this.hopCount - 1, Math.floor(hop));
    const pcm = this.pcm;
    if (!pcm) return;
    for (; this.analysed <= last; this.analysed++) this.analyseHop(pcm, this.analysed);
    if (this.analysed >= this.hopCount) this.pcm = null;
  }

  private analyseHop(pcm: Int16Array, hop: number): void {
    const { sampleRate, halfWindow } = this;
    const center = Math.round((((hop + 0.5) * HOP_MS) / 1000) * sampleRate);
    const from = Math.max(0, center - halfWindow);
    const to = Math.min(pcm.length, center + halfWindow);
    let energy = 0;
    let differenceEnergy = 0;
    for (let i = from; i < to; i++) {
      const sample = pcm[i];
      energy += sample * sample;
      if (i > from) {
        const difference = sample - pcm[i - 1];
        differenceEnergy += difference * difference;
      }
    }
    const count = to - from;
    if (count <= 0) return;
    this.level[hop] = rmsToLevel(Math.sqrt(energy / count));
    const ratio = energy > 0 ? Math.sqrt(differenceEnergy / energy) : 0;
    this.brightness[hop] = (sampleRate / Math.PI) * Math.asin(Math.min(1, ratio / 2));
    if (this.level[hop] > 0) {
      const shape = spectralShape(pcm, center, sampleRate, this.hann, this.transform);
      this.lowCentroid[hop] = shape.lowCentroid;
      this.highToLowRatio[hop] = shape.highToLowRatio;
    }
  }
}

/** FFTs by size (a power of two, so a handful at most): their twiddles are made once; `forward` is synchronous. */
const realFfts = new Map<number, RealFft>();

function realFftOf(size: number): RealFft {
  let fft = realFfts.get(size);
  if (!fft) {
    fft = new RealFft(size);
    realFfts.set(size, fft);
  }
  return fft;
}

/** Hann windows by FFT size (a power of two, so a handful at most), never changed once made. */
const hannWindows = new Map<number, Float64Array>();

function hannWindow(size: number): Float64Array {
  let window = hannWindows.get(size);
  if (!window) {
    window = new Float64Array(size).map((_, i) => 0.5 - 0.5 * Math.cos((2 * Math.PI * i) / (size - 1)));
    hannWindows.set(size, window);
  }
  return window;
}
