/**
 * `cloud_c`: ElevenLabs text-to-speech, `POST /v1/text-to-speech/{voice_id}/stream?output_format=pcm_<rate>`
 * with the `xi-api-key` header. Voices are ElevenLabs voice_ids; cloning happens in the ElevenLabs
 * console, outside this service. Raw PCM streams straight through when ElevenLabs offers the wanted rate.
 */
import { fetchUpstream, streamBody, trimTrailingSlash } from '../http.ts';
import { VoiceNotFoundError, type TtsChunk, type TtsProvider, type TtsRequest } from '../types.ts';
import { rawPcmBySentence } from './audio-output.ts';
import { assertConfigured, statusFromRequired, type ProviderConfig } from './common.ts';

const ID = 'cloud_c' as const;
export const CLOUD_C_DEFAULT_BASE_URL = 'https://api.elevenlabs.io';
const DEFAULT_MODEL = 'eleven_multilingual_v2';
/** "Rachel", a premade voice present on every ElevenLabs account. */
const DEFAULT_VOICE = '21m00Tcm4TlvDq8ikWAM';
/** The raw PCM rates ElevenLabs' `output_format` accepts. */
const PCM_RATES = [8000, 16000, 22050, 24000, 44100, 48000];
const FALLBACK_RATE = 24000;
/** ElevenLabs voice ids are 20 alphanumerics; anything else cannot be a voice there. */
const VOICE_ID_PATTERN = /^[A-Za-z0-9]{20}$/;

export function createCloudCProvider(config: ProviderConfig = {}): TtsProvider {
  const fetchImpl = config.fetch ?? fetch;
  const baseUrl = trimTrailingSlash(config.baseUrl || CLOUD_C_DEFAULT_BASE_URL);
  const status = () => statusFromRequired(ID, [{ value: config.apiKey, suffix: 'API_KEY' }]);

  function validateVoice(voice: string | null | undefined): void {
    if (voice && !VOICE_ID_PATTERN.test(voice)) {
      throw new VoiceNotFoundError(`cloud_c voice must be an ElevenLabs voice_id (20 letters/digits), got "${voice}"`);
    }
  }

  async function* synthesize(request: TtsRequest): AsyncGenerator<TtsChunk> {
    assertConfigured(ID, status());
    validateVoice(request.voice);
    const voice = request.voice || DEFAULT_VOICE;
    const upstreamRate = PCM_RATES.includes(request.sampleRate) ? request.sampleRate : FALLBACK_RATE;
    const url = `${baseUrl}/v1/text-to-speech/${encodeURIComponent(voice)}/stream?output_format=pcm_${upstreamRate}`;
    yield* rawPcmBySentence(request, { upstreamRate, provider: ID }, async (sentence) => {
      const response = await fetchUpstream(fetchImpl, url, {
        method: 'POST',
        headers: { 'xi-api-key': config.apiKey!, 'content-type': 'application/json', accept: 'audio/pcm' },
        body: JSON.stringify({ text: sentence, model_id: request.model || DEFAULT_MODEL }),
        signal: request.signal,
        provider: ID,
      });
      return streamBody(response, request.signal, ID);
    });
  }

  return { id: ID, status, validateVoice, synthesize };
}
