/**
 * Turns one chunk of speech into a mouth track: a pose and a level for any moment of the chunk.
 * Everything is computed once per 10 ms hop at build time; lookups interpolate between hops.
 *
 * With phone timings: each hop's target is the viseme of the phone ~25 ms ahead (lips move before
 * the sound), blended with its neighbours by a ±50 ms raised-cosine window weighted by viseme
 * dominance (so m/b/p still close fully between vowels), then scaled by the audio's energy so that
 * silence closes the mouth whatever the phones say.
 * Without timings: derived from the audio — energy and the F1-band centroid for `open`, the
 * high-band/low-band energy ratio for `wide` vs `round` — smoothed with a fast attack and slow release.
 */
import type { PhoneTiming } from '../tts/types.ts';
import { CLOSED_MOUTH, type MouthPose } from '../render/types.ts';
import { analyseAudio, HOP_MS, type AudioFeatures } from './audio-features.ts';
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
/** Level (0..1, i.e. -60..0 dBFS) below which the mouth is shut and above which energy no longer limits it. */
const SILENCE_LEVEL = 0.25;
const FULL_VOICE_LEVEL = 0.55;
/** Envelope times for the audio-only track: open quickly on onsets, close more slowly. */
const ATTACK_MS = 15;
const RELEASE_MS = 50;

const clamp01 = (value: number): number => (value > 1 ? 1 : value > 0 ? value : 0);

function energyGate(level: number): number {
  const x = clamp01((level - SILENCE_LEVEL) / (FULL_VOICE_LEVEL - SILENCE_LEVEL));
  return x * x * (3 - 2 * x);
}

interface PoseTrack {
  open: Float32Array;
  wide: Float32Array;
  round: Float32Array;
}

function emptyTrack(hops: number): PoseTrack {
  return { open: new Float32Array(hops), wide: new Float32Array(hops), round: new Float32Array(hops) };
}

/** Smoothed energy gate: the slow release keeps a short stop closure inside a word from snapping the jaw shut. */
function smoothedGate(features: AudioFeatures): Float32Array {
  return envelope(features.level.map(energyGate));
}

function envelope(values: Float32Array): Float32Array {
  const attack = 1 - Math.exp(-HOP_MS / ATTACK_MS);
  const release = 1 - Math.exp(-HOP_MS / RELEASE_MS);
  const out = new Float32Array(values.length);
  let state = 0;
  for (let i = 0; i < values.length; i++) {
    const target = values[i];
    state += (target - state) * (target > state ? attack : release);
    out[i] = state;
  }
  return out;
}

function trackFromPhones(phones: PhoneTiming[], features: AudioFeatures): PoseTrack {
  const hops = features.hopCount;
  const sorted = [...phones].sort((a, b) => a.startMs - b.startMs);
  const visemeAtHop = new Array<ReturnType<typeof visemeForPhone>>(hops);
  let phoneIndex = 0;
  for (let hop = 0; hop < hops; hop++) {
    const ms = (hop + 0.5) * HOP_MS + ANTICIPATION_MS;
    while (phoneIndex < sorted.length - 1 && sorted[phoneIndex].endMs <= ms) phoneIndex++;
    const phone = sorted[phoneIndex];
    visemeAtHop[hop] = phone && ms >= phone.startMs && ms < phone.endMs ? visemeForPhone(phone.phone) : 'sil';
  }
  const halfWidth = Math.round(BLEND_HALF_WIDTH_MS / HOP_MS);
  const kernel = Array.from({ length: 2 * halfWidth + 1 }, (_, k) => 0.5 + 0.5 * Math.cos((Math.PI * (k - halfWidth)) / (halfWidth + 1)));
  const gate = smoothedGate(features);
  const track = emptyTrack(hops);
  for (let hop = 0; hop < hops; hop++) {
    let weightSum = 0;
    let open = 0;
    let wide = 0;
    let round = 0;
    for (let k = -halfWidth; k <= halfWidth; k++) {
      const neighbour = visemeAtHop[Math.min(hops - 1, Math.max(0, hop + k))];
      const weight = kernel[k + halfWidth] * VISEME_DOMINANCE[neighbour];
      const pose = VISEME_POSES[neighbour];
      weightSum += weight;
      open += weight * pose.open;
      wide += weight * pose.wide;
      round += weight * pose.round;
    }
    const scale = gate[hop];
    track.open[hop] = (open / weightSum) * scale;
    track.wide[hop] = (wide / weightSum) * scale;
    track.round[hop] = (round / weightSum) * scale;
  }
  return track;
}

/** Above this brightness (Hz) a frame is fricative noise (s, sh, f): teeth close, lips do not round. */
const FRICATIVE_BRIGHTNESS_HZ = 2000;
const FRICATIVE_FULL_HZ = 3500;

function trackFromAudio(features: AudioFeatures): PoseTrack {
  const hops = features.hopCount;
  const raw = emptyTrack(hops);
  for (let hop = 0; hop < hops; hop++) {
    const gate = energyGate(features.level[hop]);
    if (gate === 0) continue;
    const fricative = clamp01((features.brightness[hop] - FRICATIVE_BRIGHTNESS_HZ) / (FRICATIVE_FULL_HZ - FRICATIVE_BRIGHTNESS_HZ));
    // Measured on flite/eSpeak speech: the 200-1000 Hz centroid is ~300 Hz for i/u/m, ~500 Hz for a/o.
    const openness = clamp01((features.lowCentroid[hop] - 280) / 250);
    // High/low band ratio (log10): ~-2.8 for u, ~-2.1 for o, ~-1.0 for e, >0 for s.
    const ratio = features.highToLowRatio[hop];
    raw.open[hop] = gate * (0.25 + 0.75 * openness) * (1 - 0.6 * fricative);
    raw.wide[hop] = gate * clamp01((ratio + 2.3) / 1.5);
    raw.round[hop] = gate * clamp01((-ratio - 1.9) / 0.8) * (1 - fricative);
  }
  return { open: envelope(raw.open), wide: envelope(raw.wide), round: envelope(raw.round) };
}

function sampleAt(values: Float32Array, ms: number): number {
  const position = ms / HOP_MS - 0.5;
  if (position <= 0) return values[0] ?? 0;
  const lower = Math.floor(position);
  if (lower >= values.length - 1) return values[values.length - 1] ?? 0;
  const fraction = position - lower;
  return values[lower] + (values[lower + 1] - values[lower]) * fraction;
}

export function buildMouthTimeline(chunk: MouthSource): MouthTimeline {
  const durationMs = chunk.sampleRate > 0 ? (chunk.pcm.length / chunk.sampleRate) * 1000 : 0;
  if (durationMs === 0) {
    return { durationMs: 0, poseAt: () => ({ ...CLOSED_MOUTH }), levelAt: () => 0 };
  }
  const features = analyseAudio(chunk.pcm, chunk.sampleRate);
  const track = chunk.phones && chunk.phones.length > 0 ? trackFromPhones(chunk.phones, features) : trackFromAudio(features);
  const inside = (ms: number): boolean => Number.isFinite(ms) && ms >= 0 && ms <= durationMs;
  return {
    durationMs,
    poseAt(ms: number): MouthPose {
      if (!inside(ms)) return { ...CLOSED_MOUTH };
      return {
        open: clamp01(sampleAt(track.open, ms)),
        wide: clamp01(sampleAt(track.wide, ms)),
        round: clamp01(sampleAt(track.round, ms)),
      };
    },
    levelAt(ms: number): number {
      return inside(ms) ? clamp01(sampleAt(features.level, ms)) : 0;
    },
  };
}
