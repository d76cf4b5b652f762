/**
 * Upsampling 16-bit mono PCM by a whole factor (flite's or a cloud voice's 16, 24 or 8 kHz speech, an upload, to the
 * session's 48 kHz) with a fixed polyphase windowed-sinc filter; `resamplePcm16` (resample.ts) sends every
 * whole-factor upsample here. libsamplerate (resample.ts) computes its sinc for every output sample at
 * any ratio; for a whole factor the L phases of the filter are known ahead, which made the built-in voices'
 * 16 → 48 kHz resampling ~3.5× cheaper (4.9 against 17.7 ms per second of speech) with the same pass band and
 * image rejection (docs/performance.md, "client_render_cpu"). Zero-phase: output sample j sits at
 * input time j / L, so phone timings stay where they were.
 */

/**
 * Input samples each output sample is drawn from. 32 gives a ~2.5 kHz transition band at 48 kHz out (Kaiser,
 * ~80 dB): flat to ~6 kHz, images of 16 kHz speech suppressed from ~8.5 kHz; fewer widens the band, more only costs.
 */
const TAPS_PER_PHASE = 32;
/** Cut-off as a fraction of the input's Nyquist frequency (7.2 kHz for 16 kHz speech), the band centred below it. */
const CUTOFF_OF_NYQUIST = 0.9;
/** Kaiser window shape for ~80 dB stop-band attenuation (β = 0.1102 · (A − 8.7)). */
const KAISER_BETA = 7.86;
/** Whole factors this file serves (8 kHz → 48 kHz is 6); other ratios go through libsamplerate. */
export const MAX_UPSAMPLE_FACTOR = 12;

function besselI0(x: number): number {
  let sum = 1;
  let term = 1;
  for (let k = 1; k < 50; k++) {
    term *= (x / (2 * k)) ** 2;
    sum += term;
    if (term < sum * 1e-12) break;
  }
  return sum;
}

function kernel(t: number): number {
  const half = TAPS_PER_PHASE / 2;
  const ratio = t / half;
  if (Math.abs(ratio) >= 1) return 0;
  const window = besselI0(KAISER_BETA * Math.sqrt(1 - ratio * ratio)) / besselI0(KAISER_BETA);
  const x = CUTOFF_OF_NYQUIST * t;
  const sinc = x === 0 ? 1 : Math.sin(Math.PI * x) / (Math.PI * x);
  return CUTOFF_OF_NYQUIST * sinc * window;
}

/**
 * Per phase p, the weights of input samples n − TAPS_PER_PHASE/2 + 1 … n + TAPS_PER_PHASE/2 for output n·L + p,
 * each phase scaled to sum 1 (a constant stays exactly constant: no phase-periodic ripple).
 */
const phasesByFactor = new Map<number, Float64Array[]>();

function phasesFor(factor: number): Float64Array[] {
  let phases = phasesByFactor.get(factor);
  if (!phases) {
    phases = Array.from({ length: factor }, (_, phase) => {
      const weights = new Float64Array(TAPS_PER_PHASE);
      for (let tap = 0; tap < TAPS_PER_PHASE; tap++) {
        const inputOffset = tap - TAPS_PER_PHASE / 2 + 1;
        weights[tap] = kernel(phase / factor - inputOffset);
      }
      const sum = weights.reduce((total, weight) => total + weight, 0);
      return weights.map((weight) => weight / sum);
    });
    phasesByFactor.set(factor, phases);
  }
  return phases;
}

/** Whether `upsamplePcm16` serves this rate pair. */
export function isWholeUpsample(fromRate: number, toRate: number): boolean {
  const factor = toRate / fromRate;
  return Number.isInteger(factor) && factor >= 2 && factor <= MAX_UPSAMPLE_FACTOR;
}

/** `pcm` at `factor` times its rate (outside the input counts as silence). */
export function upsamplePcm16(pcm: Int16Array, factor: number): Int16Array {
  if (!Number.isInteger(factor) || factor < 2 || factor > MAX_UPSAMPLE_FACTOR) {
    throw new RangeError(`upsampling factor must be a whole number from 2 to ${MAX_UPSAMPLE_FACTOR}, got ${factor}`);
  }
  const phases = phasesFor(factor);
  const out = new Int16Array(pcm.length * factor);
  const first = 1 - TAPS_PER_PHASE / 2;
  for (let n = 0; n < pcm.length; n++) {
    const start = n + first;
    const inside = start >= 0 && start + TAPS_PER_PHASE <= pcm.length;
    for (let phase = 0; phase < factor; phase++) {
      const weights = phases[phase]!;
      let sum = 0;
      if (inside) {
        for (let tap = 0; tap < TAPS_PER_PHASE; tap++) sum += weights[tap]! * pcm[start + tap]!;
      } else {
        for (let tap = 0; tap < TAPS_PER_PHASE; tap++) {
          const index = start + tap;
          if (index >= 0 && index < pcm.length) sum += weights[tap]! * pcm[index]!;
        }
      }
      const rounded = Math.round(sum);
      out[n * factor + phase] = rounded > 32767 ? 32767 : rounded < -32768 ? -32768 : rounded;
    }
  }
  return out;
}
