/**
 * `local_clone_a`: a self-hosted Coqui XTTS-v2 behind daswer123's `xtts-api-server`.
 *  - synthesis: `POST /tts_to_audio/` JSON `{text, speaker_wav, language}` → `audio/wav` (24 kHz).
 *  - voices: a speaker name from the server's speakers folder (`female`, `male`, ...) or a voice
 *    cloned here, sent as the absolute path of its reference WAV (xtts-api-server accepts paths).
 *  - model: XTTS is one multilingual model, so `tts_model` carries the language (`en`, `de`, `zh-cn`).
 *  - cloning: zero-shot; the reference WAV is written to `<voiceDir>/local_clone_a/`, then the server's
 *    `GET /speakers_list` must answer, so a clone against a dead server fails instead of dangling.
 */
import { fetchUpstream, readBody, readJson, trimTrailingSlash, type FetchLike } from '../../upstream/http.ts';
import {
  VoiceNotFoundError,
  type CloneRequest,
  type CloneResult,
  type ListedVoice,
  type TtsChunk,
  type TtsProvider,
  type TtsRequest,
} from '../types.ts';
import { UpstreamError } from '../../upstream/errors.ts';
import { toChunk } from './audio-output.ts';
import { assertConfigured, sentencesOf, statusFromRequired, type CloningProviderConfig } from './common.ts';
import { LOCAL_VOICE_ID_PATTERN, requireReference, storeLocalClone } from './local-voices.ts';

const ID = 'local_clone_a' as const;
const DEFAULT_SPEAKER = 'female';
const DEFAULT_LANGUAGE = 'en';
/** XTTS-v2 language codes are two letters, plus `zh-cn`. */
const LANGUAGE_PATTERN = /^[a-z]{2}(-[a-z]{2})?$/;
/** Speaker names of the server's folder: plain file stems. */
const SPEAKER_PATTERN = /^[\w.-]{1,100}$/;

export function createLocalCloneAProvider(config: CloningProviderConfig = {}): TtsProvider {
  const fetchImpl: FetchLike = config.fetch ?? fetch;
  const status = () => statusFromRequired(ID, [{ value: config.baseUrl, suffix: 'BASE_URL' }]);
  const base = () => trimTrailingSlash(config.baseUrl!);

  function validateVoice(voice: string | null | undefined): void {
    if (voice && !SPEAKER_PATTERN.test(voice))
      throw new VoiceNotFoundError(`local_clone_a voice must be a speaker name or cloned voice_id, got "${voice}"`);
  }

  async function speakerFor(voice: string | null | undefined): Promise<string> {
    if (!voice) return DEFAULT_SPEAKER;
    return LOCAL_VOICE_ID_PATTERN.test(voice) ? requireReference(config.voiceDir, ID, voice) : voice;
  }

  async function* synthesize(request: TtsRequest): AsyncGenerator<TtsChunk> {
    assertConfigured(ID, status());
    validateVoice(request.voice);
    const speaker = await speakerFor(request.voice);
    const language = request.model && LANGUAGE_PATTERN.test(request.model) ? request.model : DEFAULT_LANGUAGE;
    const sentences = sentencesOf(request.text);
    for (let index = 0; index < sentences.length; index++) {
      request.signal.throwIfAborted();
      const response = await fetchUpstream(fetchImpl, `${base()}/tts_to_audio/`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'audio/wav' },
        body: JSON.stringify({ text: sentences[index], speaker_wav: speaker, language }),
        signal: request.signal,
        provider: ID,
      });
      const body = await readBody(response, request.signal, ID);
      yield await toChunk(body, { targetRate: request.sampleRate, sentenceIndex: index, provider: ID });
    }
  }

  async function clone(request: CloneRequest): Promise<CloneResult> {
    assertConfigured(ID, status());
    const voiceId = await storeLocalClone({
      provider: ID,
      voiceDir: config.voiceDir,
      baseUrl: config.baseUrl!,
      probePath: '/speakers_list',
      fetchImpl,
      request,
    });
    return { voiceId, message: 'local_clone_a stored the reference sample; XTTS clones zero-shot at synthesis time' };
  }

  /** `GET /speakers_list`: names of the server's speaker folder (no language or gender is known for them). */
  async function listVoices(signal: AbortSignal): Promise<ListedVoice[]> {
    assertConfigured(ID, status());
    const response = await fetchUpstream(fetchImpl, `${base()}/speakers_list`, {
      method: 'GET',
      headers: { accept: 'application/json' },
      signal,
      provider: ID,
    });
    const answer = await readJson<unknown>(response, signal, ID);
    if (!Array.isArray(answer)) throw new UpstreamError(`${ID}: speakers_list answer is not an array`);
    return answer
      .filter(
        (name): name is string =>
          typeof name === 'string' && SPEAKER_PATTERN.test(name) && !LOCAL_VOICE_ID_PATTERN.test(name),
      )
      .map((name) => ({ id: name, name, language: null, gender: null }));
  }

  // XTTS carries the language in the model field: a clone is made for the default language.
  return {
    id: ID,
    defaultVoice: DEFAULT_SPEAKER,
    defaultCloneModel: DEFAULT_LANGUAGE,
    status,
    validateVoice,
    synthesize,
    clone,
    listVoices,
  };
}
