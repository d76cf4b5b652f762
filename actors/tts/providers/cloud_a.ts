/**
 * `cloud_a`: Alibaba Cloud Model Studio (DashScope) Qwen-TTS.
 *  - synthesis: `POST /api/v1/services/aigc/multimodal-generation/generation` with
 *    `X-DashScope-SSE: enable`; every SSE event carries base64 24 kHz PCM16 in `output.audio.data`.
 *  - voices: console voice names (`Cherry`, `Ethan`, ...) or voices cloned here.
 *  - cloning: `POST /api/v1/services/audio/tts/customization`, model `qwen-voice-enrollment`,
 *    action `create`, the sample inline as a base64 data URI, optional `preferred_name`.
 * A cloned voice only works with the model it was enrolled for, so without an explicit model the
 * catalog's target model is used.
 */
import { sseDataPayloads } from '../../upstream/sse.ts';
import { fetchUpstream, streamBody, type FetchLike } from '../../upstream/http.ts';
import type { CloneRequest, CloneResult, TtsChunk, TtsProvider, TtsRequest } from '../types.ts';
import { UpstreamError } from '../../upstream/errors.ts';
import { rawPcmBySentence } from './audio-output.ts';
import {
  assertConfigured,
  clonedVoiceModel,
  randomAlphanumeric,
  statusFromRequired,
  type CloningProviderConfig,
} from './common.ts';
import { createDashscopeVoice, dashscopeBase } from './dashscope.ts';

const ID = 'cloud_a' as const;
const GENERATION_PATH = '/api/v1/services/aigc/multimodal-generation/generation';
const DEFAULT_MODEL = 'qwen3-tts-flash';
const DEFAULT_VOICE = 'Cherry';
/** Qwen-TTS always streams 24 kHz mono PCM16. */
const QWEN_TTS_RATE = 24000;
const ENROLLMENT_MODEL = 'qwen-voice-enrollment';
/** DashScope: letters, digits and underscores, at most 16 characters. */
export const CLOUD_A_PREFERRED_NAME_PATTERN = /^[A-Za-z0-9_]{1,16}$/;

interface SseEvent {
  output?: { audio?: { data?: string }; finish_reason?: string };
  code?: string;
  message?: string;
}

/**
 * Parses DashScope SSE events (one JSON `data:` line each) as they arrive, with the bounded, linear
 * decoder the LLM client uses: an endless line aborts the request at 1 MiB instead of growing memory.
 */
export async function* sseJsonEvents<T>(body: AsyncIterable<Buffer>, provider: string): AsyncGenerator<T> {
  for await (const payload of sseDataPayloads(body, { label: provider })) {
    const trimmed = payload.trim();
    if (!trimmed) continue;
    let event: T;
    try {
      event = JSON.parse(trimmed) as T;
    } catch {
      throw new UpstreamError(`${provider}: malformed stream event: ${trimmed.slice(0, 200)}`);
    }
    yield event;
  }
}

async function* audioOfEvents(events: AsyncIterable<SseEvent>, provider: string): AsyncGenerator<Buffer> {
  let finished = false;
  for await (const event of events) {
    if (event.code && !event.output) throw new UpstreamError(`${provider}: ${event.code}: ${event.message ?? ''}`);
    const data = event.output?.audio?.data;
    if (data) yield Buffer.from(data, 'base64');
    if (event.output?.finish_reason === 'stop') finished = true;
  }
  // A stream that ends without the final event was cut off: the sentence is incomplete.
  if (!finished) throw new UpstreamError(`${provider}: audio stream ended before the final event`);
}

export function createCloudAProvider(config: CloningProviderConfig = {}): TtsProvider {
  const fetchImpl: FetchLike = config.fetch ?? fetch;
  const baseUrl = dashscopeBase(config.baseUrl);
  const status = () => statusFromRequired(ID, [{ value: config.apiKey, suffix: 'API_KEY' }]);

  async function* synthesize(request: TtsRequest): AsyncGenerator<TtsChunk> {
    assertConfigured(ID, status());
    const voice = request.voice || DEFAULT_VOICE;
    const model = (await clonedVoiceModel(config, ID, request)) || DEFAULT_MODEL;
    yield* rawPcmBySentence(request, { upstreamRate: QWEN_TTS_RATE, provider: ID }, async (sentence) => {
      const response = await fetchUpstream(fetchImpl, `${baseUrl}${GENERATION_PATH}`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${config.apiKey}`,
          'content-type': 'application/json',
          'X-DashScope-SSE': 'enable',
        },
        body: JSON.stringify({ model, input: { text: sentence, voice } }),
        signal: request.signal,
        provider: ID,
      });
      return audioOfEvents(sseJsonEvents<SseEvent>(streamBody(response, request.signal, ID), ID), ID);
    });
  }

  async function clone(request: CloneRequest): Promise<CloneResult> {
    assertConfigured(ID, status());
    const preferredName = request.preferredName || `v${randomAlphanumeric(9)}`;
    const voiceId = await createDashscopeVoice({
      fetchImpl,
      baseUrl,
      apiKey: config.apiKey!,
      provider: ID,
      signal: request.signal,
      body: {
        model: ENROLLMENT_MODEL,
        input: {
          action: 'create',
          target_model: request.targetModel,
          preferred_name: preferredName,
          audio: { data: `data:audio/wav;base64,${request.wav24k.toString('base64')}` },
        },
      },
    });
    return { voiceId, message: `cloud_a enrolled voice ${voiceId} for ${request.targetModel}` };
  }

  // No default clone model: DashScope binds a Qwen clone to one of its voice-cloning models, which the client must choose.
  return { id: ID, defaultVoice: DEFAULT_VOICE, defaultCloneModel: null, status, synthesize, clone };
}
