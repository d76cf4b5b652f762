/**
 * The avatar's own voice must not barge in on itself. Echo cancellation is the browser's job
 * (`getUserMedia({ audio: { echoCancellation: true } })`), but a first reply often plays before the
 * browser's canceller has converged, and a non-browser client may have none. So the server double-checks
 * one case: a speech onset within `ECHO_ONSET_WINDOW_MS` after the avatar's audio started. There the
 * microphone's loudness envelope (10 ms RMS in dB) from `ECHO_PRE_ONSET_MS` before the onset to
 * `ECHO_POST_ONSET_MS` after it is compared with the envelope of what the service sent, at every delay up to
 * `ECHO_MAX_DELAY_MS`; a Pearson correlation of their frame-to-frame changes of `ECHO_CORRELATION` or more
 * says the "speech" is the avatar heard back, and the onset is ignored. Envelopes, not waveforms: the codec,
 * resampling, the room and the canceller's residue change the waveform beyond recognition but keep the
 * syllable rhythm. Changes, not levels, and a window reaching back before the onset: two unrelated voices'
 * level contours over 300 ms correlate at 0.69 (median, best of the delays) on the fixture; their changes over
 * 200 ms before to 400 ms after the onset at most 0.72 (126 voice pairs and onsets), while the echoes correlate at
 * 0.86–0.95. With only 320 ms after the onset unrelated pairs reached 0.82, hence the wait for 400 ms.
 * Pure: envelopes in, a decision out.
 */

/** Envelope resolution: the playout's chunk and a mic buffer are both 10 ms. */
export const ENVELOPE_MS = 10;
/** After the avatar's audio starts, onsets this soon are checked against it (a canceller converges in ~1–2 s). */
export const ECHO_ONSET_WINDOW_MS = 2_000;
/** Longest delay between the service sending audio and hearing it back (WebRTC both ways + device buffers). */
export const ECHO_MAX_DELAY_MS = 400;
/** Correlation of envelope changes from which the onset is the avatar's own voice (unrelated voices: ≤ 0.75 measured). */
export const ECHO_CORRELATION = 0.8;
/** The compared span starts this long before the onset: an echo's silence-to-speech edge lines up too. */
export const ECHO_PRE_ONSET_MS = 200;
/**
 * …and ends this long after it: the decision waits for it (a speech start is confirmed ~300 ms after the onset,
 * so barge-in in the first ECHO_ONSET_WINDOW_MS of a reply comes up to ~100 ms later than elsewhere).
 */
export const ECHO_POST_ONSET_MS = 400;
/** History kept per direction: the checked span plus the longest delay, with margin (≈ 10 KB of floats each). */
export const ENVELOPE_HISTORY_MS = 3_000;
/** Quieter than this is silence for the envelope (dBFS); keeps digital silence from dominating correlations. */
const FLOOR_DB = -70;

/** A loudness envelope on a shared clock: one value per `ENVELOPE_MS`, indexed by ms / ENVELOPE_MS. */
export class Envelope {
  private readonly values = new Map<number, number>();
  private readonly capacity = Math.ceil(ENVELOPE_HISTORY_MS / ENVELOPE_MS);
  private partial: { slot: number; sum: number; count: number } | null = null;

  /** Adds samples that end at `atMs` (performance.now() on arrival or departure). */
  add(samples: Int16Array, atMs: number): void {
    if (samples.length === 0) return;
    // Spread over the chunk's own duration is unknown here; a 10 ms chunk lands in one slot, which is the resolution anyway.
    const slot = Math.floor(atMs / ENVELOPE_MS);
    let sum = 0;
    for (let i = 0; i < samples.length; i++) sum += samples[i] * samples[i];
    if (this.partial && this.partial.slot === slot) {
      this.partial.sum += sum;
      this.partial.count += samples.length;
    } else {
      this.partial = { slot, sum, count: samples.length };
    }
    this.values.set(slot, toDb(this.partial.sum / this.partial.count));
    if (this.values.size > this.capacity) {
      const oldest = this.values.keys().next().value as number;
      this.values.delete(oldest);
    }
  }

  /**
   * Values for slots [fromMs, toMs). A slot without a chunk (timer jitter put two chunks in its neighbour)
   * holds the previous value; before any value, silence.
   */
  range(fromMs: number, toMs: number): Float64Array {
    const first = Math.floor(fromMs / ENVELOPE_MS);
    const last = Math.floor(toMs / ENVELOPE_MS);
    const out = new Float64Array(Math.max(0, last - first));
    let held = FLOOR_DB;
    for (let i = 0; i < out.length; i++) {
      held = this.values.get(first + i) ?? held;
      out[i] = held;
    }
    return out;
  }
}

function toDb(meanSquare: number): number {
  const rms = Math.sqrt(meanSquare) / 32768;
  return Math.max(FLOOR_DB, 20 * Math.log10(rms || 1e-9));
}

/** Frame-to-frame changes of an envelope. */
function changes(values: Float64Array): Float64Array {
  const out = new Float64Array(Math.max(0, values.length - 1));
  for (let i = 1; i < values.length; i++) out[i - 1] = values[i] - values[i - 1];
  return out;
}

function pearson(a: Float64Array, b: Float64Array): number {
  const n = Math.min(a.length, b.length);
  if (n < 3) return 0;
  let ma = 0;
  let mb = 0;
  for (let i = 0; i < n; i++) {
    ma += a[i];
    mb += b[i];
  }
  ma /= n;
  mb /= n;
  let cov = 0;
  let va = 0;
  let vb = 0;
  for (let i = 0; i < n; i++) {
    cov += (a[i] - ma) * (b[i] - mb);
    va += (a[i] - ma) ** 2;
    vb += (b[i] - mb) ** 2;
  }
  // A flat envelope (steady tone, silence) correlates with nothing.
  if (va < 1e-6 || vb < 1e-6) return 0;
  return cov / Math.sqrt(va * vb);
}

/**
 * Best correlation between the changes of the mic's envelope over [fromMs, toMs) and those of the sent
 * envelope over the same span moved earlier by 0…ECHO_MAX_DELAY_MS.
 */
export function echoCorrelation(
  mic: Envelope,
  sent: Envelope,
  fromMs: number,
  toMs: number,
): { correlation: number; delayMs: number } {
  const heard = changes(mic.range(fromMs, toMs));
  let best = { correlation: -1, delayMs: 0 };
  for (let delay = 0; delay <= ECHO_MAX_DELAY_MS; delay += ENVELOPE_MS) {
    const correlation = pearson(heard, changes(sent.range(fromMs - delay, toMs - delay)));
    if (correlation > best.correlation) best = { correlation, delayMs: delay };
  }
  return best;
}

/** Whether an onset at `onsetMs` needs the echo check: within ECHO_ONSET_WINDOW_MS after the avatar's audio started. */
export function needsEchoCheck(onsetMs: number, avatarStartedMs: number | null): boolean {
  return avatarStartedMs !== null && onsetMs - avatarStartedMs <= ECHO_ONSET_WINDOW_MS;
}

/**
 * Whether a speech onset at `onsetMs` is the avatar's own voice (audio until onset + ECHO_POST_ONSET_MS must
 * be in): only checked within ECHO_ONSET_WINDOW_MS after the avatar's audio started at `avatarStartedMs`.
 */
export function isEcho(mic: Envelope, sent: Envelope, onsetMs: number, avatarStartedMs: number | null): boolean {
  if (!needsEchoCheck(onsetMs, avatarStartedMs)) return false;
  return (
    echoCorrelation(mic, sent, onsetMs - ECHO_PRE_ONSET_MS, onsetMs + ECHO_POST_ONSET_MS).correlation >=
    ECHO_CORRELATION
  );
}
