/**
 * `cloud_c`: ElevenLabs text-to-speech, `POST /v1/text-to-speech/{voice_id}/stream?output_format=pcm_<rate>`
 * with the `xi-api-key` header. Voices are ElevenLabs voice_ids; cloning happens in the ElevenLabs
 * console, outside this service. Raw PCM streams straight through when ElevenLabs offers the wanted rate.
 */
import { fetchUpstream, readJson, streamBody, trimTrailingSlash } from '../../upstream/http.ts';
import { VoiceNotFoundError, type ListedVoice, type TtsChunk, type TtsProvider, type TtsRequest } from '../types.ts';
import { UpstreamError } from '../../upstream/errors.ts';
import { rawPcmBySentence } from './audio-output.ts';
import { assertConfigured, genderOf, statusFromRequired, type ProviderConfig } from './common.ts';

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

/** One entry of `GET /v1/voices` (only the fields used here). */
interface ElevenLabsVoice {
  voice_id?: unknown;
  name?: unknown;
  labels?: { gender?: unknown; language?: unknown };
  verified_languages?: Array<{ language?: unknown; locale?: unknown }>;
}

function elevenLabsLanguage(voice: ElevenLabsVoice): string | null {
  const first = voice.verified_languages?.[0];
  const candidates = [first?.locale, first?.language, voice.labels?.language];
  return (candidates.find((value) => typeof value === 'string' && value.length > 0) as string | undefined) ?? null;
}

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

  /** `GET /v1/voices`: the account's premade, cloned and library voices. */
  async function listVoices(signal: AbortSignal): Promise<ListedVoice[]> {
    assertConfigured(ID, status());
    const response = await fetchUpstream(fetchImpl, `${baseUrl}/v1/voices`, {
      method: 'GET',
      headers: { 'xi-api-key': config.apiKey!, accept: 'application/json' },
      signal,
      provider: ID,
    });
    const answer = await readJson<{ voices?: ElevenLabsVoice[] }>(response, signal, ID);
    if (!Array.isArray(answer.voices)) throw new UpstreamError(`${ID}: voice list answer has no voices array`);
    return answer.voices
      .filter(
        (voice): voice is ElevenLabsVoice & { voice_id: string } =>
          typeof voice.voice_id === 'string' && VOICE_ID_PATTERN.test(voice.voice_id),
      )
      .map((voice) => ({
        id: voice.voice_id,
        name: typeof voice.name === 'string' && voice.name ? voice.name : voice.voice_id,
        language: elevenLabsLanguage(voice),
        gender: genderOf(voice.labels?.gender),
      }));
  }

  return { id: ID, defaultVoice: DEFAULT_VOICE, status, validateVoice, synthesize, listVoices };
}
