import { afterAll, describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { buildMouthTimeline } from '../actors/mouth/timeline.ts';
import { poseForPhone, visemeForPhone } from '../actors/mouth/visemes.ts';
import { closeBuiltinEngines, createBuiltinProvider } from '../actors/tts/providers/builtin.ts';
import type { TtsChunk } from '../actors/tts/types.ts';

const RATE = 16_000;

/** A vowel-like signal: 120 Hz voice with harmonics shaped by an /a/-like first formant near 700 Hz. */
function vowel(ms: number, amplitude = 8_000): Int16Array {
  const samples = new Int16Array(Math.round((ms / 1000) * RATE));
  for (let i = 0; i < samples.length; i++) {
    let value = 0;
    for (let harmonic = 1; harmonic <= 20; harmonic++) {
      const hz = 120 * harmonic;
      const formantGain = Math.exp(-(((hz - 700) / 250) ** 2)) + 0.3 * Math.exp(-(((hz - 1200) / 300) ** 2));
      value += formantGain * Math.sin((2 * Math.PI * hz * i) / RATE);
    }
    samples[i] = Math.round(amplitude * value);
  }
  return samples;
}

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
});

describe('mouth track of real builtin TTS speech', () => {
  afterAll(closeBuiltinEngines);

  async function speak(text: string, voice: string): Promise<TtsChunk> {
    const provider = createBuiltinProvider();
    const chunks: TtsChunk[] = [];
    for await (const chunk of provider.synthesize({ text, voice, sampleRate: RATE, signal: AbortSignal.timeout(20_000) })) {
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
