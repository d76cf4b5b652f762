import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { SessionIdParams, errors } from '../schemas/common.ts';
import { ToolCallEvent, ToolResultRequest, ToolResultResponse } from '../schemas/tools.ts';

/** Client tools' answers (docs/integration.md, "Tool calling"). */
const toolRoutes: FastifyPluginAsyncTypebox = async (app) => {
  const { supervisor } = app.services;
  app.addSchema(ToolResultRequest);
  app.addSchema(ToolResultResponse);
  app.addSchema(ToolCallEvent);

  app.post('/sessions/:session_id/tool_results', {
    schema: {
      tags: ['tools'],
      summary: "Answer a client tool's call",
      description:
        'The output of a client tool (one defined without webhook) for the call announced by the SSE event tool_call ' +
        '{turn_id, call_id, name, arguments} (schema ToolCallEvent). The model receives `output` as JSON text. 404 when the session ' +
        'never made this call; 409 when the call is closed: its 30 s deadline passed (the model was told the tool failed), it was ' +
        'answered already, or its turn was interrupted; 400 when output is over 64 KiB as JSON.',
      params: SessionIdParams,
      body: ToolResultRequest,
      response: { 200: ToolResultResponse, ...errors(400, 404, 409) },
    },
    handler: async (request) => {
      const session = await supervisor.requireSession(request.params.session_id);
      session.answerToolCall(request.body.call_id, request.body.output);
      return { accepted: true as const };
    },
  });
};

export default toolRoutes;
