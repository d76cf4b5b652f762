import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { SessionIdParams, errors } from '../schemas/common.ts';
import { ExpressionRequest, ExpressionResponse } from '../schemas/expression.ts';

/** `POST /sessions/{id}/expression`: the route translates; the session's machine admits it (`Session.setExpression`). */
const expressionRoutes: FastifyPluginAsyncTypebox = async (app) => {
  const { supervisor } = app.services;
  app.addSchema(ExpressionRequest);
  app.addSchema(ExpressionResponse);

  app.post('/sessions/:session_id/expression', {
    schema: {
      tags: ['interaction'],
      summary: 'Show a facial expression',
      description:
        'The avatar blends into `name` at `intensity` over ~300 ms and holds it for `duration_ms` (or until the next expression; ' +
        '`neutral` ends the one shown), speech and visemes going on underneath. SSE `expression`; the transcript records it with the ' +
        'turn in flight. 400 for an unknown name or an intensity outside 0–1; 409 on a terminated session.',
      params: SessionIdParams,
      body: ExpressionRequest,
      response: { 200: ExpressionResponse, ...errors(400, 404, 409) },
    },
    handler: async (request) => {
      const session = await supervisor.requireSession(request.params.session_id);
      const { name, intensity, duration_ms } = request.body;
      const cue = session.setExpression({
        name,
        intensity: intensity ?? 1,
        ...(duration_ms !== undefined ? { durationMs: duration_ms } : {}),
      });
      return {
        name: cue.name,
        intensity: cue.intensity,
        duration_ms: cue.durationMs ?? null,
        start_ms: Math.round(cue.startMs),
      };
    },
  });
};

export default expressionRoutes;
