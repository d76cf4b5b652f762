import { randomUUID } from 'node:crypto';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { FastifyRequest } from 'fastify';
import { SessionIdParams, errors, EmptyBody } from '../schemas/common.ts';
import { AudioUploadForm, ChatRequest, InterruptResponse, SpeakRequest, TranscribeForm, TranscribeResponse } from '../schemas/interaction.ts';
import { HttpError, badRequest, conflict } from '../errors.ts';
import type { TtsProviderId } from '../../actors/tts/types.ts';
import { decodeAudioToPcm16, InvalidAudioError, UPLOAD_AUDIO_RULES } from '../../actors/audio/decode.ts';
import { deferred } from '../sessions/async-queue.ts';
import { requireTtsProvider, validateVoice } from '../sessions/supervisor.ts';
import type { Session } from '../sessions/session.ts';
import type { Services } from '../services.ts';
import { readMultipart, parseBooleanField, parseIntegerField } from './multipart.ts';

/** Direct audio uploads: ~13 minutes of 16 kHz PCM; bounded before buffering. */
export const AUDIO_UPLOAD_MAX_BYTES = 25 * 1024 * 1024;

/** The upload rules (`UPLOAD_AUDIO_RULES`) as the route descriptions state them. */
const UPLOAD_AUDIO_RULE_TEXT =
  `WAV must be ${UPLOAD_AUDIO_RULES.wavBitsPerSample.join('/')}-bit PCM, mono or stereo; every format must be ` +
  `${UPLOAD_AUDIO_RULES.minSampleRate}-${UPLOAD_AUDIO_RULES.maxSampleRate} Hz (otherwise 400), as must \`sample_rate\`. ` +
  'A malformed multipart body (no boundary, truncated, too many fields or files) → 400.';

/** Conversational interaction (spec 4.4, 4.5): speak, chat, interrupt, transcribe and direct audio. */
const interactionRoutes: FastifyPluginAsyncTypebox = async (app) => {
  const { services } = app;
  const { supervisor } = services;
  app.addSchema(SpeakRequest);
  app.addSchema(ChatRequest);

  app.post('/sessions/:session_id/speak', {
    schema: {
      tags: ['interaction'],
      summary: 'Speak text',
      description:
        'Answers at once with an empty body; audio and video go out over WebRTC, progress on SSE. Bypasses the language model. ' +
        '409 while another chat/speak/audio/transcribe is in flight, when the session is not started, or paused.',
      params: SessionIdParams,
      body: SpeakRequest,
      response: { 200: EmptyBody, ...errors(400, 404, 409) },
    },
    handler: async (request, reply) => {
      const session = await readySession(services, request.params.session_id);
      const tts = resolveTtsOverrides(services, session, request.body);
      session.send({ type: 'SPEAK', turn: { id: randomUUID(), mode: 'speak', text: request.body.text, ...tts } });
      reply.code(200).send(undefined as never);
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
      response: { 200: EmptyBody, ...errors(400, 404, 409, 502, 503) },
    },
    handler: async (request, reply) => {
      const session = await readySession(services, request.params.session_id);
      const llmStatus = services.llm.status();
      if (!llmStatus.configured) throw new HttpError(503, `no language model is configured: ${llmStatus.reason ?? 'set SERVICE_LLM_BASE_URL'}`);
      const tts = resolveTtsOverrides(services, session, request.body);
      const turnId = randomUUID();
      const accepted = deferred<void>();
      session.stage.chatAccepted.set(turnId, accepted);
      session.send({ type: 'CHAT', turn: { id: turnId, mode: 'chat', text: request.body.prompt, ...tts } });
      try {
        await accepted.promise;
      } catch (error) {
        // Interrupted (or the session ended) before the first token: the client's own doing, not a server fault.
        if ((error as Error).name === 'AbortError') throw conflict('chat was interrupted before the language model answered');
        throw error;
      }
      reply.code(200).send(undefined as never);
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
      session.send({ type: 'INTERRUPT' });
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
        'Emits SSE status listening and transcript. 503 when no ASR is configured (SERVICE_ASR_BASE_URL); ' +
        '409 when busy or when interrupted before finishing; 502 on upstream failure.',
      params: SessionIdParams,
      consumes: ['multipart/form-data'],
      response: { 200: TranscribeResponse, ...errors(400, 404, 409, 413, 502, 503) },
    },
    handler: async (request) => {
      const session = await readySession(services, request.params.session_id);
      const asrStatus = services.asr.status();
      if (!asrStatus.configured) throw new HttpError(503, `no speech recognizer is configured: ${asrStatus.reason ?? 'set SERVICE_ASR_BASE_URL'}`);
      const form = await readAudioForm(request);
      const triggerChat = parseBooleanField(form.fields.trigger_chat, 'trigger_chat');
      if (triggerChat && !services.llm.status().configured) throw new HttpError(503, 'trigger_chat needs a language model: set SERVICE_LLM_BASE_URL');
      const pcm = await decodeUpload(form.data, session.stage.sampleRate, session.stage.sampleRate);
      assertReady(session);
      const id = randomUUID();
      const result = deferred<string>();
      session.stage.transcribeJobs.set(id, { pcm, sampleRate: session.stage.sampleRate, result });
      session.send({ type: 'TRANSCRIBE', id, triggerChat });
      try {
        return { transcript: await result.promise };
      } catch (error) {
        if ((error as Error).name === 'AbortError') throw conflict('transcription was interrupted');
        throw error;
      }
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
          `Uploads over ${AUDIO_UPLOAD_MAX_BYTES / 1024 / 1024} MB → 413.`,
        params: SessionIdParams,
        consumes: ['multipart/form-data'],
        response: { 200: EmptyBody, ...errors(400, 404, 409, 413) },
      },
      handler: async (request, reply) => {
        const session = await readySession(services, request.params.session_id);
        const form = await readAudioForm(request);
        const rawRate = parseIntegerField(form.fields.sample_rate, 'sample_rate', UPLOAD_AUDIO_RULES.minSampleRate, UPLOAD_AUDIO_RULES.maxSampleRate);
        const pcm = await decodeUpload(form.data, session.stage.sampleRate, rawRate);
        assertReady(session);
        const turnId = randomUUID();
        session.stage.turnAudio.set(turnId, { kind: 'clip', pcm });
        session.send({ type: 'SPEAK_AUDIO', turn: { id: turnId, mode: 'audio', smoothing } });
        reply.code(200).send(undefined as never);
      },
    });
  }

  app.addSchema(AudioUploadForm);
  app.addSchema(TranscribeForm);
  app.addSchema(InterruptResponse);
  app.addSchema(TranscribeResponse);
};

/** A started, non-paused, idle session, or the 404/409 the spec asks for. */
export async function readySession(services: Services, sessionId: string): Promise<Session> {
  const session = await services.supervisor.requireSession(sessionId);
  assertReady(session);
  return session;
}

/**
 * Checked again right before the event is sent when the handler awaited in between (upload, decode):
 * the session may have been paused, terminated or given another turn meanwhile, and the machine would
 * silently drop the event, leaving the request waiting forever.
 */
function assertReady(session: Session): void {
  if (session.state === 'created') throw conflict('session is not started: call POST /sessions/{session_id}/start first');
  if (session.state === 'paused') throw conflict('session is paused: call POST /sessions/{session_id}/resume first');
  if (session.state !== 'running') throw conflict(`session is ${session.state}`);
  if (session.busy) throw conflict('a previous chat, speak, audio or transcribe request is in flight; call interrupt first');
}

/** Per-request provider/voice/model overrides, validated now so a bad value is a 400 rather than a silent turn. */
export function resolveTtsOverrides(
  services: Services,
  session: Session,
  body: { voice?: string | null; tts_provider?: string | null; tts_model?: string | null },
): { voice: string | null; ttsProvider: TtsProviderId; ttsModel: string | null } {
  const providerId = body.tts_provider ?? session.stored.tts_provider;
  const provider = requireTtsProvider((id) => services.tts.get(id), providerId);
  // A voice belongs to its provider: switching provider without a voice uses that provider's default.
  const voice = body.voice ?? (body.tts_provider && body.tts_provider !== session.stored.tts_provider ? null : session.stored.tts_voice);
  validateVoice(provider, voice);
  return { voice, ttsProvider: provider.id, ttsModel: body.tts_model ?? session.stored.tts_model ?? null };
}

async function readAudioForm(request: FastifyRequest): Promise<{ data: Buffer; fields: Record<string, string> }> {
  const form = await readMultipart(request, {
    fileField: 'audio',
    maxFileBytes: AUDIO_UPLOAD_MAX_BYTES,
    tooLargeDetail: `audio is larger than ${AUDIO_UPLOAD_MAX_BYTES / 1024 / 1024} MB`,
  });
  if (!form.file) throw badRequest('audio file is required');
  if (form.file.data.length === 0) throw badRequest('audio file is empty');
  return { data: form.file.data, fields: form.fields };
}

async function decodeUpload(data: Buffer, targetRate: number, rawSampleRate?: number): Promise<Int16Array> {
  try {
    const decoded = await decodeAudioToPcm16(data, { targetRate, rawSampleRate, rules: UPLOAD_AUDIO_RULES });
    if (decoded.pcm.length === 0) throw badRequest('audio contains no samples');
    return decoded.pcm;
  } catch (error) {
    if (error instanceof InvalidAudioError) throw badRequest(`invalid audio: ${error.message}`);
    throw error;
  }
}

export default interactionRoutes;
