/**
 * `local_clone_b`: a self-hosted CosyVoice / CosyVoice2 FastAPI server
 * (`runtime/python/fastapi/server.py` of FunAudioLLM/CosyVoice).
 *  - cloned voice: `POST /inference_cross_lingual`, multipart `tts_text` + `prompt_wav` (the
 *    reference WAV from `<voiceDir>/local_clone_b/`); cross-lingual needs no transcript of the sample.
 *  - stock voice: `POST /inference_sft`, multipart `tts_text` + `spk_id` (SFT models: `中文女`, `英文女`, ...).
 *  - answer: a stream of raw PCM16 at the model rate: 24 kHz for CosyVoice2 (default),
 *    22.05 kHz for CosyVoice-300M models (`tts_model` containing `300M`).
 *  - cloning: the reference is written locally, then the server's `GET /docs` must answer.
 */
import { readFile } from 'node:fs/promises';
import { fetchUpstream, streamBody, trimTrailingSlash, type FetchLike } from '../../upstream/http.ts';
import {
  VoiceNotFoundError,
  type CloneRequest,
  type CloneResult,
  type TtsChunk,
  type TtsProvider,
  type TtsRequest,
} from '../types.ts';
import { rawPcmBySentence } from './audio-output.ts';
import { assertConfigured, statusFromRequired, type CloningProviderConfig } from './common.ts';
import { LOCAL_VOICE_ID_PATTERN, requireReference, storeLocalClone } from './local-voices.ts';

const ID = 'local_clone_b' as const;
const DEFAULT_SPEAKER = '英文女';
/** The CosyVoice2 model a clone is recorded for when none is named (synthesis without a model assumes CosyVoice2 too). */
const DEFAULT_CLONE_MODEL = 'CosyVoice2-0.5B';
const COSYVOICE2_RATE = 24000;
const COSYVOICE1_RATE = 22050;

export function cosyVoiceRate(model: string | null | undefined): number {
  return model && /300m/i.test(model) ? COSYVOICE1_RATE : COSYVOICE2_RATE;
}

export function createLocalCloneBProvider(config: CloningProviderConfig = {}): TtsProvider {
  const fetchImpl: FetchLike = config.fetch ?? fetch;
  const status = () => statusFromRequired(ID, [{ value: config.baseUrl, suffix: 'BASE_URL' }]);
  const base = () => trimTrailingSlash(config.baseUrl!);

  function validateVoice(voice: string | null | undefined): void {
    if (voice && voice.length > 100) throw new VoiceNotFoundError('local_clone_b voice is too long');
  }

  async function* synthesize(request: TtsRequest): AsyncGenerator<TtsChunk> {
    assertConfigured(ID, status());
    validateVoice(request.voice);
    const reference =
      request.voice && LOCAL_VOICE_ID_PATTERN.test(request.voice)
        ? await readFile(await requireReference(config.voiceDir, ID, request.voice))
        : null;
    const route = reference ? 'inference_cross_lingual' : 'inference_sft';
    yield* rawPcmBySentence(request, { upstreamRate: cosyVoiceRate(request.model), provider: ID }, async (sentence) => {
      const form = new FormData();
      form.set('tts_text', sentence);
      if (reference) form.set('prompt_wav', new Blob([new Uint8Array(reference)], { type: 'audio/wav' }), 'prompt.wav');
      else form.set('spk_id', request.voice || DEFAULT_SPEAKER);
      const response = await fetchUpstream(fetchImpl, `${base()}/${route}`, {
        method: 'POST',
        body: form,
        signal: request.signal,
        provider: ID,
      });
      return streamBody(response, request.signal, ID);
    });
  }

  async function clone(request: CloneRequest): Promise<CloneResult> {
    assertConfigured(ID, status());
    const voiceId = await storeLocalClone({
      provider: ID,
      voiceDir: config.voiceDir,
      baseUrl: config.baseUrl!,
      probePath: '/docs',
      fetchImpl,
      request,
    });
    return {
      voiceId,
      message: 'local_clone_b stored the reference sample; CosyVoice clones zero-shot at synthesis time',
    };
  }

  return {
    id: ID,
    defaultVoice: DEFAULT_SPEAKER,
    defaultCloneModel: DEFAULT_CLONE_MODEL,
    status,
    validateVoice,
    synthesize,
    clone,
  };
}
