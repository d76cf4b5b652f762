import { afterAll, describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { buildMouthTimeline } from '../actors/mouth/timeline.ts';
import { poseForPhone, visemeForPhone } from '../actors/mouth/visemes.ts';
import { closeBuiltinEngines, createBuiltinProvider } from '../actors/tts/providers/builtin.ts';
import type { TtsChunk } from '../actors/tts/types.ts';
import { vowel as vowelAt } from './helpers/vowel.ts';

const RATE = 16_000;

/** A vowel-like signal at the tests' rate (`test/helpers/vowel.ts`). */
const vowel = (ms: number, amplitude = 8_000): Int16Array => vowelAt(ms, RATE, amplitude);

function concat(...parts: Int16Array[]): Int16Array {
  const out = new Int16Array(parts.reduce((n, p) => n + p.length, 0));
  let offset = 0;
  for (const part of parts) {
    out.set(part, offset);
    offset += part.length;
  }
  return out;
}

const silence = (ms: number): Int16Array => new Int16Array(Math.round((ms / 1000) * RATE));

describe('visemes', () => {
  it('maps phones to the expected mouth shapes', () => {
    expect(poseForPhone('m').open).toBe(0);
    expect(poseForPhone('pau')).toEqual({ open: 0, wide: 0, round: 0 });
    expect(poseForPhone('aa').open).toBeGreaterThan(0.8);
    expect(poseForPhone('iy').wide).toBeGreaterThan(poseForPhone('uw').wide);
    expect(poseForPhone('uw').round).toBeGreaterThan(0.8);
    expect(poseForPhone('f').open).toBeLessThan(0.15);
    expect(visemeForPhone('AA1')).toBe('aa');
  });
});

describe('buildMouthTimeline from audio only', () => {
  it('keeps the mouth closed and the level at 0 for silence', () => {
    const timeline = buildMouthTimeline({ pcm: silence(500), sampleRate: RATE });
    expect(timeline.durationMs).toBe(500);
    for (let ms = 0; ms <= 500; ms += 10) {
      expect(timeline.poseAt(ms)).toEqual({ open: 0, wide: 0, round: 0 });
      expect(timeline.levelAt(ms)).toBe(0);
    }
  });

  it('opens for a vowel-like tone and closes again in the silence after it', () => {
    const timeline = buildMouthTimeline({ pcm: concat(silence(200), vowel(400), silence(300)), sampleRate: RATE });
    expect(timeline.poseAt(100).open).toBe(0);
    expect(timeline.poseAt(400).open).toBeGreaterThan(0.5);
    expect(timeline.levelAt(400)).toBeGreaterThan(0.6);
    expect(timeline.poseAt(850).open).toBeLessThan(0.05);
    expect(timeline.levelAt(850)).toBe(0);
  });

  it('gives every pose within 0..1 for arbitrary PCM and any query time', () => {
    fc.assert(
      fc.property(
        fc.array(fc.integer({ min: -32768, max: 32767 }), { maxLength: 4000 }),
        fc.constantFrom(8_000, 16_000, 22_050, 48_000),
        fc.array(fc.double({ min: -1000, max: 2000, noNaN: false }), { maxLength: 20 }),
        (samples, sampleRate, times) => {
          const timeline = buildMouthTimeline({ pcm: Int16Array.from(samples), sampleRate });
          for (const ms of [...times, 0, timeline.durationMs / 2, timeline.durationMs]) {
            const pose = timeline.poseAt(ms);
            for (const value of [pose.open, pose.wide, pose.round, timeline.levelAt(ms)]) {
              expect(value).toBeGreaterThanOrEqual(0);
              expect(value).toBeLessThanOrEqual(1);
            }
          }
        },
      ),
      { numRuns: 200 },
    );
  });
});

describe('buildMouthTimeline from phone timings', () => {
  it('closes for m, opens for aa and closes again for m at the right times', () => {
    const pcm = vowel(600);
    const phones = [
      { phone: 'm', startMs: 0, endMs: 150 },
      { phone: 'aa', startMs: 150, endMs: 450 },
      { phone: 'm', startMs: 450, endMs: 600 },
    ];
    const timeline = buildMouthTimeline({ pcm, sampleRate: RATE, phones });
    expect(timeline.poseAt(60).open).toBeLessThan(0.1);
    expect(timeline.poseAt(300).open).toBeGreaterThan(0.6);
    expect(timeline.poseAt(540).open).toBeLessThan(0.1);
    // Coarticulation: the jaw is on its way before the vowel starts and the change is gradual.
    expect(timeline.poseAt(150).open).toBeGreaterThan(0.15);
    expect(timeline.poseAt(150).open).toBeLessThan(timeline.poseAt(300).open);
  });

  it('rounds for uw and spreads for iy', () => {
    const phones = [
      { phone: 'uw', startMs: 0, endMs: 300 },
      { phone: 'iy', startMs: 300, endMs: 600 },
    ];
    const timeline = buildMouthTimeline({ pcm: vowel(600), sampleRate: RATE, phones });
    expect(timeline.poseAt(120).round).toBeGreaterThan(0.6);
    expect(timeline.poseAt(480).wide).toBeGreaterThan(0.6);
    expect(timeline.poseAt(480).round).toBeLessThan(0.1);
  });

  it('keeps the mouth closed where the audio is silent even if a phone says otherwise', () => {
    const phones = [{ phone: 'aa', startMs: 0, endMs: 600 }];
    const timeline = buildMouthTimeline({ pcm: concat(vowel(300), silence(300)), sampleRate: RATE, phones });
    expect(timeline.poseAt(150).open).toBeGreaterThan(0.6);
    expect(timeline.poseAt(550).open).toBeLessThan(0.05);
  });

  it('opens wider for a louder stretch of the same vowel, keeping its shape', () => {
    // One 'aa' over a quiet stretch (about -28 dBFS) then a loud one (about -10 dBFS).
    const phones = [{ phone: 'aa', startMs: 0, endMs: 800 }];
    const timeline = buildMouthTimeline({
      pcm: concat(vowel(400, 1_000), vowel(400, 8_000)),
      sampleRate: RATE,
      phones,
    });
    const quiet = timeline.poseAt(250);
    const loud = timeline.poseAt(650);
    expect(loud.open).toBeGreaterThan(0.8);
    expect(quiet.open).toBeGreaterThan(0.1);
    expect(quiet.open).toBeLessThan(0.6 * loud.open);
    // Loudness scales the jaw, not the lip shape: 'aa' stays as spread at either level.
    expect(quiet.wide).toBeCloseTo(loud.wide, 2);
  });

  it('closes the mouth in a pause inside a chunk and opens it again after', () => {
    const phones = [{ phone: 'aa', startMs: 0, endMs: 900 }];
    const timeline = buildMouthTimeline({
      pcm: concat(vowel(300), silence(300), vowel(300)),
      sampleRate: RATE,
      phones,
    });
    expect(timeline.poseAt(150).open).toBeGreaterThan(0.8);
    for (let ms = 500; ms <= 560; ms += 10) expect(timeline.poseAt(ms).open).toBeLessThan(0.05);
    expect(timeline.poseAt(750).open).toBeGreaterThan(0.8);
  });
});

describe('mouth track of real builtin TTS speech', () => {
  afterAll(closeBuiltinEngines);

  async function speak(text: string, voice: string): Promise<TtsChunk> {
    const provider = createBuiltinProvider();
    const chunks: TtsChunk[] = [];
    for await (const chunk of provider.synthesize({
      text,
      voice,
      sampleRate: RATE,
      signal: AbortSignal.timeout(20_000),
    })) {
      chunks.push(chunk);
    }
    expect(chunks).toHaveLength(1);
    return chunks[0];
  }

  function check(chunk: TtsChunk, withPhones: boolean): void {
    const timeline = buildMouthTimeline(withPhones ? chunk : { pcm: chunk.pcm, sampleRate: chunk.sampleRate });
    const phones = chunk.phones!;
    const speechStart = phones[0].endMs; // after the leading pau
    const speechEnd = phones[phones.length - 1].startMs; // before the trailing pau
    let maxOpen = 0;
    for (let ms = speechStart; ms < speechEnd; ms += 10) maxOpen = Math.max(maxOpen, timeline.poseAt(ms).open);
    expect(maxOpen).toBeGreaterThan(0.5);
    expect(timeline.poseAt(speechStart / 2).open).toBeLessThan(0.05);
    expect(timeline.poseAt((speechEnd + timeline.durationMs) / 2 + 40).open).toBeLessThan(0.1);
  }

  it('opens during "Hello world" and is closed in the silence around it (flite, with and without phones)', async () => {
    const chunk = await speak('Hello world', 'en-US-JennyNeural');
    expect(chunk.phones?.[0].phone).toBe('pau');
    check(chunk, true);
    check(chunk, false);
  }, 20_000);

  it('works the same for eSpeak speech', async () => {
    const chunk = await speak('Hallo Welt, guten Tag', 'de-DE-ConradNeural');
    check(chunk, true);
  }, 20_000);
});

describe('a mouth track is built as its audio plays', () => {
  /** PCM whose every sample read is counted: what the analysis has touched so far. */
  function countingPcm(pcm: Int16Array): { pcm: Int16Array; reads: () => number; furthest: () => number } {
    let reads = 0;
    let furthest = -1;
    const proxy = new Proxy(pcm, {
      get(target, key) {
        if (typeof key === 'string' && /^\d+$/.test(key)) {
          reads++;
          furthest = Math.max(furthest, Number(key));
          return target[Number(key)];
        }
        const value: unknown = Reflect.get(target, key, target);
        return typeof value === 'function' ? value.bind(target) : value;
      },
    });
    return { pcm: proxy, reads: () => reads, furthest: () => furthest };
  }

  it('queues a minute of speech without analysing it, then analyses only as far as it is asked for', () => {
    const minute = concat(...Array.from({ length: 60 }, () => concat(vowel(600), silence(400))));
    const counted = countingPcm(minute);
    const timeline = buildMouthTimeline({ pcm: counted.pcm, sampleRate: RATE });
    expect(timeline.durationMs).toBe(60_000);
    expect(counted.reads()).toBe(0);

    expect(timeline.poseAt(300).open).toBeGreaterThan(0.5);
    // The hops up to 310 ms and their 25 ms windows / 32 ms FFT frames: well inside the first half second.
    expect(counted.furthest()).toBeLessThan(RATE / 2);
    const readsForFirstFrame = counted.reads();
    for (let ms = 340; ms <= 1_000; ms += 40) timeline.poseAt(ms);
    expect(counted.furthest()).toBeLessThan(1.1 * RATE);
    expect(counted.reads()).toBeGreaterThan(readsForFirstFrame);
  });

  it('gives the same poses and levels whether read as it plays or after reading its end first', () => {
    fc.assert(
      fc.property(
        fc.array(fc.integer({ min: -32768, max: 32767 }), { minLength: 1, maxLength: 6000 }),
        fc.constantFrom(16_000, 24_000),
        fc.boolean(),
        fc.array(fc.double({ min: 0, max: 400, noNaN: true }), { maxLength: 30 }),
        (samples, sampleRate, withPhones, times) => {
          const pcm = Int16Array.from(samples);
          const durationMs = (pcm.length * 1000) / sampleRate;
          const phones = withPhones
            ? [
                { phone: 'm', startMs: 0, endMs: durationMs / 3 },
                { phone: 'aa', startMs: durationMs / 3, endMs: (2 * durationMs) / 3 },
                { phone: 'uw', startMs: (2 * durationMs) / 3, endMs: durationMs },
              ]
            : undefined;
          const asPlayed = buildMouthTimeline({ pcm, sampleRate, phones });
          const endFirst = buildMouthTimeline({ pcm, sampleRate, phones });
          endFirst.poseAt(durationMs);
          for (const ms of [...times].sort((a, b) => a - b)) {
            expect(asPlayed.poseAt(ms)).toEqual(endFirst.poseAt(ms));
            expect(asPlayed.levelAt(ms)).toBe(endFirst.levelAt(ms));
          }
        },
      ),
      { numRuns: 200 },
    );
  });
});
