import { Type } from '@sinclair/typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { SessionIdParams, errors } from '../schemas/common.ts';
import { OutputCreateBody, OutputStatusBody, OutputListBody } from '../schemas/outputs.ts';

const OutputParams = Type.Object({
  session_id: Type.String({ minLength: 1, maxLength: 128 }),
  output_id: Type.String({ minLength: 1, maxLength: 64 }),
});

/** RTMP and WHIP pushes of a session to media servers (docs/streaming.md). */
const outputRoutes: FastifyPluginAsyncTypebox = async (app) => {
  const { supervisor, config } = app.services;
  const settings = { rtmpVideoBitrateKbps: config.rtmpVideoBitrateKbps, iceServers: config.iceServers };
  app.addSchema(OutputStatusBody);
  const statusRef = Type.Ref('OutputStatus');

  app.post('/sessions/:session_id/outputs', {
    schema: {
      tags: ['streaming'],
      summary: 'Push the session to a media server (RTMP or WHIP)',
      description:
        'Starts an output and answers at once (state `connecting`); `GET` shows it go `live`. `rtmp`: rtmp:// or rtmps:// URL with ' +
        'application and stream key (H.264 at the avatar size and fps, a keyframe every 2 s, AAC, FLV; bitrate ' +
        '`SERVICE_RTMP_VIDEO_BITRATE_KBPS`). `whip`: http(s) WHIP endpoint; `bearer_token` goes in `Authorization: Bearer`. ' +
        'A failed output sends SSE `error` `output_failed` and reconnects with backoff for up to 120 s (`retrying`, then `failed`). ' +
        'Outputs end with the session. 400 bad URL (wrong scheme, credentials in it); 404 unknown session; 409 not started, ' +
        'terminated, or 4 outputs already (`MAX_OUTPUTS_PER_SESSION`: delete one first).',
      params: SessionIdParams,
      body: OutputCreateBody,
      response: { 201: statusRef, ...errors(400, 404, 409) },
    },
    handler: async (request, reply) => {
      const session = await supervisor.requireSession(request.params.session_id);
      return reply.code(201).send(session.addOutput(request.body, settings));
    },
  });

  app.get('/sessions/:session_id/outputs', {
    schema: {
      tags: ['streaming'],
      summary: 'List the session’s outputs',
      description:
        'Each output with its type, state and URL cut to scheme, host and first path segment (no stream key, no token). 404 unknown session.',
      params: SessionIdParams,
      response: { 200: OutputListBody, ...errors(404) },
    },
    handler: async (request) => {
      const session = await supervisor.requireSession(request.params.session_id);
      return { outputs: session.listOutputs() };
    },
  });

  app.delete('/sessions/:session_id/outputs/:output_id', {
    schema: {
      tags: ['streaming'],
      summary: 'Stop an output',
      description: 'Stops the push (a WHIP session is DELETEd at its server). 404 unknown session or output.',
      params: OutputParams,
      response: { 204: Type.Null({ description: 'Output stopped' }), ...errors(404) },
    },
    handler: async (request, reply) => {
      const session = await supervisor.requireSession(request.params.session_id);
      await session.removeOutput(request.params.output_id);
      return reply.code(204).send(null);
    },
  });
};

export default outputRoutes;
