/**
 * The service's FFT: a small mixed-radix FFT, for the Wav2Lip mel front end, whose n_fft is 800 = 2^5 · 5^2 (not a
 * power of two), and the mouth analysis's spectral shape (`actors/mouth/audio-features.ts`, 512 points at 16 kHz).
 *
 * `ComplexFft` is a Stockham autosort FFT (decimation in frequency, natural order in and out, no bit reversal):
 * each stage of radix r splits the current length n into r interleaved sub-transforms of length n/r, with
 * twiddles precomputed per stage. Radix 4, 2 and 5 have hand-written butterflies; any other factor uses a small
 * direct DFT from a precomputed table of r-th roots of unity.
 *
 * `RealFft` transforms n real samples (n even) with one complex FFT of n/2 points on the packed sequence
 * z[k] = x[2k] + i·x[2k+1] and a split step, so an 800-point frame costs a 400-point (4·4·5·5) complex FFT.
 */

/** Factors in the order the stages use them: fours first (cheapest butterflies per point), then twos, then odd primes. */
function factorize(n: number): number[] {
  const factors: number[] = [];
  let rest = n;
  while (rest % 4 === 0) {
    factors.push(4);
    rest /= 4;
  }
  while (rest % 2 === 0) {
    factors.push(2);
    rest /= 2;
  }
  for (let p = 3; rest > 1; p += 2) {
    while (rest % p === 0) {
      factors.push(p);
      rest /= p;
    }
  }
  return factors;
}

const COS_1_5 = Math.cos((2 * Math.PI) / 5);
const COS_2_5 = Math.cos((4 * Math.PI) / 5);
const SIN_1_5 = Math.sin((2 * Math.PI) / 5);
const SIN_2_5 = Math.sin((4 * Math.PI) / 5);

interface Stage {
  radix: number;
  /** Length of each sub-transform this stage splits, and the stride between its interleaved sequences. */
  length: number;
  stride: number;
  /** twiddle (p, k) = exp(-2πi·p·k/length) at index p·(radix−1) + (k−1), for k = 1..radix−1. */
  twiddleRe: Float64Array;
  twiddleIm: Float64Array;
}

export class ComplexFft {
  private readonly stages: Stage[] = [];
  private readonly workRe: Float64Array;
  private readonly workIm: Float64Array;
  /** r-th roots of unity for generic (odd) radices, keyed by radix. */
  private readonly roots = new Map<number, { re: Float64Array; im: Float64Array }>();
  private readonly scratchRe: Float64Array;
  private readonly scratchIm: Float64Array;

  constructor(readonly size: number) {
    if (!Number.isInteger(size) || size < 1) throw new RangeError('FFT size must be a positive integer');
    let length = size;
    let stride = 1;
    let largestRadix = 1;
    for (const radix of factorize(size)) {
      const m = length / radix;
      const twiddleRe = new Float64Array(m * (radix - 1));
      const twiddleIm = new Float64Array(m * (radix - 1));
      for (let p = 0; p < m; p++) {
        for (let k = 1; k < radix; k++) {
          const angle = (-2 * Math.PI * p * k) / length;
          twiddleRe[p * (radix - 1) + k - 1] = Math.cos(angle);
          twiddleIm[p * (radix - 1) + k - 1] = Math.sin(angle);
        }
      }
      this.stages.push({ radix, length, stride, twiddleRe, twiddleIm });
      if (radix !== 2 && radix !== 4 && radix !== 5 && !this.roots.has(radix)) {
        const re = new Float64Array(radix);
        const im = new Float64Array(radix);
        for (let j = 0; j < radix; j++) {
          re[j] = Math.cos((-2 * Math.PI * j) / radix);
          im[j] = Math.sin((-2 * Math.PI * j) / radix);
        }
        this.roots.set(radix, { re, im });
      }
      largestRadix = Math.max(largestRadix, radix);
      length = m;
      stride *= radix;
    }
    this.workRe = new Float64Array(size);
    this.workIm = new Float64Array(size);
    this.scratchRe = new Float64Array(largestRadix);
    this.scratchIm = new Float64Array(largestRadix);
  }

  /** Forward transform in place: X[k] = Σ x[n]·exp(−2πi·nk/N). */
  forward(re: Float64Array, im: Float64Array): void {
    if (re.length !== this.size || im.length !== this.size)
      throw new RangeError('FFT input length does not match the plan');
    let srcRe = re;
    let srcIm = im;
    let dstRe = this.workRe;
    let dstIm = this.workIm;
    for (const stage of this.stages) {
      if (stage.radix === 4) this.radix4(stage, srcRe, srcIm, dstRe, dstIm);
      else if (stage.radix === 2) this.radix2(stage, srcRe, srcIm, dstRe, dstIm);
      else if (stage.radix === 5) this.radix5(stage, srcRe, srcIm, dstRe, dstIm);
      else this.radixGeneric(stage, srcRe, srcIm, dstRe, dstIm);
      [srcRe, dstRe] = [dstRe, srcRe];
      [srcIm, dstIm] = [dstIm, srcIm];
    }
    if (srcRe !== re) {
      re.set(srcRe);
      im.set(srcIm);
    }
  }

  private radix2(stage: Stage, xr: Float64Array, xi: Float64Array, yr: Float64Array, yi: Float64Array): void {
    const { length, stride: s, twiddleRe, twiddleIm } = stage;
    const m = length / 2;
    for (let p = 0; p < m; p++) {
      const wr = twiddleRe[p];
      const wi = twiddleIm[p];
      for (let q = 0; q < s; q++) {
        const a = q + s * p;
        const b = a + s * m;
        const out = q + s * 2 * p;
        const dr = xr[a] - xr[b];
        const di = xi[a] - xi[b];
        yr[out] = xr[a] + xr[b];
        yi[out] = xi[a] + xi[b];
        yr[out + s] = dr * wr - di * wi;
        yi[out + s] = dr * wi + di * wr;
      }
    }
  }

  private radix4(stage: Stage, xr: Float64Array, xi: Float64Array, yr: Float64Array, yi: Float64Array): void {
    const { length, stride: s, twiddleRe, twiddleIm } = stage;
    const m = length / 4;
    const sm = s * m;
    for (let p = 0; p < m; p++) {
      const w1r = twiddleRe[3 * p];
      const w1i = twiddleIm[3 * p];
      const w2r = twiddleRe[3 * p + 1];
      const w2i = twiddleIm[3 * p + 1];
      const w3r = twiddleRe[3 * p + 2];
      const w3i = twiddleIm[3 * p + 2];
      for (let q = 0; q < s; q++) {
        const i0 = q + s * p;
        const i1 = i0 + sm;
        const i2 = i1 + sm;
        const i3 = i2 + sm;
        const t0r = xr[i0] + xr[i2];
        const t0i = xi[i0] + xi[i2];
        const t1r = xr[i0] - xr[i2];
        const t1i = xi[i0] - xi[i2];
        const t2r = xr[i1] + xr[i3];
        const t2i = xi[i1] + xi[i3];
        const t3r = xr[i1] - xr[i3];
        const t3i = xi[i1] - xi[i3];
        // b1 = t1 − i·t3, b3 = t1 + i·t3 (the 4th root of unity for a forward transform is −i).
        const b1r = t1r + t3i;
        const b1i = t1i - t3r;
        const b2r = t0r - t2r;
        const b2i = t0i - t2i;
        const b3r = t1r - t3i;
        const b3i = t1i + t3r;
        const out = q + s * 4 * p;
        yr[out] = t0r + t2r;
        yi[out] = t0i + t2i;
        yr[out + s] = b1r * w1r - b1i * w1i;
        yi[out + s] = b1r * w1i + b1i * w1r;
        yr[out + 2 * s] = b2r * w2r - b2i * w2i;
        yi[out + 2 * s] = b2r * w2i + b2i * w2r;
        yr[out + 3 * s] = b3r * w3r - b3i * w3i;
        yi[out + 3 * s] = b3r * w3i + b3i * w3r;
      }
    }
  }

  private radix5(stage: Stage, xr: Float64Array, xi: Float64Array, yr: Float64Array, yi: Float64Array): void {
    const { length, stride: s, twiddleRe, twiddleIm } = stage;
    const m = length / 5;
    const sm = s * m;
    for (let p = 0; p < m; p++) {
      for (let q = 0; q < s; q++) {
        const i0 = q + s * p;
        const a0r = xr[i0];
        const a0i = xi[i0];
        // Pairs of inputs symmetric around the middle share the cosine terms; their differences the sines.
        const t1r = xr[i0 + sm] + xr[i0 + 4 * sm];
        const t1i = xi[i0 + sm] + xi[i0 + 4 * sm];
        const t2r = xr[i0 + 2 * sm] + xr[i0 + 3 * sm];
        const t2i = xi[i0 + 2 * sm] + xi[i0 + 3 * sm];
        const t3r = xr[i0 + sm] - xr[i0 + 4 * sm];
        const t3i = xi[i0 + sm] - xi[i0 + 4 * sm];
        const t4r = xr[i0 + 2 * sm] - xr[i0 + 3 * sm];
        const t4i = xi[i0 + 2 * sm] - xi[i0 + 3 * sm];
        const t5r = a0r + COS_1_5 * t1r + COS_2_5 * t2r;
        const t5i = a0i + COS_1_5 * t1i + COS_2_5 * t2i;
        const t6r = a0r + COS_2_5 * t1r + COS_1_5 * t2r;
        const t6i = a0i + COS_2_5 * t1i + COS_1_5 * t2i;
        const t7r = SIN_1_5 * t3r + SIN_2_5 * t4r;
        const t7i = SIN_1_5 * t3i + SIN_2_5 * t4i;
        const t8r = SIN_2_5 * t3r - SIN_1_5 * t4r;
        const t8i = SIN_2_5 * t3i - SIN_1_5 * t4i;
        // b1 = t5 − i·t7, b4 = t5 + i·t7, b2 = t6 − i·t8, b3 = t6 + i·t8.
        const out = q + s * 5 * p;
        yr[out] = a0r + t1r + t2r;
        yi[out] = a0i + t1i + t2i;
        this.twiddleInto(yr, yi, out + s, t5r + t7i, t5i - t7r, twiddleRe, twiddleIm, 4 * p);
        this.twiddleInto(yr, yi, out + 2 * s, t6r + t8i, t6i - t8r, twiddleRe, twiddleIm, 4 * p + 1);
        this.twiddleInto(yr, yi, out + 3 * s, t6r - t8i, t6i + t8r, twiddleRe, twiddleIm, 4 * p + 2);
        this.twiddleInto(yr, yi, out + 4 * s, t5r - t7i, t5i + t7r, twiddleRe, twiddleIm, 4 * p + 3);
      }
    }
  }

  private twiddleInto(
    yr: Float64Array,
    yi: Float64Array,
    at: number,
    re: number,
    im: number,
    wRe: Float64Array,
    wIm: Float64Array,
    w: number,
  ): void {
    yr[at] = re * wRe[w] - im * wIm[w];
    yi[at] = re * wIm[w] + im * wRe[w];
  }

  private radixGeneric(stage: Stage, xr: Float64Array, xi: Float64Array, yr: Float64Array, yi: Float64Array): void {
    const { radix: r, length, stride: s, twiddleRe, twiddleIm } = stage;
    const { re: rootRe, im: rootIm } = this.roots.get(r)!;
    const ar = this.scratchRe;
    const ai = this.scratchIm;
    const m = length / r;
    for (let p = 0; p < m; p++) {
      for (let q = 0; q < s; q++) {
        for (let j = 0; j < r; j++) {
          ar[j] = xr[q + s * (p + j * m)];
          ai[j] = xi[q + s * (p + j * m)];
        }
        const out = q + s * r * p;
        for (let k = 0; k < r; k++) {
          let sumRe = 0;
          let sumIm = 0;
          for (let j = 0, jk = 0; j < r; j++, jk = (jk + k) % r) {
            sumRe += ar[j] * rootRe[jk] - ai[j] * rootIm[jk];
            sumIm += ar[j] * rootIm[jk] + ai[j] * rootRe[jk];
          }
          if (k === 0) {
            yr[out] = sumRe;
            yi[out] = sumIm;
          } else {
            const wr = twiddleRe[p * (r - 1) + k - 1];
            const wi = twiddleIm[p * (r - 1) + k - 1];
            yr[out + s * k] = sumRe * wr - sumIm * wi;
            yi[out + s * k] = sumRe * wi + sumIm * wr;
          }
        }
      }
    }
  }
}

/** Forward FFT of a real sequence of even length n → bins 0..n/2 (the rest is their complex conjugate). */
export class RealFft {
  readonly bins: number;
  private readonly half: ComplexFft;
  private readonly packedRe: Float64Array;
  private readonly packedIm: Float64Array;
  /** exp(−2πi·k/n) for k = 0..n/2, used by the split step. */
  private readonly splitRe: Float64Array;
  private readonly splitIm: Float64Array;

  constructor(readonly size: number) {
    if (!Number.isInteger(size) || size < 2 || size % 2 !== 0)
      throw new RangeError('real FFT size must be an even integer');
    const m = size / 2;
    this.bins = m + 1;
    this.half = new ComplexFft(m);
    this.packedRe = new Float64Array(m);
    this.packedIm = new Float64Array(m);
    this.splitRe = new Float64Array(m + 1);
    this.splitIm = new Float64Array(m + 1);
    for (let k = 0; k <= m; k++) {
      this.splitRe[k] = Math.cos((-2 * Math.PI * k) / size);
      this.splitIm[k] = Math.sin((-2 * Math.PI * k) / size);
    }
  }

  /** Writes X[k] for k = 0..n/2 into `outRe`/`outIm` (length ≥ n/2 + 1). */
  forward(input: ArrayLike<number>, outRe: Float64Array, outIm: Float64Array): void {
    const m = this.size / 2;
    const zr = this.packedRe;
    const zi = this.packedIm;
    for (let k = 0; k < m; k++) {
      zr[k] = input[2 * k];
      zi[k] = input[2 * k + 1];
    }
    this.half.forward(zr, zi);
    // With Z = FFT(z): even part E[k] = (Z[k] + conj Z[m−k]) / 2, odd part O[k] = (Z[k] − conj Z[m−k]) / 2i,
    // and X[k] = E[k] + exp(−2πi·k/n)·O[k].
    for (let k = 0; k <= m; k++) {
      const a = k % m;
      const b = (m - k) % m;
      const evenRe = (zr[a] + zr[b]) / 2;
      const evenIm = (zi[a] - zi[b]) / 2;
      const oddRe = (zi[a] + zi[b]) / 2;
      const oddIm = -(zr[a] - zr[b]) / 2;
      const wr = this.splitRe[k];
      const wi = this.splitIm[k];
      outRe[k] = evenRe + oddRe * wr - oddIm * wi;
      outIm[k] = evenIm + oddRe * wi + oddIm * wr;
    }
  }
}
