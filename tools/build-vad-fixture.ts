/**
 * Generates the voice-activity fixture `test/fixtures/vad-speech-16k.wav` and its label timeline
 * `test/fixtures/vad-speech-16k.labels.json`: several synthesised utterances (Debian's espeak-ng CLI,
 * varied voices and rates) separated by known silences of 0.3–1.5 s, with low background noise mixed in
 * over the whole recording, 16 kHz mono 16-bit.
 *
 * The labels are known by construction, not listened to: each utterance is trimmed to its first and last
 * 10 ms window within TRIM_BELOW_PEAK_DB of its loudest window, so a speech label starts at the first
 * audible sound and ends at the last; everything between utterances is silence (noise only).
 *
 *   apt-get install -y espeak-ng && npx tsx tools/build-vad-fixture.ts
 */
import { execFile } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import { promisify } from 'node:util';
import { encodeWav, parseWav } from '../actors/audio/wav.ts';
import { resamplePcm16 } from '../actors/audio/resample.ts';

export interface VadFixtureSegment {
  kind: 'speech' | 'silence';
  startMs: number;
  endMs: number;
  /** What is said (speech segments only). */
  text?: string;
}

export interface VadFixtureLabels {
  sampleRate: number;
  durationMs: number;
  /** How the labels were made, for whoever reads the file. */
  method: string;
  segments: VadFixtureSegment[];
}

const FIXTURE_WAV = new URL('../test/fixtures/vad-speech-16k.wav', import.meta.url);
const FIXTURE_LABELS = new URL('../test/fixtures/vad-speech-16k.labels.json', import.meta.url);
const SAMPLE_RATE = 16_000;
/** Quieter than this below the utterance's loudest 10 ms is the synthesiser's own silence, not speech. */
const TRIM_BELOW_PEAK_DB = 40;
const TRIM_WINDOW_MS = 10;
/** Active speech level: a normal close-talking microphone. */
const SPEECH_RMS_DBFS = -20;
/** Room/microphone noise under everything: audible in headphones, far below speech. */
const NOISE_RMS_DBFS = -50;
const LEADING_SILENCE_MS = 1_000;
const TRAILING_SILENCE_MS = 1_000;

/** Utterance, espeak-ng voice, words per minute, and the silence that follows it. */
const SCRIPT: Array<{ text: string; voice: string; wpm: number; pauseAfterMs: number }> = [
  { text: 'Hello there can you hear me clearly', voice: 'en-us', wpm: 165, pauseAfterMs: 800 },
  { text: 'I would like to know the weather for tomorrow morning', voice: 'en-gb+f3', wpm: 155, pauseAfterMs: 300 },
  { text: 'Please tell me a short story about a dragon', voice: 'en-us+m3', wpm: 170, pauseAfterMs: 1_200 },
  { text: 'Thanks that sounds great', voice: 'en-gb-scotland', wpm: 160, pauseAfterMs: 500 },
  { text: 'Stop', voice: 'en-us+f2', wpm: 160, pauseAfterMs: 1_500 },
  { text: 'What time does the museum open on Sunday', voice: 'en-029', wpm: 150, pauseAfterMs: 400 },
  { text: 'Could you speak a little more slowly please', voice: 'en-us+f4', wpm: 145, pauseAfterMs: 1_000 },
];

/** Deterministic PRNG (LCG) so regenerating gives the same file byte for byte. */
function random(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state * 1_664_525 + 1_013_904_223) >>> 0;
    return state / 2 ** 32;
  };
}

async function synthesise(text: string, voice: string, wpm: number): Promise<Int16Array> {
  const { stdout } = await promisify(execFile)('espeak-ng', ['-v', voice, '-s', String(wpm), '--stdout', text], {
    encoding: 'buffer',
    maxBuffer: 16 * 1024 * 1024,
  });
  const { pcm, sampleRate } = parseWav(stdout);
  return resamplePcm16(pcm, sampleRate, SAMPLE_RATE);
}

function windowRms(pcm: Int16Array, start: number, length: number): number {
  let sum = 0;
  for (let i = start; i < start + length; i++) sum += pcm[i] * pcm[i];
  return Math.sqrt(sum / length);
}

/** The utterance from its first to its last window within TRIM_BELOW_PEAK_DB of the loudest one. */
function trimByEnergy(pcm: Int16Array): Int16Array {
  const window = (SAMPLE_RATE * TRIM_WINDOW_MS) / 1000;
  const levels: number[] = [];
  for (let start = 0; start + window <= pcm.length; start += window) levels.push(windowRms(pcm, start, window));
  const threshold = Math.max(...levels) * 10 ** (-TRIM_BELOW_PEAK_DB / 20);
  const first = levels.findIndex((level) => level >= threshold);
  const last = levels.findLastIndex((level) => level >= threshold);
  return pcm.slice(first * window, (last + 1) * window);
}

/** Float samples scaled so the utterance's RMS is SPEECH_RMS_DBFS. */
function normalised(pcm: Int16Array): Float32Array {
  const gain = (32768 * 10 ** (SPEECH_RMS_DBFS / 20)) / windowRms(pcm, 0, pcm.length);
  return Float32Array.from(pcm, (sample) => sample * gain);
}

async function main(): Promise<void> {
  const utterances: Float32Array[] = [];
  for (const line of SCRIPT)
    utterances.push(normalised(trimByEnergy(await synthesise(line.text, line.voice, line.wpm))));

  const msToSamples = (ms: number): number => Math.round((ms / 1000) * SAMPLE_RATE);
  const total =
    msToSamples(LEADING_SILENCE_MS) +
    utterances.reduce((sum, utterance) => sum + utterance.length, 0) +
    SCRIPT.slice(0, -1).reduce((sum, line) => sum + msToSamples(line.pauseAfterMs), 0) +
    msToSamples(TRAILING_SILENCE_MS);
  const mix = new Float32Array(total);
  const segments: VadFixtureSegment[] = [];
  const samplesToMs = (samples: number): number => Math.round((samples / SAMPLE_RATE) * 1000);
  let cursor = msToSamples(LEADING_SILENCE_MS);
  segments.push({ kind: 'silence', startMs: 0, endMs: samplesToMs(cursor) });
  SCRIPT.forEach((line, index) => {
    mix.set(utterances[index], cursor);
    segments.push({
      kind: 'speech',
      startMs: samplesToMs(cursor),
      endMs: samplesToMs(cursor + utterances[index].length),
      text: line.text,
    });
    cursor += utterances[index].length;
    const pause = index < SCRIPT.length - 1 ? msToSamples(line.pauseAfterMs) : msToSamples(TRAILING_SILENCE_MS);
    segments.push({ kind: 'silence', startMs: samplesToMs(cursor), endMs: samplesToMs(cursor + pause) });
    cursor += pause;
  });

  // Uniform white noise: RMS of U(-a, a) is a / √3.
  const next = random(2024);
  const noiseAmplitude = 32768 * 10 ** (NOISE_RMS_DBFS / 20) * Math.sqrt(3);
  const pcm = new Int16Array(total);
  for (let i = 0; i < total; i++) {
    const value = Math.round(mix[i] + (next() * 2 - 1) * noiseAmplitude);
    pcm[i] = Math.max(-32768, Math.min(32767, value));
  }

  const labels: VadFixtureLabels = {
    sampleRate: SAMPLE_RATE,
    durationMs: samplesToMs(total),
    method:
      'Known by construction (tools/build-vad-fixture.ts): espeak-ng utterances trimmed by energy ' +
      `(first to last 10 ms window within ${TRIM_BELOW_PEAK_DB} dB of the loudest), placed at known offsets; ` +
      `white noise at ${NOISE_RMS_DBFS} dBFS under the whole recording, speech at ${SPEECH_RMS_DBFS} dBFS RMS.`,
    segments,
  };
  await writeFile(FIXTURE_WAV, encodeWav(pcm, SAMPLE_RATE));
  await writeFile(FIXTURE_LABELS, `${JSON.stringify(labels, null, 2)}\n`);
  console.log(`wrote ${labels.durationMs} ms, ${SCRIPT.length} utterances`);
}

await main();
