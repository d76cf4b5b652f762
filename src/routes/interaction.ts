import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { SessionIdParams, errors, EmptyBody } from '../schemas/common.ts';
import {
  AudioUploadForm,
  ChatRequest,
  InterruptResponse,
  SpeakRequest,
  TranscribeForm,
  TranscribeResponse,
} from '../schemas/interaction.ts';
import { HttpError, badRequest } from '../errors.ts';
import { requestOverrides, resolveTtsSelection, type Session, type TtsSelection } from '../sessions/index.ts';
import type { Services } from '../services.ts';
import { readMultipart, parseBooleanField, parseIntegerField } from '../http/multipart.ts';
import { multipartForm } from '../schemas/multipart-form.ts';
import { closedSignal } from '../http/closed-signal.ts';
import {
  closeAudioDecoder,
  decodeClientAudio,
  describeDuration,
  refuseTooLongWhileStreaming,
  UPLOAD_AUDIO_RULES,
  uploadAdmission,
  type UploadAdmission,
} from '../http/audio-uploads.ts';

/** Direct audio uploads: ~13 minutes of 16 kHz PCM; bounded before buffering. */
export const AUDIO_UPLOAD_MAX_BYTES = 25 * 1024 * 1024;
/**
 * Longest speak_audio / speak_rt_audio clip once decoded: one turn is a reply, not a programme. Bytes do not
 * bound this: 3.6 MB of 8 kb/s MP3 is an hour (~115 MB of 16 kHz PCM, far more at its source rate).
 */
export const TURN_AUDIO_MAX_MS = 10 * 60_000;
/** Longest transcribe upload once decoded: an utterance to recognise, with room for a long dictation. */
export const TRANSCRIBE_AUDIO_MAX_MS = 10 * 60_000;

/**
 * The turn a speak/chat/audio request started: its id answers in this header (the body stays empty, spec 4.4/4.5)
 * and appears as `turn_id` on the turn's SSE events, as `turnId` in the logs and in `GET /sessions/{id}/metrics`.
 */
export const TURN_ID_HEADER = 'x-turn-id';

/** A 200 with an empty body and the turn id header, as documented in OpenAPI. */
const TurnAccepted = {
  ...EmptyBody,
  description: 'Accepted; empty body. The `X-Turn-Id` header names the turn (also `turn_id` on its SSE events).',
  headers: { [TURN_ID_HEADER]: { type: 'string', format: 'uuid', description: 'Id of the turn this request started' } },
};

/** The upload rules (`UPLOAD_AUDIO_RULES`) as the route descriptions state them. */
const UPLOAD_AUDIO_RULE_TEXT =
  `WAV must be ${UPLOAD_AUDIO_RULES.wavBitsPerSample.join('/')}-bit PCM, mono or stereo; every format must be ` +
  `${UPLOAD_AUDIO_RULES.minSampleRate}-${UPLOAD_AUDIO_RULES.maxSampleRate} Hz (otherwise 400), as must \`sample_rate\`. ` +
  'A malformed multipart body (no boundary, truncated, too many fields or files) → 400. ' +
  `409 without reading the upload while the session is busy or another upload to it is being received; 503 (Retry-After) ` +
  'while the service reads too many uploads at once.';

/**
 * Conversational interaction (spec 4.4, 4.5): speak, chat, interrupt, transcribe and direct audio. Each handler
 * reads the request and calls the session's verb (`speak`, `chat`, `transcribe`, `speakAudio`, `interrupt`): the
 * session builds the turn, and whether it takes it (the 409 when not) is its machine's answer.
 */
const interactionRoutes: FastifyPluginAsyncTypebox = async (app) => {
  const { services } = app;
  const { supervisor } = services;
  const admission = uploadAdmission(services);
  app.addSchema(SpeakRequest);
  app.addSchema(ChatRequest);
  app.addHook('onClose', async () => closeAudioDecoder());

  app.post('/sessions/:session_id/speak', {
    schema: {
      tags: ['interaction'],
      summary: 'Speak text',
      description:
        'Answers at once with an empty body; audio and video go out over WebRTC, progress on SSE. Bypasses the language model. ' +
        '409 while another chat/speak/audio/transcribe is in flight, when the session is not started, or paused.',
      params: SessionIdParams,
      body: SpeakRequest,
      response: { 200: TurnAccepted, ...errors(400, 404, 409) },
    },
    handler: async (request, reply) => {
      const session = await supervisor.requireSession(request.params.session_id);
      const tts = turnVoice(services, session, request.body);
      const turnId = session.speak(request.body.text, tts);
      reply
        .code(200)
        .header(TURN_ID_HEADER, turnId)
        .send(undefined as never);
    },
  });

  app.post('/sessions/:session_id/chat', {
    schema: {
      tags: ['interaction'],
      summary: 'Chat through the language model',
      description:
        'Runs the prompt through the language model, then synthesis and rendering. Answers (empty body) once the upstream model ' +
        'accepted the request and started streaming; 502 with the upstream text when it fails; 503 when no language model is configured ' +
        '(set SERVICE_LLM_BASE_URL); 409 while a previous chat or speak is in flight (call interrupt first).',
      params: SessionIdParams,
      body: ChatRequest,
      response: { 200: TurnAccepted, ...errors(400, 404, 409, 502, 503) },
    },
    handler: async (request, reply) => {
      const session = await supervisor.requireSession(request.params.session_id);
      const tts = turnVoice(services, session, request.body);
      const llmStatus = services.llm.status();
      if (!llmStatus.configured)
        throw new HttpError(503, `no language model is configured: ${llmStatus.reason ?? 'set SERVICE_LLM_BASE_URL'}`);
      const turnId = await session.chat(request.body.prompt, tts);
      reply
        .code(200)
        .header(TURN_ID_HEADER, turnId)
        .send(undefined as never);
    },
  });

  app.post('/sessions/:session_id/interrupt', {
    schema: {
      tags: ['interaction'],
      summary: 'Interrupt (barge-in)',
      description:
        'Cancels any in-flight chat, speak, speak_audio, audio stream or transcribe; playout stops at the next 10 ms audio chunk and frame ' +
        'boundary. SSE: status interrupted, then idle. Always answers {interrupted: true}; idempotent.',
      params: SessionIdParams,
      response: { 200: InterruptResponse, ...errors(404, 409) },
    },
    handler: async (request) => {
      const session = await supervisor.requireSession(request.params.session_id);
      session.interrupt();
      return { interrupted: true };
    },
  });

  app.post('/sessions/:session_id/transcribe', {
    schema: {
      tags: ['interaction'],
      summary: 'Recognise speech',
      description:
        'multipart/form-data (see TranscribeForm): `audio` 16-bit signed mono PCM at the session sample rate (default 16000 Hz) or WAV, ' +
        `\`trigger_chat\` boolean. ${UPLOAD_AUDIO_RULE_TEXT} ` +
        `Audio over ${AUDIO_UPLOAD_MAX_BYTES / 1024 / 1024} MB or decoding to more than ${describeDuration(TRANSCRIBE_AUDIO_MAX_MS)} → 413. ` +
        'Emits SSE status listening and transcript. 503 when no ASR is configured (SERVICE_ASR_BASE_URL); ' +
        '409 when busy or when interrupted before finishing; 502 on upstream failure.',
      params: SessionIdParams,
      ...multipartForm(TranscribeForm),
      response: { 200: TranscribeResponse, ...errors(400, 404, 409, 413, 502, 503) },
    },
    handler: async (request, reply) => {
      const session = await supervisor.requireSession(request.params.session_id);
      // Asked again (with the payload) once the upload is read; asking now spares reading it for nothing.
      session.assertAdmits('TRANSCRIBE');
      const asrStatus = services.asr.status();
      if (!asrStatus.configured)
        throw new HttpError(
          503,
          `no speech recognizer is configured: ${asrStatus.reason ?? 'set SERVICE_ASR_BASE_URL'}`,
        );
      admitUpload(admission, session, reply);
      const form = await readAudioForm(request, TRANSCRIBE_AUDIO_MAX_MS);
      const triggerChat = parseBooleanField(form.fields.trigger_chat, 'trigger_chat');
      if (triggerChat && !services.llm.status().configured)
        throw new HttpError(503, 'trigger_chat needs a language model: set SERVICE_LLM_BASE_URL');
      const sampleRate = services.config.sampleRate;
      const pcm = await decodeClientAudio(form.data, {
        targetRate: sampleRate,
        rawSampleRate: sampleRate,
        maxDurationMs: TRANSCRIBE_AUDIO_MAX_MS,
        signal: closedSignal(reply),
      });
      const { transcript, turnId } = await session.transcribe(pcm, sampleRate, triggerChat);
      return { transcript, turn_id: turnId };
    },
  });

  for (const [path, smoothing] of [
    ['/sessions/:session_id/speak_audio', false],
    ['/sessions/:session_id/speak_rt_audio', true],
  ] as const) {
    app.post(path, {
      schema: {
        tags: ['interaction'],
        summary: smoothing ? 'Speak audio (rt family)' : 'Speak audio',
        description:
          'multipart/form-data (see AudioUploadForm): `audio` WAV, MP3 or raw PCM (format detected from the bytes), `sample_rate` for raw PCM ' +
          `(default 16000). ${UPLOAD_AUDIO_RULE_TEXT} Skips TTS; the mouth follows the audio. ` +
          (smoothing ? 'Adds DC removal and edge smoothing; recommended for the rt model family. ' : '') +
          `Uploads over ${AUDIO_UPLOAD_MAX_BYTES / 1024 / 1024} MB, or decoding to more than ${describeDuration(TURN_AUDIO_MAX_MS)} of audio, → 413.`,
        params: SessionIdParams,
        ...multipartForm(AudioUploadForm),
        response: { 200: TurnAccepted, ...errors(400, 404, 409, 413, 503) },
      },
      handler: async (request, reply) => {
        const session = await supervisor.requireSession(request.params.session_id);
        session.assertAdmits('SPEAK_AUDIO');
        admitUpload(admission, session, reply);
        const form = await readAudioForm(request, TURN_AUDIO_MAX_MS);
        const rawRate = parseIntegerField(
          form.fields.sample_rate,
          'sample_rate',
          UPLOAD_AUDIO_RULES.minSampleRate,
          UPLOAD_AUDIO_RULES.maxSampleRate,
        );
        const pcm = await decodeClientAudio(form.data, {
          targetRate: services.config.sampleRate,
          rawSampleRate: rawRate,
          maxDurationMs: TURN_AUDIO_MAX_MS,
          signal: closedSignal(reply),
        });
        const turnId = session.speakAudio(pcm, smoothing);
        reply
          .code(200)
          .header(TURN_ID_HEADER, turnId)
          .send(undefined as never);
      },
    });
  }

  app.addSchema(AudioUploadForm);
  app.addSchema(TranscribeForm);
  app.addSchema(InterruptResponse);
  app.addSchema(TranscribeResponse);
};

/** The voice of one speak/chat request: its overrides on the session's persona (`persona.ts`), 400 when invalid. */
function turnVoice(
  services: Services,
  session: Session,
  body: { voice?: string | null; tts_provider?: string | null; tts_model?: string | null },
): TtsSelection {
  return resolveTtsSelection((id) => services.tts.get(id), session.persona, requestOverrides(body));
}

/** The form of an audio upload; refused while it streams once it passes its bytes or its decoded duration. */
async function readAudioForm(
  request: FastifyRequest,
  maxDurationMs: number,
): Promise<{ data: Buffer; fields: Record<string, string> }> {
  const form = await readMultipart(request, {
    fileField: 'audio',
    maxFileBytes: AUDIO_UPLOAD_MAX_BYTES,
    tooLargeDetail: `audio is larger than ${AUDIO_UPLOAD_MAX_BYTES / 1024 / 1024} MB`,
    watchFile: refuseTooLongWhileStreaming({ maxDurationMs }),
  });
  if (!form.file) throw badRequest('audio file is required');
  if (form.file.data.length === 0) throw badRequest('audio file is empty');
  return { data: form.file.data, fields: form.fields };
}

/**
 * Admission of a session's audio upload before its body is read: the session's one upload slot (409 while
 * another is received), then a service-wide slot (503). The machine was asked first (`assertAdmits`).
 */
function admitUpload(admission: UploadAdmission, session: Session, reply: FastifyReply): void {
  admission.reserveSession(session.id, reply);
  admission.admitUpload(reply);
}

export default interactionRoutes;
