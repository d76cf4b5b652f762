import type { OutgoingHttpHeaders } from 'node:http';
import type { FastifyReply } from 'fastify';
import { Type } from '@sinclair/typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { SessionIdParams, errors } from '../schemas/common.ts';

/** Server-sent events of a session (spec 6.1); stays open for the session's lifetime. */
const eventRoutes: FastifyPluginAsyncTypebox = async (app) => {
  const { supervisor } = app.services;

  app.get('/sessions/:session_id/events', {
    schema: {
      tags: ['events'],
      summary: 'Session event stream',
      description:
        'text/event-stream. Events: transcript {text, is_final}, llm {delta}, tts {stage, ms_elapsed, sentence_index?}, ' +
        'frame {frame_idx, pts_ms}, status {stage, message?}, error {code, message}, session.terminated {}, ' +
        'tool_call {turn_id, call_id, name, arguments} (every tool call of a chat turn; schema ToolCallEvent). ' +
        'A consumer more than ~5 s behind is disconnected. See docs/events.md.',
      params: SessionIdParams,
      produces: ['text/event-stream'],
      response: { 200: Type.String({ description: 'text/event-stream' }), ...errors(404, 409) },
    },
    handler: async (request, reply) => {
      const session = await supervisor.requireSession(request.params.session_id);
      reply.hijack();
      const res = reply.raw;
      // Gone while the session was looked up: its 'close' has fired already, so it must not be attached (nor hold the session).
      if (res.destroyed) return;
      res.writeHead(200, {
        'content-type': 'text/event-stream; charset=utf-8',
        'cache-control': 'no-cache, no-transform',
        connection: 'keep-alive',
        'x-accel-buffering': 'no',
        ...corsHeaders(reply),
      });
      res.flushHeaders();
      res.write(': connected\n\n');
      // A subscriber keeps the session from being reaped as orphaned until its stream closes.
      session.attachEvents(res, () => request.log.debug('sse consumer detached'));
    },
  });
};

/**
 * A hijacked reply sends none of the headers set on it, so the CORS headers @fastify/cors set in its onRequest hook
 * are copied here: whether the origin may read the stream stays the origin guard's decision (`listsOrigin`), the
 * same as on every other route, not a second comparison of Origin strings.
 */
function corsHeaders(reply: FastifyReply): OutgoingHttpHeaders {
  const headers: OutgoingHttpHeaders = {};
  for (const [name, value] of Object.entries(reply.getHeaders())) {
    if (value !== undefined && (name.startsWith('access-control-') || name === 'vary')) headers[name] = value;
  }
  return headers;
}

export default eventRoutes;
