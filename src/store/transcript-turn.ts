import { Type, type Static } from '@sinclair/typebox';

/**
 * One finished turn of a session's transcript as a schema: the store keeps these records (`transcripts.ts`), the
 * webhooks send them, and `GET /sessions/{id}/transcript` answers with them (`src/schemas/sessions.ts` builds its
 * response from this one, and the typed client is generated from it). Here, beside the store, so every user reaches
 * the one shape from below.
 */
export const TranscriptToolCall = Type.Object({
  call_id: Type.String(),
  name: Type.String(),
  arguments: Type.Record(Type.String(), Type.Unknown(), {
    description: "The model's arguments, parsed (as in the SSE `tool_call` event)",
  }),
  ok: Type.Union([
    Type.Boolean({ description: 'Whether the call succeeded; null until its result came' }),
    Type.Null(),
  ]),
});

export const TranscriptExpression = Type.Object({
  name: Type.String({ description: 'neutral, smile, concern, surprise or emphasis' }),
  intensity: Type.Number(),
  source: Type.Union([Type.Literal('llm'), Type.Literal('api')]),
  start_ms: Type.Number({ description: 'On the session media clock, as on the SSE `expression` event' }),
});

export const TranscriptTurn = Type.Object({
  turn_id: Type.String(),
  kind: Type.String({ description: 'speak, chat, audio, audio_stream, transcribe or voice' }),
  user_text: Type.Union([
    Type.String({ description: 'chat: the prompt; voice and transcribe: what was recognised' }),
    Type.Null(),
  ]),
  assistant_text: Type.Union([
    Type.String({ description: "speak: the text; chat and voice: the model's reply" }),
    Type.Null(),
  ]),
  heard_text: Type.Union([
    Type.String({
      description:
        'What of assistant_text was played: all of it when completed, the segments that had started playing when cut short',
    }),
    Type.Null(),
  ]),
  tool_calls: Type.Array(TranscriptToolCall),
  expressions: Type.Optional(
    Type.Array(TranscriptExpression, {
      description: 'Expressions shown during the turn (tags in the reply, POST /sessions/{id}/expression), in order',
    }),
  ),
  outcome: Type.Union([
    Type.Literal('completed'),
    Type.Literal('interrupted'),
    Type.Literal('error'),
    Type.Literal('paused'),
  ]),
  started_at: Type.String({ format: 'date-time' }),
  ended_at: Type.String({ format: 'date-time' }),
});

export type TranscriptToolCall = Static<typeof TranscriptToolCall>;
export type TranscriptTurn = Static<typeof TranscriptTurn>;
