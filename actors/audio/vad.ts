/**
 * Voice activity detection with the WebRTC VAD (libfvad compiled to WASM by @echogarden/fvad-wasm).
 * Raw per-frame decisions are turned into speech segments: short gaps are bridged (hangover), blips
 * shorter than a syllable are dropped, and segments are padded so word onsets and tails survive.
 * `splitForAsr` cuts long recordings at pauses so each piece fits a whisper window.
 */
import { resamplePcm16 } from './resample.ts';

export interface SpeechSegment {
  startMs: number;
  endMs: number;
}

export interface VadOptions {
  /** WebRTC VAD mode: 0 counts the most audio as speech, 3 the least. */
  aggressiveness?: 0 | 1 | 2 | 3;
  /** Analysis frame; libfvad accepts 10, 20 or 30 ms. */
  frameMs?: 10 | 20 | 30;
  /** Gaps shorter than this between speech runs are bridged (the pause between words is not an end). */
  mergeGapMs?: number;
  /** Segments shorter than this after bridging are dropped as clicks or noise bursts. */
  minSpeechMs?: number;
  /** Added before and after each segment; the detector reacts a frame or two late on soft onsets. */
  paddingMs?: number;
  signal?: AbortSignal;
}

export interface AudioPiece extends SpeechSegment {
  pcm: Int16Array;
}

const DEFAULT_AGGRESSIVENESS = 2;
const DEFAULT_FRAME_MS = 30;
/** Pauses between words are typically under 250 ms; a longer gap is a phrase boundary. */
const DEFAULT_MERGE_GAP_MS = 300;
/** Shorter than a short syllable. */
const DEFAULT_MIN_SPEECH_MS = 90;
const DEFAULT_PADDING_MS = 150;
/** Rates libfvad handles natively; anything else is resampled to 16 kHz for analysis only. */
const NATIVE_RATES = new Set([8000, 16000, 32000, 48000]);
const ANALYSIS_RATE = 16_000;
/** Frames processed between event-loop yields (~6 s of audio at 30 ms) so long files don't stall others. */
const FRAMES_PER_YIELD = 200;
/** Frames replayed before the real pass to settle libfvad's noise model (see classifyFrames). */
const WARM_UP_FRAMES = 10;
/** Window used to find the quietest cut point inside a too-long speech stretch. */
const CUT_SEARCH_WINDOW_MS = 10;

interface FvadModule {
  _fvad_new(): number;
  _fvad_free(instance: number): void;
  _fvad_set_mode(instance: number, mode: number): number;
  _fvad_set_sample_rate(instance: number, rate: number): number;
  _fvad_process(instance: number, samplesPointer: number, length: number): number;
  _malloc(bytes: number): number;
  _free(pointer: number): void;
  HEAP16: Int16Array;
}

// The package ships no type declarations; importing through a variable keeps the module untyped
// here and typed by FvadModule above instead of failing the strict build.
const FVAD_PACKAGE = '@echogarden/fvad-wasm';
let fvadModule: Promise<FvadModule> | undefined;

function loadFvad(): Promise<FvadModule> {
  if (!fvadModule) {
    fvadModule = (import(FVAD_PACKAGE) as Promise<{ default: () => Promise<FvadModule> }>).then((m) => m.default());
    // A failed load must not poison later calls.
    fvadModule.catch(() => (fvadModule = undefined));
  }
  return fvadModule;
}

/** Speech segments of `pcm`, in ms from its start, ordered and non-overlapping. */
export async function detectSpeechSegments(
  pcm: Int16Array,
  sampleRate: number,
  options: VadOptions = {},
): Promise<SpeechSegment[]> {
  options.signal?.throwIfAborted();
  const frameMs = options.frameMs ?? DEFAULT_FRAME_MS;
  const durationMs = (pcm.length / sampleRate) * 1000;
  const frameFlags = await classifyFrames(
    pcm,
    sampleRate,
    frameMs,
    options.aggressiveness ?? DEFAULT_AGGRESSIVENESS,
    options.signal,
  );
  const runs = speechRuns(frameFlags, frameMs);
  const bridged = mergeCloseSegments(runs, options.mergeGapMs ?? DEFAULT_MERGE_GAP_MS);
  const minSpeechMs = options.minSpeechMs ?? DEFAULT_MIN_SPEECH_MS;
  const padding = options.paddingMs ?? DEFAULT_PADDING_MS;
  const padded = bridged
    .filter((segment) => segment.endMs - segment.startMs >= minSpeechMs)
    .map((segment) => ({
      startMs: Math.max(0, segment.startMs - padding),
      endMs: Math.min(durationMs, segment.endMs + padding),
    }));
  return mergeCloseSegments(padded, 0).map((segment) => ({
    startMs: Math.round(segment.startMs),
    endMs: Math.round(segment.endMs),
  }));
}

/** The audio from the first detected speech to the end of the last; empty when there is no speech. */
export async function trimSilence(pcm: Int16Array, sampleRate: number, options: VadOptions = {}): Promise<AudioPiece> {
  const segments = await detectSpeechSegments(pcm, sampleRate, options);
  if (segments.length === 0) return { pcm: new Int16Array(0), startMs: 0, endMs: 0 };
  const startMs = segments[0].startMs;
  const endMs = segments[segments.length - 1].endMs;
  return { pcm: pcm.subarray(msToSample(startMs, sampleRate), msToSample(endMs, sampleRate)), startMs, endMs };
}

/**
 * Pieces of at most `maxSegmentMs` covering the detected speech, cut in pauses between segments;
 * a single stretch of speech longer than the limit is cut at its quietest moment. Silence between
 * pieces is dropped (whisper hallucinates on long silence). No speech → no pieces.
 */
export async function splitForAsr(
  pcm: Int16Array,
  sampleRate: number,
  maxSegmentMs: number,
  options: VadOptions = {},
): Promise<AudioPiece[]> {
  if (!(maxSegmentMs > 0)) throw new RangeError('maxSegmentMs must be positive');
  const segments = await detectSpeechSegments(pcm, sampleRate, options);
  const groups: SpeechSegment[] = [];
  for (const segment of segments) {
    const current = groups.at(-1);
    if (current && segment.endMs - current.startMs <= maxSegmentMs) current.endMs = segment.endMs;
    else groups.push({ ...segment });
  }
  const pieces: AudioPiece[] = [];
  for (const group of groups) {
    let startSample = msToSample(group.startMs, sampleRate);
    const endSample = msToSample(group.endMs, sampleRate);
    const maxSamples = Math.max(1, Math.floor((maxSegmentMs / 1000) * sampleRate));
    while (endSample - startSample > maxSamples) {
      const cut = quietestPoint(pcm, sampleRate, startSample + Math.floor(maxSamples / 2), startSample + maxSamples);
      pieces.push(pieceOf(pcm, sampleRate, startSample, cut));
      startSample = cut;
    }
    pieces.push(pieceOf(pcm, sampleRate, startSample, endSample));
  }
  return pieces;
}

async function classifyFrames(
  pcm: Int16Array,
  sampleRate: number,
  frameMs: number,
  aggressiveness: number,
  signal: AbortSignal | undefined,
): Promise<boolean[]> {
  if (![10, 20, 30].includes(frameMs)) throw new RangeError('frameMs must be 10, 20 or 30');
  const analysisRate = NATIVE_RATES.has(sampleRate) ? sampleRate : ANALYSIS_RATE;
  const analysed = analysisRate === sampleRate ? pcm : await resamplePcm16(pcm, sampleRate, analysisRate);
  const frameSamples = (analysisRate * frameMs) / 1000;
  const frameCount = Math.floor(analysed.length / frameSamples);
  const fvad = await loadFvad();
  const instance = fvad._fvad_new();
  if (instance === 0) throw new Error('fvad_new failed (out of WASM memory)');
  const buffer = fvad._malloc(frameSamples * 2);
  try {
    if (fvad._fvad_set_mode(instance, aggressiveness) !== 0)
      throw new RangeError(`invalid VAD aggressiveness ${aggressiveness}`);
    if (fvad._fvad_set_sample_rate(instance, analysisRate) !== 0)
      throw new RangeError(`VAD rejected rate ${analysisRate}`);
    // libfvad flags the first ~100 ms as speech while its noise model still holds start-up
    // defaults; running the opening frames once beforehand lets it settle on this recording's noise.
    for (let frame = 0; frame < Math.min(WARM_UP_FRAMES, frameCount); frame++) {
      fvad.HEAP16.set(analysed.subarray(frame * frameSamples, (frame + 1) * frameSamples), buffer >> 1);
      fvad._fvad_process(instance, buffer, frameSamples);
    }
    const flags: boolean[] = new Array(frameCount);
    for (let frame = 0; frame < frameCount; frame++) {
      if (frame > 0 && frame % FRAMES_PER_YIELD === 0) {
        await new Promise((resolve) => setImmediate(resolve));
        signal?.throwIfAborted();
      }
      // HEAP16 is re-read each frame: the view is replaced if the WASM memory ever grows.
      fvad.HEAP16.set(analysed.subarray(frame * frameSamples, (frame + 1) * frameSamples), buffer >> 1);
      const decision = fvad._fvad_process(instance, buffer, frameSamples);
      if (decision < 0) throw new Error('fvad_process rejected the frame');
      flags[frame] = decision === 1;
    }
    return flags;
  } finally {
    fvad._free(buffer);
    fvad._fvad_free(instance);
  }
}

function speechRuns(flags: boolean[], frameMs: number): SpeechSegment[] {
  const runs: SpeechSegment[] = [];
  let runStart = -1;
  for (let frame = 0; frame <= flags.length; frame++) {
    const speech = frame < flags.length && flags[frame];
    if (speech && runStart < 0) runStart = frame;
    if (!speech && runStart >= 0) {
      runs.push({ startMs: runStart * frameMs, endMs: frame * frameMs });
      runStart = -1;
    }
  }
  return runs;
}

function mergeCloseSegments(segments: SpeechSegment[], maxGapMs: number): SpeechSegment[] {
  const merged: SpeechSegment[] = [];
  for (const segment of segments) {
    const last = merged.at(-1);
    if (last && segment.startMs - last.endMs <= maxGapMs) last.endMs = Math.max(last.endMs, segment.endMs);
    else merged.push({ ...segment });
  }
  return merged;
}

/** Sample index in [from, to) at the start of the lowest-energy short window. */
function quietestPoint(pcm: Int16Array, sampleRate: number, from: number, to: number): number {
  const window = Math.max(1, Math.floor((sampleRate * CUT_SEARCH_WINDOW_MS) / 1000));
  let best = to;
  let bestEnergy = Infinity;
  for (let start = from; start + window <= to; start += window) {
    let energy = 0;
    for (let i = start; i < start + window; i++) energy += pcm[i] * pcm[i];
    if (energy < bestEnergy) {
      bestEnergy = energy;
      best = start + Math.floor(window / 2);
    }
  }
  return best;
}

function pieceOf(pcm: Int16Array, sampleRate: number, startSample: number, endSample: number): AudioPiece {
  return {
    pcm: pcm.subarray(startSample, endSample),
    startMs: Math.round((startSample / sampleRate) * 1000),
    endMs: Math.round((endSample / sampleRate) * 1000),
  };
}

function msToSample(ms: number, sampleRate: number): number {
  return Math.round((ms / 1000) * sampleRate);
}
