/**
 * Every remote TTS adapter against a loopback server speaking its real protocol: audio comes back as
 * 16-bit mono PCM at the requested rate, one sentence per upstream request, and every failure mode
 * (bad key, 401, 500, slow + abort, truncated body, missing configuration) surfaces as the right error.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { encodeWav } from '../actors/audio/wav.ts';
import { createCloudAProvider } from '../actors/tts/providers/cloud_a.ts';
import { createCloudBProvider } from '../actors/tts/providers/cloud_b.ts';
import { createCloudCProvider } from '../actors/tts/providers/cloud_c.ts';
import { createCloudDProvider } from '../actors/tts/providers/cloud_d.ts';
import { createCloudEProvider } from '../actors/tts/providers/cloud_e.ts';
import { createCloudFProvider } from '../actors/tts/providers/cloud_f.ts';
import type { CloningProviderConfig } from '../actors/tts/providers/common.ts';
import { createCompatHttpProvider } from '../actors/tts/providers/compat_http.ts';
import { createLocalCloneAProvider } from '../actors/tts/providers/local_clone_a.ts';
import { createLocalCloneBProvider } from '../actors/tts/providers/local_clone_b.ts';
import type { TtsChunk, TtsProvider, TtsProviderId } from '../actors/tts/types.ts';
import { ProviderNotConfiguredError, UpstreamError } from '../actors/upstream/errors.ts';
import {
  startAzureSpeechFake,
  startCosyVoiceServerFake,
  startDashscopeFake,
  startElevenLabsFake,
  startFalFake,
  startGoogleTtsFake,
  startOpenAiSpeechFake,
  startXttsFake,
  TONE_HZ,
  TONE_SECONDS,
  tone,
  type FakeUpstream,
} from './fakes/tts-upstreams.ts';

const KEY = 'test-key-123';
const TWO_SENTENCES = 'Hello there, my friend. How are you doing today?';
const CLONED_DATA_URI = `data:audio/wav;base64,${encodeWav(tone(24000, 1, 200), 24000).toString('base64')}`;

interface Case {
  id: TtsProviderId;
  start: () => Promise<FakeUpstream>;
  create: (config: CloningProviderConfig) => TtsProvider;
  voice?: string;
  /** Text the 401 error must quote from the upstream. */
  unauthorizedText: string;
  /** Needs a key (so a wrong key is rejected by the fake's own check). */
  keyed: boolean;
  /** Variable named by the not-configured reason. */
  requiredVariable: string;
}

const CASES: Case[] = [
  {
    id: 'compat_http',
    start: () => startOpenAiSpeechFake({ apiKey: KEY }),
    create: createCompatHttpProvider,
    unauthorizedText: 'Incorrect API key',
    keyed: true,
    requiredVariable: 'SERVICE_TTS_COMPAT_HTTP_BASE_URL',
  },
  {
    id: 'cloud_a',
    start: () => startDashscopeFake({ apiKey: KEY }),
    create: createCloudAProvider,
    unauthorizedText: 'Invalid API-key',
    keyed: true,
    requiredVariable: 'SERVICE_TTS_CLOUD_A_API_KEY',
  },
  {
    id: 'cloud_b',
    start: () => startDashscopeFake({ apiKey: KEY }),
    create: createCloudBProvider,
    unauthorizedText: 'Invalid API-key',
    keyed: true,
    requiredVariable: 'SERVICE_TTS_CLOUD_B_API_KEY',
  },
  {
    id: 'cloud_c',
    start: () => startElevenLabsFake({ apiKey: KEY }),
    create: createCloudCProvider,
    unauthorizedText: 'Invalid API key',
    keyed: true,
    requiredVariable: 'SERVICE_TTS_CLOUD_C_API_KEY',
  },
  {
    id: 'cloud_d',
    start: () => startFalFake({ apiKey: KEY }),
    create: createCloudDProvider,
    voice: 'cloud_d-0123456789abcdef',
    unauthorizedText: 'Authentication is required',
    keyed: true,
    requiredVariable: 'SERVICE_TTS_CLOUD_D_API_KEY',
  },
  {
    id: 'cloud_e',
    start: () => startAzureSpeechFake({ apiKey: KEY }),
    create: createCloudEProvider,
    voice: 'de-DE-KatjaNeural',
    unauthorizedText: 'invalid subscription key',
    keyed: true,
    requiredVariable: 'SERVICE_TTS_CLOUD_E_BASE_URL',
  },
  {
    id: 'cloud_f',
    start: () => startGoogleTtsFake({ apiKey: KEY }),
    create: createCloudFProvider,
    voice: 'en-GB-Neural2-A',
    unauthorizedText: 'API key not valid',
    keyed: true,
    requiredVariable: 'SERVICE_TTS_CLOUD_F_API_KEY',
  },
  {
    id: 'local_clone_a',
    start: () => startXttsFake(),
    create: createLocalCloneAProvider,
    voice: 'male',
    unauthorizedText: 'Not authenticated',
    keyed: false,
    requiredVariable: 'SERVICE_TTS_LOCAL_CLONE_A_BASE_URL',
  },
  {
    id: 'local_clone_b',
    start: () => startCosyVoiceServerFake(),
    create: createLocalCloneBProvider,
    unauthorizedText: 'Not authenticated',
    keyed: false,
    requiredVariable: 'SERVICE_TTS_LOCAL_CLONE_B_BASE_URL',
  },
];

async function collect(iterable: AsyncIterable<TtsChunk>): Promise<TtsChunk[]> {
  const chunks: TtsChunk[] = [];
  for await (const chunk of iterable) chunks.push(chunk);
  return chunks;
}

function concat(chunks: TtsChunk[]): Int16Array {
  const out = new Int16Array(chunks.reduce((sum, chunk) => sum + chunk.pcm.length, 0));
  let offset = 0;
  for (const chunk of chunks) {
    out.set(chunk.pcm, offset);
    offset += chunk.pcm.length;
  }
  return out;
}

/** Frequency from rising zero crossings, away from the edges. */
function dominantFrequency(pcm: Int16Array, rate: number): number {
  const margin = Math.floor(pcm.length * 0.1);
  const crossings: number[] = [];
  for (let i = margin + 1; i < pcm.length - margin; i++) if (pcm[i - 1] < 0 && pcm[i] >= 0) crossings.push(i);
  return ((crossings.length - 1) * rate) / (crossings[crossings.length - 1] - crossings[0]);
}

async function expectRejection(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise;
  } catch (error) {
    return error;
  }
  throw new Error('expected a rejection');
}

for (const testCase of CASES) {
  describe(`${testCase.id} adapter`, () => {
    let fake: FakeUpstream;
    let provider: TtsProvider;
    const lookup: CloningProviderConfig['voiceLookup'] = async (provider, voiceId) =>
      provider === 'cloud_d' && voiceId === 'cloud_d-0123456789abcdef'
        ? { referenceDataUri: CLONED_DATA_URI, targetModel: 'fal-ai/f5-tts' }
        : null;
    const make = (overrides: Partial<CloningProviderConfig> = {}) =>
      testCase.create({ baseUrl: fake.url, apiKey: KEY, voiceLookup: lookup, ...overrides });

    beforeAll(async () => {
      fake = await testCase.start();
      provider = make();
    });
    afterAll(() => fake.close());

    const synth = (p: TtsProvider, signal = AbortSignal.timeout(10_000), sampleRate = 16000) =>
      collect(p.synthesize({ text: TWO_SENTENCES, voice: testCase.voice, sampleRate, signal }));

    it('synthesises each sentence to 16-bit mono PCM at the requested rate', async () => {
      fake.scenario = 'ok';
      const before = fake.requests.length;
      const chunks = await synth(provider);
      expect(fake.complaints).toEqual([]);
      expect(chunks.every((chunk) => chunk.sampleRate === 16000 && chunk.pcm instanceof Int16Array)).toBe(true);
      expect([...new Set(chunks.map((chunk) => chunk.sentenceIndex))]).toEqual([0, 1]);
      for (const sentence of [0, 1]) {
        const pcm = concat(chunks.filter((chunk) => chunk.sentenceIndex === sentence));
        // The fake answers TONE_SECONDS of a TONE_HZ tone per request, whatever rate it was asked for.
        expect(pcm.length).toBeGreaterThan(TONE_SECONDS * 16000 * 0.97);
        expect(pcm.length).toBeLessThan(TONE_SECONDS * 16000 * 1.03);
        expect(dominantFrequency(pcm, 16000)).toBeCloseTo(TONE_HZ, -1);
      }
      if (testCase.id !== 'cloud_b') expect(fake.requests.length - before).toBeGreaterThanOrEqual(2);
    });

    it('streams: the first sentence’s audio arrives before the second sentence is requested, and stopping early stops requests', async () => {
      fake.scenario = 'ok';
      const synthesisRequests = () => fake.requests.filter((r) => !r.path.startsWith('/files/')).length;
      const before = synthesisRequests();
      const sockets = (fake as { socketMessages?: unknown[] }).socketMessages;
      const socketsBefore = sockets?.length ?? 0;
      const iterator = provider
        .synthesize({
          text: TWO_SENTENCES,
          voice: testCase.voice,
          sampleRate: 16000,
          signal: AbortSignal.timeout(10_000),
        })
        [Symbol.asyncIterator]();
      const first = await iterator.next();
      expect(first.value?.sentenceIndex).toBe(0);
      const upstreamCalls = () => synthesisRequests() - before + (sockets?.length ?? 0) - socketsBefore;
      expect(upstreamCalls()).toBe(1);
      await iterator.return?.(undefined);
      await new Promise((resolve) => setTimeout(resolve, 50));
      expect(upstreamCalls()).toBe(1);
    });

    it('resamples to an unusual rate too', async () => {
      fake.scenario = 'ok';
      const pcm = concat(await synth(provider, AbortSignal.timeout(10_000), 11025));
      expect(pcm.length).toBeGreaterThan(2 * TONE_SECONDS * 11025 * 0.97);
      expect(pcm.length).toBeLessThan(2 * TONE_SECONDS * 11025 * 1.03);
    });

    if (testCase.keyed) {
      it('a wrong key is rejected by the upstream and surfaces as UpstreamError with its text', async () => {
        fake.scenario = 'ok';
        const error = await expectRejection(synth(make({ apiKey: 'wrong-key' })));
        expect(error).toBeInstanceOf(UpstreamError);
        expect((error as Error).message).toContain(testCase.unauthorizedText);
      });
    }

    it('401 becomes UpstreamError carrying the upstream text and status', async () => {
      fake.scenario = 'unauthorized';
      const error = (await expectRejection(synth(provider))) as UpstreamError;
      expect(error).toBeInstanceOf(UpstreamError);
      expect(error.message).toContain(testCase.unauthorizedText);
      expect(error.upstreamStatus).toBe(401);
    });

    it('500 becomes UpstreamError', async () => {
      fake.scenario = 'server_error';
      const error = await expectRejection(synth(provider));
      expect(error).toBeInstanceOf(UpstreamError);
    });

    it('a truncated body becomes UpstreamError', async () => {
      fake.scenario = 'truncated';
      const error = await expectRejection(synth(provider));
      expect(error).toBeInstanceOf(UpstreamError);
    });

    it('aborting while the upstream is slow stops at once with the caller’s reason', async () => {
      fake.scenario = 'slow';
      fake.slowMs = 3000;
      const controller = new AbortController();
      const reason = new Error('caller interrupted');
      setTimeout(() => controller.abort(reason), 100);
      const started = Date.now();
      const error = await expectRejection(synth(provider, controller.signal));
      expect(error).toBe(reason);
      expect(Date.now() - started).toBeLessThan(1500);
    });

    it('without configuration reports the variable to set and refuses to synthesise', async () => {
      const unconfigured = testCase.create({});
      const status = unconfigured.status();
      expect(status.configured).toBe(false);
      expect(status.reason).toContain(testCase.requiredVariable);
      const error = await expectRejection(synth(unconfigured));
      expect(error).toBeInstanceOf(ProviderNotConfiguredError);
    });
  });
}
