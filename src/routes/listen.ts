import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { WebSocket } from 'ws';
import { Type } from '@sinclair/typebox';
import { SessionIdParams } from '../schemas/common.ts';
import { MAX_VAD_BACKLOG_MS } from '../sessions/voice-input.ts';
import { openListenStream } from '../ws/listen-stream.ts';
import { startedSessionFor } from '../ws/socket-session.ts';

/**
 * `WebSocket /sessions/{id}/listen`: hands-free conversation for clients without WebRTC audio. The user's
 * microphone comes in with the framing of spec 6.2 (binary PCM, `config`, `eos`, `interrupt`); the service's
 * voice input detects speech, ends the turn after SERVICE_VAD_SILENCE_MS of silence, recognises and answers
 * it like a chat, and interrupts the avatar when the user talks over it. The client hears the answer on
 * WebRTC and follows the pipeline on SSE; this socket tells it about its own speech (`src/ws/listen-stream.ts`).
 */
const listenRoutes: FastifyPluginAsyncTypebox = async (app) => {
  const { supervisor } = app.services;

  app.route({
    method: 'GET',
    url: '/sessions/:session_id/listen',
    schema: {
      tags: ['interaction'],
      summary: 'Hands-free voice input WebSocket',
      description:
        'Upgrade to a raw WebSocket (no subprotocol). Client → server, as on speak_audio_stream (spec 6.2): binary 16-bit signed ' +
        'little-endian mono PCM of the user’s microphone at the session sample rate (any whole number of samples per frame; 20 ms ' +
        'recommended), text {type:"config", sample_rate?: 8000–48000} (first message only; answered {type:"ack"}), {type:"eos"} (end of ' +
        'the user’s audio: an open turn ends there; the server closes once it has been answered), {type:"interrupt"} (same as POST ' +
        '/interrupt). Server → client: {type:"ack"}; {type:"speech_start"} when voice activity detection (Silero VAD) hears speech of ' +
        'at least SERVICE_VAD_MIN_SPEECH_MS; {type:"speech_end"} after SERVICE_VAD_SILENCE_MS of silence; {type:"transcript", text} ' +
        'when the turn was recognised; {type:"error", code, message}. Each turn goes through SSE like a transcribe with trigger_chat: ' +
        'status listening (at speech start), transcript, then the chat turn. Speech while the avatar is busy interrupts it (barge-in). ' +
        `Without SERVICE_ASR_BASE_URL the socket is told once ({code:"asr_not_configured"}) and speech is not answered. Send at most ` +
        `real time: audio more than ${MAX_VAD_BACKLOG_MS / 1000} s ahead of the detector is dropped (one error {code:"audio_overflow"}). ` +
        'One microphone per session: a new /listen socket or a WebRTC offer carrying a microphone replaces this one (error ' +
        '{code:"voice_input_replaced"}, then close 1008). The session must be started. A plain GET answers 426. See docs/voice-input.md.',
      params: SessionIdParams,
      response: {
        101: Type.Null({ description: 'Switching Protocols: the WebSocket is open' }),
        426: Type.Ref('ErrorBody'),
      },
    },
    handler: async (_request, reply) => {
      reply
        .code(426)
        .header('upgrade', 'websocket')
        .send({ detail: 'this endpoint is a WebSocket: send an Upgrade request' });
    },
    wsHandler: async (socket: WebSocket, request) => {
      const { session_id: sessionId } = request.params as { session_id: string };
      const session = await startedSessionFor(socket, supervisor, sessionId);
      if (session) openListenStream(socket, session);
    },
  });
};

export default listenRoutes;
