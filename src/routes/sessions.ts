import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import {
  CreateSessionRequest,
  CreateSessionResponse,
  SessionInfo,
  SessionTranscript,
  StatusOnly,
  TranscriptQuery,
} from '../schemas/sessions.ts';
import { SessionIdParams, errors } from '../schemas/common.ts';
import {
  TRANSCRIPTS_MAX_TOTAL_BYTES,
  TRANSCRIPT_MAX_BYTES,
  TRANSCRIPT_MAX_TURNS,
  TRANSCRIPT_TEXT_MAX_BYTES,
  TRANSCRIPT_TURN_MAX_BYTES,
} from '../sessions/transcript.ts';

const kib = (bytes: number) => bytes / 1024;

/** Session lifecycle (spec 3.1, 4.3) plus pause/resume, which the spec leaves open. */
const sessionRoutes: FastifyPluginAsyncTypebox = async (app) => {
  const { supervisor } = app.services;
  app.addSchema(CreateSessionRequest);
  app.addSchema(CreateSessionResponse);
  app.addSchema(SessionInfo);
  app.addSchema(SessionTranscript);

  app.post('/sessions', {
    schema: {
      tags: ['sessions'],
      summary: 'Create a session',
      description:
        '400 when avatar_id does not exist (also when its custom avatar is deleted while the session is being created), the model is not connected, the model cannot render that avatar, or tts_provider/tts_voice is unknown, ' +
        'or webhook_url is not an http(s) URL on a host listed in SERVICE_WEBHOOK_ALLOWED_HOSTS, or render is not server/client or is client for a model other than lipsync, rt, rt_head; ' +
        '502 when the rendering backend or an upstream fails during initialization; 503 {detail} with Retry-After when ' +
        'SERVICE_MAX_PENDING_SESSIONS sessions are waiting unstarted (creations in progress count too), or the service is out of file descriptors. A created session renders and ' +
        'sends nothing until it is started; one not started within SERVICE_START_TIMEOUT_MS is terminated.',
      body: CreateSessionRequest,
      response: { 200: CreateSessionResponse, ...errors(400, 502, 503) },
    },
    handler: async (request) => {
      const session = await supervisor.create(request.body);
      return { session_id: session.id, status: 'created' as const };
    },
  });

  app.get('/sessions/:session_id', {
    schema: {
      tags: ['sessions'],
      summary: 'Session metadata and state',
      description:
        'Terminated sessions answer with state `terminated` while their tombstone is retained (SERVICE_SESSION_TOMBSTONE_MS).',
      params: SessionIdParams,
      response: { 200: SessionInfo, ...errors(404) },
    },
    handler: async (request) => supervisor.describe(request.params.session_id) as never,
  });

  app.get('/sessions/:session_id/transcript', {
    schema: {
      tags: ['sessions'],
      summary: 'The conversation so far',
      description:
        'Finished turns in order: what the user said or asked (user_text), what the avatar was to say (assistant_text), what of it was ' +
        'played before an interrupt (heard_text), its tool calls and how it ended. ' +
        `The newest ${TRANSCRIPT_MAX_TURNS} turns are kept, at most ${kib(TRANSCRIPT_MAX_BYTES)} KiB of them (older ones are dropped); ` +
        `a text over ${kib(TRANSCRIPT_TEXT_MAX_BYTES)} KiB is cut and ends with …, a turn over ${kib(TRANSCRIPT_TURN_MAX_BYTES)} KiB ` +
        'loses its tool arguments. Kept after termination as long as the tombstone (SERVICE_SESSION_TOMBSTONE_MS), or until all ' +
        `kept transcripts pass ${kib(TRANSCRIPTS_MAX_TOTAL_BYTES)} KiB (the least recently written go first); 404 for an unknown ` +
        'session. Optional paging: `limit` turns `after` a turn_id; 400 when `after` is not a kept turn.',
      params: SessionIdParams,
      querystring: TranscriptQuery,
      response: { 200: SessionTranscript, ...errors(400, 404) },
    },
    handler: async (request, reply) => {
      const { limit, after } = request.query;
      // Each turn was serialised once when it ended: the body is their JSON joined, sent as is.
      const body = await supervisor.transcript(request.params.session_id, {
        limit: limit === undefined ? undefined : Number(limit),
        after,
      });
      return reply.type('application/json; charset=utf-8').send(body as never);
    },
  });

  app.post('/sessions/:session_id/start', {
    schema: {
      tags: ['sessions'],
      summary: 'Start a session',
      description:
        'Once per session; starts the media clock (frames and audio flow from here). 409 when already running, paused or terminated; ' +
        '503 {detail} with Retry-After when SERVICE_MAX_SESSIONS sessions are active. A started session with no consumer (connected ' +
        'WebRTC peer, SSE subscriber, audio WebSocket, recording, offline job, REST call) for SERVICE_ORPHAN_TIMEOUT_S is terminated ' +
        '(reason `orphaned`).',
      params: SessionIdParams,
      response: { 200: StatusOnly('running'), ...errors(404, 409, 503) },
    },
    handler: async (request) => {
      await supervisor.start(request.params.session_id);
      return { status: 'running' as const };
    },
  });

  app.post('/sessions/:session_id/pause', {
    schema: {
      tags: ['sessions'],
      summary: 'Pause a running session',
      description:
        'Interrupts the current turn and holds the avatar idle (idle frames keep flowing). speak/chat answer 409 while paused.',
      params: SessionIdParams,
      response: { 200: StatusOnly('paused'), ...errors(404, 409) },
    },
    handler: async (request) => {
      await supervisor.pause(request.params.session_id);
      return { status: 'paused' as const };
    },
  });

  app.post('/sessions/:session_id/resume', {
    schema: {
      tags: ['sessions'],
      summary: 'Resume a paused session',
      params: SessionIdParams,
      response: { 200: StatusOnly('running'), ...errors(404, 409) },
    },
    handler: async (request) => {
      await supervisor.resume(request.params.session_id);
      return { status: 'running' as const };
    },
  });

  app.delete('/sessions/:session_id', {
    schema: {
      tags: ['sessions'],
      summary: 'Terminate a session',
      description:
        'Closes the WebRTC track, releases the renderer, removes stored session state and keeps a small tombstone.',
      params: SessionIdParams,
      response: { 200: StatusOnly('terminated'), ...errors(404) },
    },
    handler: async (request) => {
      await supervisor.terminate(request.params.session_id);
      return { status: 'terminated' as const };
    },
  });
};

export default sessionRoutes;
