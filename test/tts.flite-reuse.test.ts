/**
 * The built-in engine keeps one flite instance per process and puts it back to its instantiated state before
 * each sentence (actors/tts/builtin/flite.ts, wasm-snapshot.ts): the same text must give the same bytes as a
 * fresh instance, a failed sentence must not affect the next, and memory must stay flat over many sentences.
 */
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  FLITE_KEPT_MEMORY_BYTES,
  FliteInstance,
  loadFliteModule,
  useFliteWorkDir,
} from '../actors/tts/builtin/flite.ts';
import type { EngineAudio } from '../actors/tts/builtin/engine.ts';

const SENTENCES = [
  'Hello, ready to talk.',
  'The quick brown fox jumps over the lazy dog, then it runs away into the woods.',
  'Numbers like 1234 and dates like 12/05/2024 are read aloud.',
  'Short.',
  'Would you like to hear more about the mountains of Norway?',
];
const VOICES = ['slt', 'rms', 'kal'];

let workDir: string;

beforeAll(async () => {
  workDir = useFliteWorkDir(mkdtempSync(path.join(tmpdir(), 'flite-reuse-')));
  await loadFliteModule();
}, 60_000);
afterAll(() => rmSync(workDir, { recursive: true, force: true }));

async function fresh(voice: string, text: string): Promise<EngineAudio> {
  return (await FliteInstance.create()).synthesize(voice, text);
}

function expectSameAudio(actual: EngineAudio, expected: EngineAudio): void {
  expect(actual.sampleRate).toBe(expected.sampleRate);
  expect(actual.pcm.length).toBe(expected.pcm.length);
  expect(Buffer.compare(Buffer.from(actual.pcm.buffer), Buffer.from(expected.pcm.buffer))).toBe(0);
  expect(actual.phones).toEqual(expected.phones);
}

describe('a kept flite instance', () => {
  it('gives the same PCM and phones as a fresh instance for every sentence, voices interleaved, twice over', async () => {
    const kept = await FliteInstance.create();
    for (const voice of VOICES) {
      for (const text of SENTENCES) {
        const expected = await fresh(voice, text);
        expect(expected.pcm.length).toBeGreaterThan(0);
        expectSameAudio(kept.synthesize(voice, text), expected);
        // The same sentence again right after another voice's longest one.
        kept.synthesize(VOICES[(VOICES.indexOf(voice) + 1) % VOICES.length]!, SENTENCES[1]!);
        expectSameAudio(kept.synthesize(voice, text), expected);
      }
    }
  }, 120_000);

  it('a sentence that fails does not change what the next sentence gives', async () => {
    const kept = await FliteInstance.create();
    const expected = await fresh('slt', SENTENCES[2]!);
    kept.synthesize('slt', SENTENCES[1]!);
    rmSync(workDir, { recursive: true, force: true });
    expect(() => kept.synthesize('slt', SENTENCES[0]!)).toThrow();
    mkdirSync(workDir);
    expectSameAudio(kept.synthesize('slt', SENTENCES[2]!), expected);
  }, 60_000);

  it('holds flat memory over 150 sentences and stays within the kept bound', async () => {
    const kept = await FliteInstance.create();
    const sizes: number[] = [];
    const first = kept.synthesize('slt', SENTENCES[4]!);
    for (let index = 0; index < 150; index++) {
      kept.synthesize(VOICES[index % VOICES.length]!, SENTENCES[index % SENTENCES.length]!);
      sizes.push(kept.memoryBytes);
    }
    expect(Math.max(...sizes)).toBe(sizes[SENTENCES.length * VOICES.length]);
    expect(Math.max(...sizes)).toBeLessThanOrEqual(FLITE_KEPT_MEMORY_BYTES);
    expectSameAudio(kept.synthesize('slt', SENTENCES[4]!), first);
  }, 120_000);
});
