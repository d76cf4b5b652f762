import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createOpenAiAsr } from '../actors/asr/providers/openai.ts';
import { ProviderNotConfiguredError, UpstreamError } from '../actors/upstream/errors.ts';
import { startOpenAiUpstream, type OpenAiUpstream } from './fakes/openai-upstream.ts';
import { caught } from './helpers/caught.ts';

function sine(frequencyHz: number, sampleRate: number, seconds: number): Int16Array {
  const pcm = new Int16Array(Math.round(sampleRate * seconds));
  for (let i = 0; i < pcm.length; i++)
    pcm[i] = Math.round(9000 * Math.sin((2 * Math.PI * frequencyHz * i) / sampleRate));
  return pcm;
}

let upstream: OpenAiUpstream;
beforeAll(async () => {
  upstream = await startOpenAiUpstream();
});
afterAll(async () => {
  await upstream.close();
});
beforeEach(() => {
  upstream.requests.length = 0;
  upstream.setScenario({
    transcription: { transcript: ' hello world ', delayMs: 0, failStatus: undefined },
    requiredApiKey: null,
  });
});

describe('OpenAI-compatible ASR provider', () => {
  it('uploads a 16 kHz mono 16-bit WAV as multipart with model, format, language and bearer key', async () => {
    upstream.setScenario({ requiredApiKey: 'sk-asr' });
    const asr = createOpenAiAsr({ baseUrl: upstream.baseUrl, apiKey: 'sk-asr', model: 'Systran/faster-whisper-small' });
    const pcm = sine(300, 16_000, 1.25);

    const result = await asr.transcribe({
      pcm,
      sampleRate: 16_000,
      language: 'en',
      signal: new AbortController().signal,
    });

    expect(result).toEqual({ text: 'hello world' });
    const [request] = upstream.requests;
    expect(request.path).toBe('/v1/audio/transcriptions');
    expect(request.headers['content-type']).toMatch(/^multipart\/form-data; boundary=/);
    expect(request.headers.authorization).toBe('Bearer sk-asr');
    expect(request.transcription?.fields).toEqual({
      model: 'Systran/faster-whisper-small',
      response_format: 'json',
      language: 'en',
    });
    expect(request.transcription?.fileName).toBe('audio.wav');
    expect(request.transcription?.fileType).toBe('audio/wav');
    expect(request.transcription?.wav).toEqual({
      sampleRate: 16_000,
      channels: 1,
      bitDepth: '16',
      samples: pcm.length,
    });
    expect(Array.from(request.transcription!.samples!)).toEqual(Array.from(pcm));
  });

  it('resamples other rates to 16 kHz before upload and omits auth and language when unset', async () => {
    const asr = createOpenAiAsr({ baseUrl: upstream.baseUrl });
    await asr.transcribe({ pcm: sine(300, 48_000, 1), sampleRate: 48_000, signal: new AbortController().signal });
    const [request] = upstream.requests;
    expect(request.headers.authorization).toBeUndefined();
    expect(request.transcription?.fields.language).toBeUndefined();
    expect(request.transcription?.fields.model).toBe('whisper-1');
    expect(request.transcription?.wav?.sampleRate).toBe(16_000);
    expect(Math.abs(request.transcription!.wav!.samples - 16_000)).toBeLessThanOrEqual(16);
  });

  it('turns a 401 into UpstreamError with the upstream status and text', async () => {
    upstream.setScenario({ requiredApiKey: 'sk-right' });
    const asr = createOpenAiAsr({ baseUrl: upstream.baseUrl, apiKey: 'sk-wrong' });
    const error = await caught(
      asr.transcribe({ pcm: sine(300, 16_000, 0.5), sampleRate: 16_000, signal: new AbortController().signal }),
    );
    expect(error).toBeInstanceOf(UpstreamError);
    expect((error as UpstreamError).upstreamStatus).toBe(401);
    expect((error as Error).message).toContain('Incorrect API key provided.');
  });

  it('turns a 500 into UpstreamError with the upstream text', async () => {
    upstream.setScenario({ transcription: { failStatus: 500, failMessage: 'CUDA out of memory' } });
    const asr = createOpenAiAsr({ baseUrl: upstream.baseUrl });
    const error = await caught(
      asr.transcribe({ pcm: sine(300, 16_000, 0.5), sampleRate: 16_000, signal: new AbortController().signal }),
    );
    expect(error).toBeInstanceOf(UpstreamError);
    expect((error as UpstreamError).upstreamStatus).toBe(500);
    expect((error as Error).message).toContain('CUDA out of memory');
  });

  it('rethrows AbortError promptly when aborted while the server is transcribing', async () => {
    upstream.setScenario({ transcription: { delayMs: 3_000 } });
    const asr = createOpenAiAsr({ baseUrl: upstream.baseUrl });
    const controller = new AbortController();
    setTimeout(() => controller.abort(), 100);
    const started = performance.now();
    const error = await caught(
      asr.transcribe({ pcm: sine(300, 16_000, 0.5), sampleRate: 16_000, signal: controller.signal }),
    );
    expect((error as Error).name).toBe('AbortError');
    expect(performance.now() - started).toBeLessThan(400);
  });

  it('times out a server that never answers with UpstreamError', async () => {
    upstream.setScenario({ transcription: { delayMs: 3_000 } });
    const asr = createOpenAiAsr({ baseUrl: upstream.baseUrl, responseTimeoutMs: 150 });
    const started = performance.now();
    const error = await caught(
      asr.transcribe({ pcm: sine(300, 16_000, 0.5), sampleRate: 16_000, signal: new AbortController().signal }),
    );
    expect(error).toBeInstanceOf(UpstreamError);
    expect((error as Error).message).toMatch(/timed out: no transcription response within 150 ms/);
    expect(performance.now() - started).toBeLessThan(1_000);
  });

  it('returns empty text for empty audio without calling the server', async () => {
    const asr = createOpenAiAsr({ baseUrl: upstream.baseUrl });
    expect(
      await asr.transcribe({ pcm: new Int16Array(0), sampleRate: 16_000, signal: new AbortController().signal }),
    ).toEqual({ text: '' });
    expect(upstream.requests).toHaveLength(0);
  });

  it('is not configured without a base URL and says which variable to set', async () => {
    const asr = createOpenAiAsr({});
    expect(asr.status()).toEqual({ configured: false, reason: 'set SERVICE_ASR_BASE_URL' });
    const error = await caught(
      asr.transcribe({ pcm: sine(300, 16_000, 0.1), sampleRate: 16_000, signal: new AbortController().signal }),
    );
    expect(error).toBeInstanceOf(ProviderNotConfiguredError);
  });
});
