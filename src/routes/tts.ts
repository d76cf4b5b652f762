import { Type } from '@sinclair/typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { errors, Nullable } from '../schemas/common.ts';
import { badGateway, badRequest } from '../errors.ts';
import { defaultsPersona, requestOverrides, resolveTtsSelection } from '../sessions/index.ts';
import {
  concatPcm,
  encodeWav,
  isAbortError,
  resamplePcm16,
  TTS_PROVIDER_IDS,
  type TtsProviderId,
} from '../tts/stage.ts';
import type { Services } from '../services.ts';
import { closedSignal } from '../http/closed-signal.ts';
import {
  MAX_RUNNING_PREVIEWS,
  MAX_WAITING_PREVIEWS,
  PREVIEW_RETRY_AFTER_S,
  previewAdmission,
  previewsBusy,
  type PreviewAdmission,
} from '../tts/preview-queue.ts';

/** Spec 8: the preview text limit; `SERVICE_TTS_PREVIEW_MAX_CHARS` may only lower it. */
export const PREVIEW_TEXT_HARD_LIMIT = 1000;
/**
 * Whole-preview bound. 1000 characters are about a minute of speech; every provider here synthesises
 * faster than real time, and single upstream waits are bounded by the adapters (30 s headers, 120 s body),
 * so a preview still running after two minutes is a stuck upstream, answered as 502.
 */
export const PREVIEW_TIMEOUT_MS = 120_000;
/** Memory bound on what one preview may buffer: far above 1000 characters of speech, far below a runaway stream. */
export const PREVIEW_MAX_AUDIO_SECONDS = 600;

export const TtsPreviewRequest = Type.Object(
  {
    text: Type.String({
      maxLength: PREVIEW_TEXT_HARD_LIMIT,
      description: 'Text to synthesise; 1 to 1000 characters (SERVICE_TTS_PREVIEW_MAX_CHARS may lower the limit)',
    }),
    voice: Type.Optional(
      Nullable(
        Type.String({
          maxLength: 2048,
          description:
            'Voice identifier; format depends on the provider (docs/providers.md); a cloned voice_id works too',
        }),
      ),
    ),
    tts_provider: Type.Optional(
      Nullable(
        Type.String({
          description:
            `One of ${TTS_PROVIDER_IDS.join(', ')} (cloud_e and cloud_f as for speak); default: the service-wide persona default ` +
            '(POST /customize) or SERVICE_TTS_DEFAULT_PROVIDER. Unknown or unconfigured → 400.',
        }),
      ),
    ),
    tts_model: Type.Optional(
      Nullable(Type.String({ maxLength: 128, description: 'Provider-specific model identifier' })),
    ),
    provider: Type.Optional(
      Nullable(Type.String({ description: 'Deprecated alias of tts_provider (earlier interface variant)' })),
    ),
    model: Type.Optional(
      Nullable(
        Type.String({ maxLength: 128, description: 'Deprecated alias of tts_model (earlier interface variant)' }),
      ),
    ),
  },
  {
    $id: 'TtsPreviewRequest',
    additionalProperties: false,
    examples: [{ text: 'Hello! This is how I sound.', voice: 'en-GB-RyanNeural', tts_provider: 'builtin' }],
  },
);

type PreviewBody = {
  text: string;
  voice?: string | null;
  tts_provider?: string | null;
  tts_model?: string | null;
  provider?: string | null;
  model?: string | null;
};

/**
 * Longest a preview waits in line for a running slot before it is told the line is busy (503 + Retry-After): a
 * client (a page previewing voices) gets an answer it can act on within seconds rather than holding its request
 * open behind a backlog for the whole preview time limit.
 */
export const PREVIEW_MAX_WAIT_MS = 10_000;

/** `POST /tts/preview` (spec 4.9): one-off synthesis without a session, answered as one WAV. */
const ttsRoutes: FastifyPluginAsyncTypebox = async (app) => {
  const { services } = app;
  app.addSchema(TtsPreviewRequest);
  const previews = previewAdmission();

  app.post('/tts/preview', {
    schema: {
      tags: ['tts'],
      summary: 'Preview speech',
      description:
        'Synthesises `text` with the chosen provider/voice/model and answers `audio/wav`: 16-bit PCM, mono, at the session sample rate ' +
        '(SERVICE_SAMPLE_RATE, default 16000 Hz), all sentences concatenated. 400: text empty (or only whitespace) or over the limit, ' +
        'tts_provider unknown or not configured, voice unknown. 502: the upstream provider failed (its text in `detail`) or the preview ' +
        `did not finish within ${PREVIEW_TIMEOUT_MS / 1000} s. 503 {detail} with Retry-After (${PREVIEW_RETRY_AFTER_S} s): ` +
        `${MAX_RUNNING_PREVIEWS} previews synthesise at once and ${MAX_WAITING_PREVIEWS} more may wait; the next is refused ` +
        `(a preview that cannot start within ${PREVIEW_MAX_WAIT_MS / 1000} s gets 503 too). Previews never delay live sessions: the builtin ` +
        'provider runs them in an engine process of their own. Voice/model default to the persona defaults when the provider is the default one.',
      body: TtsPreviewRequest,
      produces: ['audio/wav'],
      response: {
        200: Type.String({ format: 'binary', description: '16-bit PCM mono WAV at the session sample rate' }),
        ...errors(400, 502, 503),
      },
    },
    handler: async (request, reply) => {
      const resolved = await resolvePreview(services, request.body);
      const signal = AbortSignal.any([closedSignal(reply), AbortSignal.timeout(PREVIEW_TIMEOUT_MS)]);
      const release = await waitForSlot(previews, signal);
      let pcm: Int16Array;
      try {
        pcm = await synthesizeAll(services, resolved, signal);
      } finally {
        release();
      }
      reply
        .header('cache-control', 'no-store')
        .type('audio/wav')
        .send(encodeWav(pcm, services.config.sampleRate) as never);
      return reply;
    },
  });
};

interface ResolvedPreview {
  text: string;
  providerId: TtsProviderId;
  voice: string | null;
  model: string | null;
}

/** Validates the request; provider/voice/model are its overrides on the service-wide persona (`persona.ts`). */
export async function resolvePreview(services: Services, body: PreviewBody): Promise<ResolvedPreview> {
  const text = body.text;
  if (text.trim().length === 0) throw badRequest('text must not be empty');
  const limit = Math.min(services.config.ttsPreviewMaxChars, PREVIEW_TEXT_HARD_LIMIT);
  // Characters as code points, the way the schema validator counts maxLength.
  const length = [...text].length;
  if (length > limit) throw badRequest(`text is ${length} characters; the limit is ${limit}`);

  const overrides = requestOverrides({
    tts_provider: pickAlias(body.tts_provider, body.provider, 'tts_provider', 'provider'),
    voice: body.voice,
    tts_model: pickAlias(body.tts_model, body.model, 'tts_model', 'model'),
  });
  const persona = defaultsPersona(services.config, await services.defaults.get());
  const tts = resolveTtsSelection((id) => services.tts.get(id), persona, overrides);
  return { text, providerId: tts.provider, voice: tts.voice, model: tts.model };
}

function pickAlias(
  current: string | null | undefined,
  legacy: string | null | undefined,
  name: string,
  legacyName: string,
): string | null {
  if (current != null && legacy != null && current !== legacy)
    throw badRequest(`${name} and its deprecated alias ${legacyName} disagree`);
  return current ?? legacy ?? null;
}

/** A slot among the running previews; a wait past `PREVIEW_MAX_WAIT_MS` (or the preview time limit) is the line being busy (503). */
async function waitForSlot(previews: PreviewAdmission, signal: AbortSignal): Promise<() => void> {
  const waiting = AbortSignal.any([signal, AbortSignal.timeout(PREVIEW_MAX_WAIT_MS)]);
  try {
    return await previews.acquire(waiting);
  } catch (error) {
    if (waiting.aborted && (waiting.reason as Error | undefined)?.name === 'TimeoutError') throw previewsBusy();
    throw error;
  }
}

/** Runs the provider to the end and concatenates every chunk at the service sample rate. */
async function synthesizeAll(services: Services, preview: ResolvedPreview, signal: AbortSignal): Promise<Int16Array> {
  const sampleRate = services.config.sampleRate;
  const maxSamples = sampleRate * PREVIEW_MAX_AUDIO_SECONDS;
  const parts: Int16Array[] = [];
  let total = 0;
  try {
    const stream = services.tts.get(preview.providerId).synthesize({
      text: preview.text,
      voice: preview.voice,
      model: preview.model,
      sampleRate,
      signal,
      priority: 'preview',
    });
    for await (const chunk of stream) {
      signal.throwIfAborted();
      // Adapters promise the requested rate; resampling here keeps the WAV header truthful if one does not.
      const pcm =
        chunk.sampleRate === sampleRate ? chunk.pcm : await resamplePcm16(chunk.pcm, chunk.sampleRate, sampleRate);
      total += pcm.length;
      if (total > maxSamples)
        throw badGateway(
          `tts_provider "${preview.providerId}" produced more than ${PREVIEW_MAX_AUDIO_SECONDS} s of audio`,
        );
      parts.push(pcm);
    }
  } catch (error) {
    if (signal.aborted && isAbortError(error)) {
      const reason = signal.reason as Error | undefined;
      if (reason?.name === 'TimeoutError')
        throw badGateway(
          `tts_provider "${preview.providerId}" did not finish the preview within ${PREVIEW_TIMEOUT_MS / 1000} s`,
        );
    }
    throw error;
  }
  if (total === 0) throw badGateway(`tts_provider "${preview.providerId}" returned no audio`);
  return concatPcm(parts, total);
}

export default ttsRoutes;
