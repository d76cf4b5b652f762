/**
 * `cloud_f`: Google Cloud Text-to-Speech REST v1, `POST /v1/text:synthesize` with the API key in
 * `X-Goog-Api-Key`, `audioEncoding: LINEAR16` at the wanted rate. The answer is JSON with
 * base64 `audioContent` (a WAV file). Voices are Google voice names (`en-US-Neural2-F`);
 * the language code is taken from the name, `model` is ignored (Google selects it by voice).
 */
import { fetchUpstream, readJson, trimTrailingSlash } from '../../upstream/http.ts';
import { VoiceNotFoundError, type ListedVoice, type TtsChunk, type TtsProvider, type TtsRequest } from '../types.ts';
import { UpstreamError } from '../../upstream/errors.ts';
import { toChunk } from './audio-output.ts';
import { assertConfigured, genderOf, sentencesOf, statusFromRequired, type ProviderConfig } from './common.ts';

const ID = 'cloud_f' as const;
export const CLOUD_F_DEFAULT_BASE_URL = 'https://texttospeech.googleapis.com';
const DEFAULT_VOICE = 'en-US-Neural2-F';
/** `en-US-Neural2-F`, `cmn-CN-Wavenet-A`, `en-US-Chirp3-HD-Aoede`. */
const VOICE_PATTERN = /^([a-z]{2,3}-[A-Z]{2})-[A-Za-z0-9-]+$/;

/** One entry of `GET /v1/voices` (only the fields used here). */
interface GoogleVoice {
  name?: unknown;
  languageCodes?: unknown;
  ssmlGender?: unknown;
}

export function createCloudFProvider(config: ProviderConfig = {}): TtsProvider {
  const fetchImpl = config.fetch ?? fetch;
  const baseUrl = trimTrailingSlash(config.baseUrl || CLOUD_F_DEFAULT_BASE_URL);
  const status = () => statusFromRequired(ID, [{ value: config.apiKey, suffix: 'API_KEY' }]);

  function validateVoice(voice: string | null | undefined): void {
    if (voice && !VOICE_PATTERN.test(voice)) {
      throw new VoiceNotFoundError(`cloud_f voice must be a Google voice name like en-US-Neural2-F, got "${voice}"`);
    }
  }

  async function* synthesize(request: TtsRequest): AsyncGenerator<TtsChunk> {
    assertConfigured(ID, status());
    validateVoice(request.voice);
    const voice = request.voice || DEFAULT_VOICE;
    const languageCode = VOICE_PATTERN.exec(voice)![1];
    const sentences = sentencesOf(request.text);
    for (let index = 0; index < sentences.length; index++) {
      request.signal.throwIfAborted();
      const response = await fetchUpstream(fetchImpl, `${baseUrl}/v1/text:synthesize`, {
        method: 'POST',
        headers: { 'X-Goog-Api-Key': config.apiKey!, 'content-type': 'application/json' },
        body: JSON.stringify({
          input: { text: sentences[index] },
          voice: { languageCode, name: voice },
          audioConfig: { audioEncoding: 'LINEAR16', sampleRateHertz: request.sampleRate },
        }),
        signal: request.signal,
        provider: ID,
      });
      const answer = await readJson<{ audioContent?: string }>(response, request.signal, ID);
      if (typeof answer.audioContent !== 'string') throw new UpstreamError(`${ID}: answer without audioContent`);
      const audio = Buffer.from(answer.audioContent, 'base64');
      yield await toChunk(audio, {
        targetRate: request.sampleRate,
        rawSampleRate: request.sampleRate,
        sentenceIndex: index,
        provider: ID,
      });
    }
  }

  /** `GET /v1/voices`: every voice of the API; Google has no display names, so the voice name is shown. */
  async function listVoices(signal: AbortSignal): Promise<ListedVoice[]> {
    assertConfigured(ID, status());
    const response = await fetchUpstream(fetchImpl, `${baseUrl}/v1/voices`, {
      method: 'GET',
      headers: { 'X-Goog-Api-Key': config.apiKey! },
      signal,
      provider: ID,
    });
    const answer = await readJson<{ voices?: GoogleVoice[] }>(response, signal, ID);
    if (!Array.isArray(answer.voices)) throw new UpstreamError(`${ID}: voice list answer has no voices array`);
    return answer.voices
      .filter(
        (voice): voice is GoogleVoice & { name: string } =>
          typeof voice.name === 'string' && VOICE_PATTERN.test(voice.name),
      )
      .map((voice) => {
        const codes = Array.isArray(voice.languageCodes)
          ? voice.languageCodes.filter((code): code is string => typeof code === 'string')
          : [];
        return {
          id: voice.name,
          name: voice.name,
          language: codes[0] ?? VOICE_PATTERN.exec(voice.name)![1],
          gender: genderOf(voice.ssmlGender),
        };
      });
  }

  return { id: ID, defaultVoice: DEFAULT_VOICE, status, validateVoice, synthesize, listVoices };
}
