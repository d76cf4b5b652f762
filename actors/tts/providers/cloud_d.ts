/**
 * `cloud_d`: fal.ai's F5-TTS zero-shot cloning model, synchronous endpoint
 * `POST https://fal.run/{model}` (default model `fal-ai/f5-tts`) with `Authorization: Key <key>`.
 * The reference sample goes with every request as `ref_audio_url` — fal accepts base64 data URIs for
 * file inputs — so a "cloned voice" is only a catalog entry holding the sample's data URI.
 * fal answers `{audio_url: {url}}`; the WAV is then downloaded from that URL.
 */
import { randomBytes } from 'node:crypto';
import { fetchUpstream, readBody, readJson, trimTrailingSlash, type FetchLike } from '../../upstream/http.ts';
import {
  VoiceNotFoundError,
  type CloneRequest,
  type CloneResult,
  type TtsChunk,
  type TtsProvider,
  type TtsRequest,
} from '../types.ts';
import { UpstreamError } from '../../upstream/errors.ts';
import { toChunk } from './audio-output.ts';
import { assertConfigured, sentencesOf, statusFromRequired, type CloningProviderConfig } from './common.ts';

const ID = 'cloud_d' as const;
export const CLOUD_D_DEFAULT_BASE_URL = 'https://fal.run';
const CLOUD_D_DEFAULT_MODEL = 'fal-ai/f5-tts';
/** fal app ids: `owner/app` or `owner/app/sub-path`. */
const MODEL_PATTERN = /^[a-z0-9-]+\/[a-z0-9._-]+(\/[a-z0-9._-]+)*$/;
const VOICE_ID_PREFIX = 'cloud_d-';

interface FalAnswer {
  audio_url?: { url?: string } | string;
  detail?: unknown;
}

export function createCloudDProvider(config: CloningProviderConfig = {}): TtsProvider {
  const fetchImpl: FetchLike = config.fetch ?? fetch;
  const baseUrl = trimTrailingSlash(config.baseUrl || CLOUD_D_DEFAULT_BASE_URL);
  const status = () => statusFromRequired(ID, [{ value: config.apiKey, suffix: 'API_KEY' }]);

  function validateVoice(voice: string | null | undefined): void {
    if (!voice)
      throw new VoiceNotFoundError(
        'cloud_d has no stock voices: pass a cloned voice_id (POST /voices/clone) or an https URL of a sample',
      );
    if (!voice.startsWith(VOICE_ID_PREFIX) && !/^https?:\/\//.test(voice)) {
      throw new VoiceNotFoundError(
        `cloud_d voice must be a cloned voice_id (${VOICE_ID_PREFIX}...) or a sample URL, got "${voice}"`,
      );
    }
  }

  async function referenceFor(voice: string): Promise<{ audioUrl: string; targetModel?: string }> {
    if (/^https?:\/\//.test(voice)) return { audioUrl: voice };
    const found = config.voiceLookup ? await config.voiceLookup(ID, voice) : null;
    if (!found?.referenceDataUri) throw new VoiceNotFoundError(`cloud_d voice ${voice} is not in the voice catalog`);
    return { audioUrl: found.referenceDataUri, targetModel: found.targetModel };
  }

  async function* synthesize(request: TtsRequest): AsyncGenerator<TtsChunk> {
    assertConfigured(ID, status());
    validateVoice(request.voice);
    const reference = await referenceFor(request.voice!);
    const model = request.model || reference.targetModel || CLOUD_D_DEFAULT_MODEL;
    if (!MODEL_PATTERN.test(model))
      throw new VoiceNotFoundError(`cloud_d model must be a fal app id like ${CLOUD_D_DEFAULT_MODEL}`);
    const sentences = sentencesOf(request.text);
    for (let index = 0; index < sentences.length; index++) {
      request.signal.throwIfAborted();
      const response = await fetchUpstream(fetchImpl, `${baseUrl}/${model}`, {
        method: 'POST',
        headers: { authorization: `Key ${config.apiKey}`, 'content-type': 'application/json' },
        body: JSON.stringify({
          gen_text: sentences[index],
          ref_audio_url: reference.audioUrl,
          model_type: 'F5-TTS',
          remove_silence: true,
        }),
        signal: request.signal,
        provider: ID,
      });
      const answer = await readJson<FalAnswer>(response, request.signal, ID);
      const audioUrl = typeof answer.audio_url === 'string' ? answer.audio_url : answer.audio_url?.url;
      if (!audioUrl)
        throw new UpstreamError(`${ID}: answer without audio_url: ${JSON.stringify(answer).slice(0, 300)}`);
      const audio = await fetchUpstream(fetchImpl, audioUrl, { method: 'GET', signal: request.signal, provider: ID });
      const bytes = await readBody(audio, request.signal, ID);
      yield await toChunk(bytes, { targetRate: request.sampleRate, sentenceIndex: index, provider: ID });
    }
  }

  /** Nothing to enroll upstream: the sample travels with each request. Only the configuration is checked. */
  async function clone(request: CloneRequest): Promise<CloneResult> {
    assertConfigured(ID, status());
    request.signal.throwIfAborted();
    const voiceId = `${VOICE_ID_PREFIX}${randomBytes(8).toString('hex')}`;
    return { voiceId, message: `cloud_d stores the sample; it is sent to ${request.targetModel} with every synthesis` };
  }

  return {
    id: ID,
    defaultVoice: null,
    defaultCloneModel: CLOUD_D_DEFAULT_MODEL,
    status,
    validateVoice,
    synthesize,
    clone,
  };
}
