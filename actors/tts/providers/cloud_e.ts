/**
 * `cloud_e`: Azure AI Speech text-to-speech REST, `POST {region endpoint}/cognitiveservices/v1`
 * with an SSML body, `Ocp-Apim-Subscription-Key` and `X-Microsoft-OutputFormat: raw-<rate>-16bit-mono-pcm`.
 * Voices are Azure neural voice names, `<lang>-<region>-<name>Neural` (e.g. `en-US-JennyNeural`).
 * The base URL carries the region: `https://<region>.tts.speech.microsoft.com`.
 */
import { fetchUpstream, readJson, streamBody, trimTrailingSlash } from '../../upstream/http.ts';
import { VoiceNotFoundError, type ListedVoice, type TtsChunk, type TtsProvider, type TtsRequest } from '../types.ts';
import { UpstreamError } from '../../upstream/errors.ts';
import { rawPcmBySentence } from './audio-output.ts';
import { assertConfigured, genderOf, statusFromRequired, type ProviderConfig } from './common.ts';

const ID = 'cloud_e' as const;
const DEFAULT_VOICE = 'en-US-JennyNeural';
/** Azure's raw PCM output formats by sample rate. */
const RAW_FORMATS: Record<number, string> = {
  8000: 'raw-8khz-16bit-mono-pcm',
  16000: 'raw-16khz-16bit-mono-pcm',
  22050: 'raw-22050hz-16bit-mono-pcm',
  24000: 'raw-24khz-16bit-mono-pcm',
  44100: 'raw-44100hz-16bit-mono-pcm',
  48000: 'raw-48khz-16bit-mono-pcm',
};
const FALLBACK_RATE = 24000;
/** `en-US-JennyNeural`, `zh-CN-shaanxi-XiaoniNeural`, `en-US-AvaMultilingualNeural`. */
const VOICE_PATTERN = /^([a-z]{2,3}-[A-Z]{2})(-[a-z]+)?-[A-Za-z0-9]+Neural$/;

export function escapeXml(text: string): string {
  return text.replace(
    /[<>&'"]/g,
    (char) => ({ '<': '&lt;', '>': '&gt;', '&': '&amp;', "'": '&apos;', '"': '&quot;' })[char]!,
  );
}

export function ssmlFor(text: string, voice: string): string {
  const lang = VOICE_PATTERN.exec(voice)?.[1] ?? 'en-US';
  return `<speak version='1.0' xmlns='http://www.w3.org/2001/10/synthesis' xml:lang='${lang}'><voice name='${escapeXml(voice)}'>${escapeXml(text)}</voice></speak>`;
}

/** One entry of `GET /cognitiveservices/voices/list` (only the fields used here). */
interface AzureVoice {
  ShortName?: unknown;
  DisplayName?: unknown;
  Locale?: unknown;
  Gender?: unknown;
}

export function createCloudEProvider(config: ProviderConfig = {}): TtsProvider {
  const fetchImpl = config.fetch ?? fetch;
  const status = () =>
    statusFromRequired(ID, [
      { value: config.baseUrl, suffix: 'BASE_URL' },
      { value: config.apiKey, suffix: 'API_KEY' },
    ]);

  function validateVoice(voice: string | null | undefined): void {
    if (voice && !VOICE_PATTERN.test(voice)) {
      throw new VoiceNotFoundError(`cloud_e voice must look like <lang>-<region>-<name>Neural, got "${voice}"`);
    }
  }

  async function* synthesize(request: TtsRequest): AsyncGenerator<TtsChunk> {
    assertConfigured(ID, status());
    validateVoice(request.voice);
    const voice = request.voice || DEFAULT_VOICE;
    const upstreamRate = RAW_FORMATS[request.sampleRate] ? request.sampleRate : FALLBACK_RATE;
    const url = `${trimTrailingSlash(config.baseUrl!)}/cognitiveservices/v1`;
    yield* rawPcmBySentence(request, { upstreamRate, provider: ID }, async (sentence) => {
      const response = await fetchUpstream(fetchImpl, url, {
        method: 'POST',
        headers: {
          'Ocp-Apim-Subscription-Key': config.apiKey!,
          'Content-Type': 'application/ssml+xml',
          'X-Microsoft-OutputFormat': RAW_FORMATS[upstreamRate],
          'User-Agent': 'avatar-conversation-service',
        },
        body: ssmlFor(sentence, voice),
        signal: request.signal,
        provider: ID,
      });
      return streamBody(response, request.signal, ID);
    });
  }

  /** `GET /cognitiveservices/voices/list` of the region: every voice it offers (neural ones usable here). */
  async function listVoices(signal: AbortSignal): Promise<ListedVoice[]> {
    assertConfigured(ID, status());
    const response = await fetchUpstream(
      fetchImpl,
      `${trimTrailingSlash(config.baseUrl!)}/cognitiveservices/voices/list`,
      {
        method: 'GET',
        headers: { 'Ocp-Apim-Subscription-Key': config.apiKey!, 'User-Agent': 'avatar-conversation-service' },
        signal,
        provider: ID,
      },
    );
    const answer = await readJson<AzureVoice[]>(response, signal, ID);
    if (!Array.isArray(answer)) throw new UpstreamError(`${ID}: voice list answer is not an array`);
    return answer
      .filter(
        (voice): voice is AzureVoice & { ShortName: string } =>
          typeof voice.ShortName === 'string' && VOICE_PATTERN.test(voice.ShortName),
      )
      .map((voice) => ({
        id: voice.ShortName,
        name: typeof voice.DisplayName === 'string' && voice.DisplayName ? voice.DisplayName : voice.ShortName,
        language: typeof voice.Locale === 'string' ? voice.Locale : VOICE_PATTERN.exec(voice.ShortName)![1],
        gender: genderOf(voice.Gender),
      }));
  }

  return { id: ID, defaultVoice: DEFAULT_VOICE, status, validateVoice, synthesize, listVoices };
}
