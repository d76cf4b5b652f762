/**
 * Turns one chunk of speech into a mouth track: a pose and a level for any moment of the chunk.
 * Everything is computed once per 10 ms hop, as far as lookups have asked (so a chunk costs nothing when it is
 * queued and its analysis is spread over its playback); lookups interpolate between hops.
 *
 * With phone timings: each hop's target is the viseme of the phone ~25 ms ahead (lips move before
 * the sound), blended with its neighbours by a ±50 ms raised-cosine window weighted by viseme
 * dominance (so m/b/p still close fully between vowels); its opening then follows the audio's loudness
 * (loud vowels open wide, quiet ones less) and its shape the audio's energy, so that silence closes the mouth
 * whatever the phones say.
 * Without timings: derived from the audio — energy and the F1-band centroid for `open`, the
 * high-band/low-band energy ratio for `wide` vs `round` — smoothed with a fast attack and slow release.
 */
import type { PhoneTiming } from './visemes.ts';
import { CLOSED_MOUTH, type MouthPose } from '../render/types.ts';
import { AudioAnalysis, HOP_MS } from './audio-features.ts';
import { VISEME_DOMINANCE, VISEME_POSES, visemeForPhone } from './visemes.ts';

export interface MouthTimeline {
  durationMs: number;
  poseAt(ms: number): MouthPose;
  levelAt(ms: number): number;
}

export interface MouthSource {
  pcm: Int16Array;
  sampleRate: number;
  phones?: PhoneTiming[];
}

/** Lips start moving toward a phone this long before its sound. */
const ANTICIPATION_MS = 25;
/** Half-width of the coarticulation window; transitions between visemes take roughly this long. */
const BLEND_HALF_WIDTH_MS = 50;
const BLEND_HALF_WIDTH_HOPS = Math.round(BLEND_HALF_WIDTH_MS / HOP_MS);
/** The raised-cosine weights of the hops in that window, centred on index BLEND_HALF_WIDTH_HOPS. */
const BLEND_KERNEL = Array.from(
  { length: 2 * BLEND_HALF_WIDTH_HOPS + 1 },
  (_, k) => 0.5 + 0.5 * Math.cos((Math.PI * (k - BLEND_HALF_WIDTH_HOPS)) / (BLEND_HALF_WIDTH_HOPS + 1)),
);
/** Level (0..1, i.e. -60..0 dBFS) below which the mouth is shut and above which energy no longer limits it. */
const SILENCE_LEVEL = 0.25;
const FULL_VOICE_LEVEL = 0.55;
/** Envelope times for the audio-only track: open quickly on onsets, close more slowly. */
const ATTACK_MS = 15;
const RELEASE_MS = 50;
/**
 * With phones, the opening follows loudness: the viseme blend's opening (square-rooted, so i/u/n still open visibly
 * while m/b/p stay shut) times how loud the audio under it is, linear in dB from `QUIET_DBFS` (shut) to `LOUD_DBFS`
 * (full). Loud vowels open wide, unstressed ones less, and a pause inside a chunk closes the mouth; wide and round
 * keep the viseme's shape. The phone blend gated only by silence followed the audio's RMS envelope with r 0.57 on
 * flite/eSpeak sentences, this with r 0.83 (issue 44; docs/performance.md).
 */
const QUIET_DBFS = -38;
const LOUD_DBFS = -12;
/**
 * The loudness is read this many hops ahead, as the phones are (`ANTICIPATION_MS`), from audio the chunk already holds:
 * 2 hops gave the best r at zero lag (0: mouth 10 ms late; 4: 20 ms early and r at zero lag down by 0.08).
 */
const LOUDNESS_AHEAD_HOPS = 2;

const clamp01 = (value: number): number => (value > 1 ? 1 : value > 0 ? value : 0);

function energyGate(level: number): number {
  const x = clamp01((level - SILENCE_LEVEL) / (FULL_VOICE_LEVEL - SILENCE_LEVEL));
  return x * x * (3 - 2 * x);
}

/**
 * A chunk's mouth track, extended hop by hop as far as it is asked for (`through`). Every hop's values depend
 * only on the audio up to it (the envelopes are causal; the phone blend reads phones, not audio), so the track
 * built in steps is the one built in one go.
 */
abstract class PoseTrack {
  readonly open: Float32Array;
  readonly wide: Float32Array;
  readonly round: Float32Array;
  private built = 0;

  constructor(protected readonly features: AudioAnalysis) {
    const hops = features.hopCount;
    this.open = new Float32Array(hops);
    this.wide = new Float32Array(hops);
    this.round = new Float32Array(hops);
  }

  get level(): Float32Array {
    return this.features.level;
  }

  /** Builds every hop up to and including `hop` (clamped to the chunk). */
  through(hop: number): void {
    const last = Math.min(this.features.hopCount - 1, hop);
    if (last < this.built) return;
    this.features.analyseThrough(last + this.readsAheadHops);
    for (; this.built <= last; this.built++) this.buildHop(this.built);
  }

  /** How many hops past the one being built `buildHop` reads (bounded so a track built in steps equals one built at once). */
  protected get readsAheadHops(): number {
    return 0;
  }

  protected abstract buildHop(hop: number): void;
}

/** One-pole smoothing toward each new value: open quickly on onsets, close more slowly. */
class Envelope {
  private static readonly attack = 1 - Math.exp(-HOP_MS / ATTACK_MS);
  private static readonly release = 1 - Math.exp(-HOP_MS / RELEASE_MS);
  private state = 0;

  next(target: number): number {
    this.state += (target - this.state) * (target > this.state ? Envelope.attack : Envelope.release);
    return this.state;
  }
}

/** Loudness 0..1 of a hop's level (0..1 = -60..0 dBFS): linear in dB between `QUIET_DBFS` and `LOUD_DBFS`. */
function loudnessOf(level: number): number {
  const dbfs = (level - 1) * 60;
  return clamp01((dbfs - QUIET_DBFS) / (LOUD_DBFS - QUIET_DBFS));
}

class PhoneTrack extends PoseTrack {
  private readonly visemeAtHop: ReturnType<typeof visemeForPhone>[];
  /** Smoothed energy gate: the slow release keeps a short stop closure inside a word from snapping the jaw shut. */
  private readonly gate = new Envelope();
  /** Smoothed loudness (0..1) of the audio just ahead of each hop: how far its viseme opens. */
  private readonly loudness = new Envelope();

  constructor(phones: PhoneTiming[], features: AudioAnalysis) {
    super(features);
    const hops = features.hopCount;
    const sorted = [...phones].sort((a, b) => a.startMs - b.startMs);
    this.visemeAtHop = new Array<ReturnType<typeof visemeForPhone>>(hops);
    let phoneIndex = 0;
    for (let hop = 0; hop < hops; hop++) {
      const ms = (hop + 0.5) * HOP_MS + ANTICIPATION_MS;
      while (phoneIndex < sorted.length - 1 && sorted[phoneIndex].endMs <= ms) phoneIndex++;
      const phone = sorted[phoneIndex];
      this.visemeAtHop[hop] = phone && ms >= phone.startMs && ms < phone.endMs ? visemeForPhone(phone.phone) : 'sil';
    }
  }

  protected override get readsAheadHops(): number {
    return LOUDNESS_AHEAD_HOPS;
  }

  protected buildHop(hop: number): void {
    const visemeAtHop = this.visemeAtHop;
    const hops = visemeAtHop.length;
    let weightSum = 0;
    let open = 0;
    let wide = 0;
    let round = 0;
    for (let k = -BLEND_HALF_WIDTH_HOPS; k <= BLEND_HALF_WIDTH_HOPS; k++) {
      const neighbour = visemeAtHop[Math.min(hops - 1, Math.max(0, hop + k))];
      const weight = BLEND_KERNEL[k + BLEND_HALF_WIDTH_HOPS] * VISEME_DOMINANCE[neighbour];
      const pose = VISEME_POSES[neighbour];
      weightSum += weight;
      open += weight * pose.open;
      wide += weight * pose.wide;
      round += weight * pose.round;
    }
    // Both rounded to the track's precision, as the gate track built in one go stored them.
    const scale = Math.fround(this.gate.next(Math.fround(energyGate(this.features.level[hop]))));
    const levelAhead = this.features.level[Math.min(hops - 1, hop + LOUDNESS_AHEAD_HOPS)];
    const loudness = Math.fround(this.loudness.next(Math.fround(loudnessOf(levelAhead))));
    this.open[hop] = Math.sqrt(open / weightSum) * loudness;
    this.wide[hop] = (wide / weightSum) * scale;
    this.round[hop] = (round / weightSum) * scale;
  }
}

/** Above this brightness (Hz) a frame is fricative noise (s, sh, f): teeth close, lips do not round. */
const FRICATIVE_BRIGHTNESS_HZ = 2000;
const FRICATIVE_FULL_HZ = 3500;

class AudioTrack extends PoseTrack {
  private readonly openEnvelope = new Envelope();
  private readonly wideEnvelope = new Envelope();
  private readonly roundEnvelope = new Envelope();

  protected buildHop(hop: number): void {
    const features = this.features;
    const gate = energyGate(features.level[hop]);
    let open = 0;
    let wide = 0;
    let round = 0;
    if (gate > 0) {
      const fricative = clamp01(
        (features.brightness[hop] - FRICATIVE_BRIGHTNESS_HZ) / (FRICATIVE_FULL_HZ - FRICATIVE_BRIGHTNESS_HZ),
      );
      // Measured on flite/eSpeak speech: the 200-1000 Hz centroid is ~300 Hz for i/u/m, ~500 Hz for a/o.
      const openness = clamp01((features.lowCentroid[hop] - 280) / 250);
      // High/low band ratio (log10): ~-2.8 for u, ~-2.1 for o, ~-1.0 for e, >0 for s.
      const ratio = features.highToLowRatio[hop];
      open = gate * (0.25 + 0.75 * openness) * (1 - 0.6 * fricative);
      wide = gate * clamp01((ratio + 2.3) / 1.5);
      round = gate * clamp01((-ratio - 1.9) / 0.8) * (1 - fricative);
    }
    // Rounded to the track's precision before smoothing, as a track built in one go stored them.
    this.open[hop] = this.openEnvelope.next(Math.fround(open));
    this.wide[hop] = this.wideEnvelope.next(Math.fround(wide));
    this.round[hop] = this.roundEnvelope.next(Math.fround(round));
  }
}

function sampleAt(values: Float32Array, ms: number): number {
  const position = ms / HOP_MS - 0.5;
  if (position <= 0) return values[0] ?? 0;
  const lower = Math.floor(position);
  if (lower >= values.length - 1) return values[values.length - 1] ?? 0;
  const fraction = position - lower;
  return values[lower] + (values[lower + 1] - values[lower]) * fraction;
}

/** The last hop `sampleAt` reads for `ms`. */
function lastHopAt(ms: number): number {
  return Math.max(0, Math.floor(ms / HOP_MS - 0.5) + 1);
}

export function buildMouthTimeline(chunk: MouthSource): MouthTimeline {
  const durationMs = chunk.sampleRate > 0 ? (chunk.pcm.length / chunk.sampleRate) * 1000 : 0;
  if (durationMs === 0) {
    return { durationMs: 0, poseAt: () => ({ ...CLOSED_MOUTH }), levelAt: () => 0 };
  }
  // Nothing is analysed here: the track is built as the playout asks for it (`AudioAnalysis`).
  const features = new AudioAnalysis(chunk.pcm, chunk.sampleRate);
  const track =
    chunk.phones && chunk.phones.length > 0 ? new PhoneTrack(chunk.phones, features) : new AudioTrack(features);
  const inside = (ms: number): boolean => Number.isFinite(ms) && ms >= 0 && ms <= durationMs;
  return {
    durationMs,
    poseAt(ms: number): MouthPose {
      if (!inside(ms)) return { ...CLOSED_MOUTH };
      track.through(lastHopAt(ms));
      return {
        open: clamp01(sampleAt(track.open, ms)),
        wide: clamp01(sampleAt(track.wide, ms)),
        round: clamp01(sampleAt(track.round, ms)),
      };
    },
    levelAt(ms: number): number {
      if (!inside(ms)) return 0;
      track.through(lastHopAt(ms));
      return clamp01(sampleAt(track.level, ms));
    },
  };
}
