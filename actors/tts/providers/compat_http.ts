/**
 * `compat_http`: any server speaking the OpenAI speech API, `POST {base}/v1/audio/speech`
 * (OpenAI itself, Kokoro-FastAPI, openedai-speech, LocalAI, vLLM-omni, ...). We ask for
 * `response_format: "wav"` because WAV is self-describing: servers differ in the rate of raw `pcm`.
 */
import { fetchUpstream, readBody, trimTrailingSlash } from '../../upstream/http.ts';
import type { TtsChunk, TtsProvider, TtsRequest } from '../types.ts';
import { toChunk } from './audio-output.ts';
import { assertConfigured, sentencesOf, statusFromRequired, type ProviderConfig } from './common.ts';

const ID = 'compat_http' as const;
const DEFAULT_MODEL = 'tts-1';
const DEFAULT_VOICE = 'alloy';

/** Accepts both `https://host` and the OpenAI-SDK style `https://host/v1`. */
export function speechUrl(baseUrl: string): string {
  const base = trimTrailingSlash(baseUrl);
  return base.endsWith('/v1') ? `${base}/audio/speech` : `${base}/v1/audio/speech`;
}

export function createCompatHttpProvider(config: ProviderConfig = {}): TtsProvider {
  const fetchImpl = config.fetch ?? fetch;
  // The key is optional: many self-hosted compatible servers run without one.
  const status = () => statusFromRequired(ID, [{ value: config.baseUrl, suffix: 'BASE_URL' }]);

  async function* synthesize(request: TtsRequest): AsyncGenerator<TtsChunk> {
    assertConfigured(ID, status());
    const headers: Record<string, string> = { 'content-type': 'application/json' };
    if (config.apiKey) headers.authorization = `Bearer ${config.apiKey}`;
    const sentences = sentencesOf(request.text);
    for (let index = 0; index < sentences.length; index++) {
      request.signal.throwIfAborted();
      const response = await fetchUpstream(fetchImpl, speechUrl(config.baseUrl!), {
        method: 'POST',
        headers,
        body: JSON.stringify({
          model: request.model || DEFAULT_MODEL,
          input: sentences[index],
          voice: request.voice || DEFAULT_VOICE,
          response_format: 'wav',
        }),
        signal: request.signal,
        provider: ID,
      });
      const body = await readBody(response, request.signal, ID);
      yield await toChunk(body, { targetRate: request.sampleRate, sentenceIndex: index, provider: ID });
    }
  }

  return { id: ID, defaultVoice: DEFAULT_VOICE, status, synthesize };
}
