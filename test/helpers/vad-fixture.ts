import { readFileSync } from 'node:fs';
import { parseWav } from '../../actors/audio/wav.ts';
import type { VadFixtureLabels } from '../../tools/build-vad-fixture.ts';

/** Synthesised utterances with known silences and low noise (tools/build-vad-fixture.ts). */
export function loadVadFixture(): { pcm: Int16Array; sampleRate: number; labels: VadFixtureLabels } {
  const { pcm, sampleRate } = parseWav(readFileSync(new URL('../fixtures/vad-speech-16k.wav', import.meta.url)));
  const labels = JSON.parse(
    readFileSync(new URL('../fixtures/vad-speech-16k.labels.json', import.meta.url), 'utf8'),
  ) as VadFixtureLabels;
  return { pcm, sampleRate, labels };
}

export interface TimeSpan {
  startMs: number;
  endMs: number;
}

function inside(spans: readonly TimeSpan[], ms: number): boolean {
  return spans.some((span) => ms >= span.startMs && ms < span.endMs);
}

/**
 * Share of `frameMs` frames over the whole fixture whose speech/silence decision (taken at the frame's
 * centre) agrees with the labels.
 */
export function frameAccuracy(
  labels: VadFixtureLabels,
  frameMs: number,
  isSpeech: (frameIndex: number) => boolean,
): number {
  const speech = labels.segments.filter((segment) => segment.kind === 'speech');
  const frames = Math.floor(labels.durationMs / frameMs);
  let agreeing = 0;
  for (let frame = 0; frame < frames; frame++) {
    if (isSpeech(frame) === inside(speech, (frame + 0.5) * frameMs)) agreeing++;
  }
  return agreeing / frames;
}

/** Frame accuracy of a set of detected speech spans, on the same 32 ms grid as Silero's frames. */
export function spanAccuracy(labels: VadFixtureLabels, spans: readonly TimeSpan[], frameMs: number): number {
  return frameAccuracy(labels, frameMs, (frame) => inside(spans, (frame + 0.5) * frameMs));
}

/** Deterministic PRNG so generated noise is the same on every run. */
export function random(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state * 1_664_525 + 1_013_904_223) >>> 0;
    return state / 2 ** 32;
  };
}

/** White noise with the given RMS level in dBFS. */
export function whiteNoise(samples: number, rmsDbfs: number, seed: number): Int16Array {
  const next = random(seed);
  const amplitude = 32768 * 10 ** (rmsDbfs / 20) * Math.sqrt(3);
  return Int16Array.from({ length: samples }, () => Math.round((next() * 2 - 1) * amplitude));
}
