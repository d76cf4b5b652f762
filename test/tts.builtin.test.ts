import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  BUILTIN_DEFAULT_VOICE,
  BUILTIN_VOICES,
  closeBuiltinEngines,
  createBuiltinProvider,
  warmUpBuiltinEngines,
} from '../actors/tts/providers/builtin.ts';
import { VoiceNotFoundError, type TtsChunk } from '../actors/tts/types.ts';
import { parseFlitePhoneTrace } from '../actors/tts/builtin/flite.ts';
import { ipaToArpabet } from '../actors/tts/builtin/ipa.ts';

const provider = createBuiltinProvider({ warmUp: false });

async function collect(text: string, voice: string | null, sampleRate: number, signal = AbortSignal.timeout(20_000)) {
  const chunks: TtsChunk[] = [];
  for await (const chunk of provider.synthesize({ text, voice, sampleRate, signal })) chunks.push(chunk);
  return chunks;
}

function rms(pcm: Int16Array): number {
  let sum = 0;
  for (const sample of pcm) sum += sample * sample;
  return Math.sqrt(sum / Math.max(1, pcm.length));
}

beforeAll(async () => {
  await warmUpBuiltinEngines();
}, 20_000);
afterAll(closeBuiltinEngines);

describe('builtin voices', () => {
  it('lists voices in <lang>-<region>-<name>Neural format with both genders for every language', () => {
    expect(BUILTIN_VOICES.some((v) => v.voice === BUILTIN_DEFAULT_VOICE)).toBe(true);
    expect(BUILTIN_DEFAULT_VOICE).toMatch(/^en-US-\w+Neural$/);
    for (const entry of BUILTIN_VOICES) expect(entry.voice).toMatch(/^[a-z]{2}-[A-Z]{2}-[A-Za-z]+Neural$/);
    const languages = new Set(BUILTIN_VOICES.map((v) => v.lang));
    for (const lang of languages) {
      const genders = new Set(BUILTIN_VOICES.filter((v) => v.lang === lang).map((v) => v.gender));
      expect([lang, [...genders].sort()]).toEqual([lang, ['female', 'male']]);
    }
    expect(BUILTIN_VOICES.filter((v) => v.lang.startsWith('en-US')).every((v) => v.engine === 'flite')).toBe(true);
  });

  it('validates voices: unknown throws VoiceNotFoundError, null means default', () => {
    expect(() => provider.validateVoice!('xx-XX-NobodyNeural')).toThrow(VoiceNotFoundError);
    expect(() => provider.validateVoice!(null)).not.toThrow();
    expect(() => provider.validateVoice!(undefined)).not.toThrow();
    expect(() => provider.validateVoice!('en-US-GuyNeural')).not.toThrow();
    expect(provider.status().configured).toBe(true);
    expect(provider.id).toBe('builtin');
  });

  it('rejects an unknown voice from synthesize too', async () => {
    await expect(collect('Hello.', 'en-US-NobodyNeural', 16_000)).rejects.toThrow(VoiceNotFoundError);
  });
});

describe('builtin synthesis', () => {
  it('yields one chunk per sentence, in order, with phones covering the audio', async () => {
    const chunks = await collect(
      'Hello there, this is the first sentence. And here is the second one! Is this the third?',
      null,
      16_000,
    );
    expect(chunks.map((c) => c.sentenceIndex)).toEqual([0, 1, 2]);
    for (const chunk of chunks) {
      expect(chunk.sampleRate).toBe(16_000);
      expect(chunk.pcm.length).toBeGreaterThan(16_000 * 0.5);
      expect(rms(chunk.pcm)).toBeGreaterThan(500);
      const phones = chunk.phones!;
      expect(phones[0].startMs).toBe(0);
      const durationMs = (chunk.pcm.length / chunk.sampleRate) * 1000;
      expect(Math.abs(phones[phones.length - 1].endMs - durationMs)).toBeLessThan(15);
      for (let i = 1; i < phones.length; i++) expect(phones[i].startMs).toBeCloseTo(phones[i - 1].endMs, 5);
      for (const phone of phones) expect(phone.phone).toMatch(/^[a-z]+$/);
    }
    expect(chunks[0].phones!.map((p) => p.phone)).toContain('hh');
  }, 20_000);

  it('resamples to the requested rate and keeps the duration', async () => {
    const [at16k] = await collect('Good morning everyone.', 'en-US-GuyNeural', 16_000);
    const [at48k] = await collect('Good morning everyone.', 'en-US-GuyNeural', 48_000);
    expect(at48k.sampleRate).toBe(48_000);
    expect(Math.abs(at48k.pcm.length - at16k.pcm.length * 3)).toBeLessThan(10);
    expect(at48k.phones).toEqual(at16k.phones);
  }, 20_000);

  it('speaks other languages through eSpeak with phone timings', async () => {
    const chunks = await collect('Bonjour tout le monde. Comment allez-vous?', 'fr-FR-DeniseNeural', 24_000);
    expect(chunks).toHaveLength(2);
    expect(chunks[0].sampleRate).toBe(24_000);
    expect(rms(chunks[0].pcm)).toBeGreaterThan(500);
    expect(chunks[0].phones!.map((p) => p.phone)).toEqual(expect.arrayContaining(['b', 'm']));
  }, 20_000);

  it('male and female voices differ in pitch', async () => {
    const zeroCrossingRate = (chunk: TtsChunk): number => {
      let crossings = 0;
      for (let i = 1; i < chunk.pcm.length; i++) if (chunk.pcm[i - 1] < 0 && chunk.pcm[i] >= 0) crossings++;
      return crossings / (chunk.pcm.length / chunk.sampleRate);
    };
    const [female] = await collect('Hallo, wie geht es dir?', 'de-DE-KatjaNeural', 16_000);
    const [male] = await collect('Hallo, wie geht es dir?', 'de-DE-ConradNeural', 16_000);
    expect(zeroCrossingRate(female)).toBeGreaterThan(zeroCrossingRate(male) * 1.1);
  }, 20_000);

  it('stops with the abort reason when the signal aborts between sentences', async () => {
    const controller = new AbortController();
    const received: TtsChunk[] = [];
    const run = async () => {
      for await (const chunk of provider.synthesize({
        text: 'This is sentence number one. This is sentence number two. This is sentence number three.',
        voice: null,
        sampleRate: 16_000,
        signal: controller.signal,
      })) {
        received.push(chunk);
        controller.abort(new Error('user interrupted'));
      }
    };
    await expect(run()).rejects.toThrow('user interrupted');
    expect(received).toHaveLength(1);
    await expect(collect('Hello.', null, 16_000, AbortSignal.abort())).rejects.toThrow();
  }, 20_000);

  it('delivers the first sentence of a long text before the rest is synthesized, once the engines are warm', async () => {
    // The promise is streaming by sentence: the short first sentence (~1/20 of the text) arrives while the rest is
    // still being made. How fast in milliseconds is the bench's first-audio row: a fixed bound here read 2.3 s on a
    // host at half speed, where the whole text took proportionally longer too.
    const text = `Hi, nice to meet you. ${'This is a much longer following sentence that keeps going for a while. '.repeat(6)}`;
    const started = performance.now();
    let firstChunkMs = -1;
    let chunks = 0;
    for await (const chunk of provider.synthesize({
      text,
      voice: null,
      sampleRate: 48_000,
      signal: AbortSignal.timeout(60_000),
    })) {
      if (firstChunkMs < 0) firstChunkMs = performance.now() - started;
      chunks++;
      expect(chunk.sampleRate).toBe(48_000);
    }
    const totalMs = performance.now() - started;
    console.info(
      `builtin first-sentence latency (warm, 48 kHz): ${Math.round(firstChunkMs)} ms of ${Math.round(totalMs)} ms`,
    );
    expect(chunks).toBeGreaterThanOrEqual(7);
    expect(firstChunkMs).toBeGreaterThan(0);
    // Half the total: a provider that made the whole text before yielding reads ~1; measured 0.18 here, 0.21-0.24 beside
    // a busy loop on the same core.
    expect(firstChunkMs).toBeLessThan(totalMs / 2);
  }, 90_000);
});

describe('engine output parsing', () => {
  it('parses flite -psdur traces, continuing times across utterances', () => {
    const phones = parseFlitePhoneTrace('pau:0.100 hh:0.200 ay:0.350 pau:0.400 \npau:0.050 b:0.120 \n');
    expect(phones.map((p) => p.phone)).toEqual(['pau', 'hh', 'ay', 'pau', 'pau', 'b']);
    expect(phones[2]).toEqual({ phone: 'ay', startMs: 200, endMs: 350 });
    expect(phones[5].startMs).toBeCloseTo(450);
    expect(phones[5].endMs).toBeCloseTo(520);
  });

  it('maps eSpeak IPA phonemes onto ARPAbet', () => {
    expect(ipaToArpabet('ˈa')).toBe('aa');
    expect(ipaToArpabet('oː')).toBe('ow');
    expect(ipaToArpabet('ɔ̃')).toBe('ao');
    expect(ipaToArpabet('tʃ')).toBe('ch');
    expect(ipaToArpabet('aɪ')).toBe('ay');
    expect(ipaToArpabet('m')).toBe('m');
    expect(ipaToArpabet('')).toBe('pau');
    expect(ipaToArpabet('ʲ')).toBeNull();
  });
});
