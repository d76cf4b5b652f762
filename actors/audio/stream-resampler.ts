/**
 * Streaming sample-rate conversion of 16-bit mono PCM that arrives in small chunks (a microphone's 10 ms
 * WebRTC buffers, a WebSocket's 20 ms frames). `resamplePcm16` converts each call on its own, which leaves
 * a filter transient at every chunk edge — a hundred per second at 10 ms. This converter keeps its filter
 * history and fractional position between chunks, so the output is the same however the input is cut.
 *
 * Windowed-sinc interpolation (Blackman window, cut-off at 0.9 × the lower Nyquist frequency), with the
 * kernel tabulated at `PHASES` fractional positions. Synchronous and allocation-light: about 2 × HALF_TAPS ×
 * (input/output rate) multiply-adds per output sample (≈ 1.5 M/s for 48 → 16 kHz).
 */

/**
 * Output-rate periods each side of the interpolation point; in input samples this grows with the ratio
 * when downsampling (48 taps each side for 48 → 16 kHz), so the transition band stays narrow: > 55 dB
 * down at 1.25 × the new Nyquist frequency.
 */
export const HALF_TAPS = 16;
/** Fractional positions the kernel is tabulated at; the nearest is used (≈ 0.2 % of a sample, far below audible). */
const PHASES = 256;
/** Cut-off relative to the lower of the two Nyquist frequencies, leaving room for the transition band. */
const CUTOFF = 0.9;

export class StreamResampler {
  private readonly step: number;
  private readonly kernel: Float32Array;
  /** Input samples each side of the interpolation point. */
  private readonly half: number;
  /** Input history: the samples of earlier chunks the next output still needs, then the current chunk. */
  private history: Float32Array;
  /** Position of the next output sample, in input samples from the start of `history`. */
  private position: number;

  constructor(
    readonly fromRate: number,
    readonly toRate: number,
  ) {
    if (!(Number.isInteger(fromRate) && fromRate > 0 && Number.isInteger(toRate) && toRate > 0)) {
      throw new RangeError(`sample rates must be positive integers, got ${fromRate} → ${toRate}`);
    }
    this.step = fromRate / toRate;
    const ratio = Math.min(1, toRate / fromRate);
    this.half = Math.ceil(HALF_TAPS / ratio);
    this.kernel = buildKernel(ratio * CUTOFF, this.half);
    this.history = new Float32Array(2 * this.half);
    this.position = this.half;
  }

  /** Converts the next chunk; the output lags the input by the filter's half-width (1 ms at 48 kHz). */
  push(pcm: Int16Array): Int16Array {
    if (this.fromRate === this.toRate) return pcm.slice();
    const joined = new Float32Array(this.history.length + pcm.length);
    joined.set(this.history);
    for (let i = 0; i < pcm.length; i++) joined[this.history.length + i] = pcm[i];
    // Output samples whose whole window (position ± HALF_TAPS) lies inside what we have.
    const half = this.half;
    const last = joined.length - half;
    const count = Math.max(0, Math.ceil((last - this.position) / this.step));
    const out = new Int16Array(count);
    const taps = 2 * half;
    for (let n = 0; n < count; n++) {
      const t = this.position + n * this.step;
      const base = Math.floor(t);
      const phase = Math.min(PHASES - 1, Math.round((t - base) * PHASES));
      const row = phase * taps;
      let sum = 0;
      // Taps at base - half + 1 … base + half.
      const first = base - half + 1;
      for (let k = 0; k < taps; k++) sum += joined[first + k] * this.kernel[row + k];
      out[n] = sum > 32767 ? 32767 : sum < -32768 ? -32768 : Math.round(sum);
    }
    const next = this.position + count * this.step;
    // Keep the window the next output needs; rebase the position onto the kept history.
    const keepFrom = Math.max(0, Math.floor(next) - half);
    this.history = joined.slice(keepFrom);
    this.position = next - keepFrom;
    return out;
  }
}

/** Kernel rows per phase: row p holds the weights of taps base-half+1 … base+half for fraction p/PHASES. */
function buildKernel(cutoff: number, half: number): Float32Array {
  const taps = 2 * half;
  const kernel = new Float32Array(PHASES * taps);
  for (let p = 0; p < PHASES; p++) {
    const fraction = p / PHASES;
    let sum = 0;
    for (let k = 0; k < taps; k++) {
      const x = k - half + 1 - fraction; // tap position relative to the interpolation point
      const sinc = x === 0 ? 1 : Math.sin(Math.PI * cutoff * x) / (Math.PI * cutoff * x);
      const w = (x + half) / (2 * half); // 0…1 across the window
      const blackman = 0.42 - 0.5 * Math.cos(2 * Math.PI * w) + 0.08 * Math.cos(4 * Math.PI * w);
      const weight = sinc * Math.max(0, blackman);
      kernel[p * taps + k] = weight;
      sum += weight;
    }
    // Unity gain at DC for every phase.
    for (let k = 0; k < taps; k++) kernel[p * taps + k] /= sum;
  }
  return kernel;
}
