import { Type } from '@sinclair/typebox';
import { MAX_JSON_DEPTH } from '../../actors/json-depth.ts';
import { MAX_TOOLS_PER_SESSION, TOOL_NAME_PATTERN } from '../sessions/tools.ts';

/** An OpenAI function definition, optionally with the webhook that runs it (docs/integration.md, "Tool calling"). */
export const ToolDefinition = Type.Object(
  {
    type: Type.Literal('function'),
    function: Type.Object(
      {
        name: Type.String({ pattern: TOOL_NAME_PATTERN, description: 'Unique within the session' }),
        description: Type.Optional(Type.String({ maxLength: 4096, description: 'What the tool does, for the model' })),
        parameters: Type.Object(
          { type: Type.Literal('object') },
          {
            additionalProperties: true,
            description: `JSON Schema of the arguments; must be of type object. The whole definition nests at most ${MAX_JSON_DEPTH} levels (else 400)`,
          },
        ),
        strict: Type.Optional(Type.Boolean()),
      },
      { additionalProperties: false },
    ),
    webhook: Type.Optional(
      Type.String({
        maxLength: 2048,
        description:
          'http(s) URL the service POSTs each call to (signed per Standard Webhooks when SERVICE_WEBHOOK_SECRET is set); its host must be in ' +
          'SERVICE_WEBHOOK_ALLOWED_HOSTS. Without it the tool is a client tool: SSE tool_call, answered on POST /sessions/{id}/tool_results.',
      }),
    ),
  },
  {
    additionalProperties: false,
    examples: [
      {
        type: 'function',
        function: {
          name: 'get_weather',
          description: 'Current weather for a city',
          parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
        },
        webhook: 'https://hooks.example.com/weather',
      },
    ],
  },
);

/** A session's tools; invalid definitions (names, duplicates, parameters, sizes, webhook hosts) → 400. */
export const ToolList = Type.Array(ToolDefinition, {
  maxItems: MAX_TOOLS_PER_SESSION,
  description: `Functions the language model may call in chat turns (at most ${MAX_TOOLS_PER_SESSION}); see docs/integration.md`,
});

export const ToolResultRequest = Type.Object(
  {
    call_id: Type.String({ minLength: 1, maxLength: 256, description: 'The call_id of the SSE tool_call event' }),
    output: Type.Unknown({
      description: `Any JSON value: the tool output the model receives (as JSON text, at most 64 KiB and ${MAX_JSON_DEPTH} levels deep, else 400)`,
    }),
  },
  {
    $id: 'ToolResultRequest',
    additionalProperties: false,
    examples: [{ call_id: 'call_abc123', output: { temperature_c: 21 } }],
  },
);

export const ToolResultResponse = Type.Object({ accepted: Type.Literal(true) }, { $id: 'ToolResultResponse' });

/** The SSE event `tool_call` (documentation: the events route lists it). */
export const ToolCallEvent = Type.Object(
  {
    turn_id: Type.String(),
    call_id: Type.String(),
    name: Type.String(),
    arguments: Type.Record(Type.String(), Type.Unknown(), { description: "The model's arguments, parsed" }),
  },
  {
    $id: 'ToolCallEvent',
    description: 'SSE event `tool_call`: every tool call of a chat turn (webhook and client tools)',
  },
);
