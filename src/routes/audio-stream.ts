import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { WebSocket } from 'ws';
import { Type } from '@sinclair/typebox';
import { SessionIdParams } from '../schemas/common.ts';
import {
  INBOUND_AUDIO_LIMIT_MS,
  MAX_CONTROL_MESSAGE_BYTES,
  MAX_READ_PAUSE_MS,
  openAudioStream,
} from '../ws/audio-stream.ts';
import { startedSessionFor } from '../ws/socket-session.ts';

/**
 * `WebSocket /sessions/{id}/speak_audio_stream` (spec 6.2): PCM in, avatar speech out over WebRTC. The stream and
 * its back-pressure live in `src/ws/audio-stream.ts`; this route upgrades and admits.
 */
const audioStreamRoutes: FastifyPluginAsyncTypebox = async (app) => {
  const { supervisor } = app.services;

  app.route({
    method: 'GET',
    url: '/sessions/:session_id/speak_audio_stream',
    schema: {
      tags: ['interaction'],
      summary: 'Audio input WebSocket',
      description:
        'Upgrade to a raw WebSocket (no subprotocol). Client → server: binary 16-bit signed little-endian mono PCM at the session ' +
        'sample rate (any whole number of samples per frame; 20 ms recommended), text {type:"config", sample_rate?: 8000–48000} ' +
        '(first message only; answered {type:"ack"}), {type:"eos"} (flush, then the server closes), {type:"interrupt"}. ' +
        `Server → client: {type:"ack"}; {type:"error", code, message}. An invalid message (not one of these JSON objects, over ${MAX_CONTROL_MESSAGE_BYTES} ` +
        'bytes, or a binary frame with an odd byte count) is answered with an error and ignored: the socket stays open. Frames over 1 MiB ' +
        'close the socket (1009). Flow control: while 2 s of speech wait for playout the server stops reading (TCP back-pressure) for ' +
        `at most ${MAX_READ_PAUSE_MS} ms; audio beyond ${INBOUND_AUDIO_LIMIT_MS / 1000} s queued in the stream is dropped with one error ` +
        '{code:"audio_overflow"} per turn, so send at most real time. An interrupt (this message or POST /interrupt) drops the ' +
        'audio queued in the stream; closing the socket ends its turn (what is already queued for playout, ≤ 2 s, still plays). ' +
        'The session must be started. Audio and video go out on WebRTC, status and frame timing on SSE. A plain GET without the upgrade ' +
        'answers 426. See docs/events.md for error codes.',
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
      if (session) openAudioStream(socket, session);
    },
  });
};

export default audioStreamRoutes;
