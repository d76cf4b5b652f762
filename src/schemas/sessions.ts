import { Type, type Static } from '@sinclair/typebox';
import { Nullable } from './common.ts';
import { ToolList } from './tools.ts';
import { PIPELINE_STAGES, SESSION_STATES } from '../../machines/session.machine.ts';
import { TranscriptTurn } from '../store/transcript-turn.ts';

/** A turn of the transcript: the stored record's schema (the typed client names it too). */
export { TranscriptTurn };

/** Where the face is drawn (docs/embedding.md, "Server or client rendering"). */
export const RenderMode = Type.Union([Type.Literal('server'), Type.Literal('client')], {
  description:
    "`server` (default): the face is rendered and sent as video. `client`: the viewer's browser draws it from the " +
    "avatar's render kit and a pose stream on the `avatar` data channel; the peer gets audio only. `client` only for " +
    'the CPU models lipsync, rt and rt_head (else 400); any other value → 400',
});
export type RenderMode = Static<typeof RenderMode>;

export const CreateSessionRequest = Type.Object(
  {
    avatar_id: Type.String({ minLength: 1, maxLength: 128, description: 'Must exist in GET /avatars' }),
    model: Type.String({ minLength: 1, description: 'Must appear in GET /models with connected=true' }),
    tts_provider: Type.Optional(
      Nullable(Type.String({ description: 'Overrides SERVICE_TTS_DEFAULT_PROVIDER; unknown value → 400' })),
    ),
    tts_voice: Type.Optional(
      Nullable(Type.String({ maxLength: 256, description: 'Overrides the default voice; format depends on provider' })),
    ),
    llm_system_prompt: Type.Optional(
      Nullable(Type.String({ maxLength: 20_000, description: 'Overrides SERVICE_LLM_SYSTEM_PROMPT' })),
    ),
    lipsync_postprocess_mode: Type.Optional(
      Nullable(Type.String({ maxLength: 64, description: 'Post-processing flag for the lipsync model' })),
    ),
    tools: Type.Optional(ToolList),
    motion: Type.Optional(
      Type.Number({
        minimum: 0,
        maximum: 1,
        description:
          'Scales idle sway, breathing, nods and thinking cues (default 1); 0 leaves only blinks and the mouth; outside 0–1 → 400',
      }),
    ),
    render: Type.Optional(RenderMode),
    webhook_url: Type.Optional(
      Nullable(
        Type.String({
          maxLength: 2048,
          description:
            "This session's own webhook receiver (its events go there besides SERVICE_WEBHOOK_URL): an http(s) URL on a host listed in SERVICE_WEBHOOK_ALLOWED_HOSTS, else 400 (docs/integration.md)",
        }),
      ),
    ),
  },
  {
    $id: 'CreateSessionRequest',
    additionalProperties: false,
    examples: [
      {
        avatar_id: 'astronaut',
        model: 'lipsync',
        tts_provider: 'builtin',
        tts_voice: 'en-US-JennyNeural',
        llm_system_prompt: 'You are Nova, a friendly astronaut. Answer in one or two short spoken sentences.',
      },
    ],
  },
);
export type CreateSessionRequest = Static<typeof CreateSessionRequest>;

export const CreateSessionResponse = Type.Object(
  {
    session_id: Type.String({ format: 'uuid' }),
    status: Type.Literal('created'),
  },
  {
    $id: 'CreateSessionResponse',
    examples: [{ session_id: '3f0c9a52-6d1e-4c8b-9a57-2b1e8f4d7c10', status: 'created' }],
  },
);

export const SessionInfo = Type.Object(
  {
    session_id: Type.String({ format: 'uuid' }),
    state: Type.Union(
      SESSION_STATES.map((s) => Type.Literal(s)),
      { description: 'High-level session state' },
    ),
    pipeline: Type.Union(
      PIPELINE_STAGES.map((s) => Type.Literal(s)),
      { description: 'Pipeline stage (spec 3.2); idle outside running' },
    ),
    avatar_id: Type.String(),
    model: Type.String(),
    tts_provider: Type.String(),
    tts_voice: Nullable(Type.String()),
    tts_model: Type.Optional(Nullable(Type.String())),
    llm_system_prompt: Nullable(Type.String()),
    lipsync_postprocess_mode: Nullable(Type.String()),
    render: Type.Optional(RenderMode),
    created_at: Type.String({ format: 'date-time' }),
    updated_at: Type.String({ format: 'date-time' }),
    expires_at: Type.Optional(
      Type.String({ format: 'date-time', description: 'Tombstones only: when the record is forgotten' }),
    ),
    terminated_reason: Type.Optional(Type.String()),
  },
  { $id: 'SessionInfo' },
);

export const StatusOnly = (status: string) => Type.Object({ status: Type.Literal(status) });

/** Optional paging of `GET /sessions/{id}/transcript`; without it the answer holds every kept turn. */
export const TranscriptQuery = Type.Object({
  limit: Type.Optional(
    // A query string is text (the service does not coerce types): a decimal 1–200.
    Type.String({
      pattern: '^(?:[1-9][0-9]?|1[0-9]{2}|200)$',
      description: 'At most this many turns (1–200, oldest first); page on with `after`. Without it every kept turn',
    }),
  ),
  after: Type.Optional(
    Type.String({
      minLength: 1,
      maxLength: 128,
      description:
        'Only turns after this turn_id (the last one of the previous page); 400 when it is not a kept turn. An empty `turns` is the end',
    }),
  ),
});

export const SessionTranscript = Type.Object(
  {
    session_id: Type.String({ format: 'uuid' }),
    turns: Type.Array(TranscriptTurn, { description: 'Finished turns, oldest first; only the newest 200 are kept' }),
  },
  {
    $id: 'SessionTranscript',
    examples: [
      {
        session_id: '3f0c9a52-6d1e-4c8b-9a57-2b1e8f4d7c10',
        turns: [
          {
            turn_id: 'b3c1f1e2-4f7a-4d2b-9a7e-0c1d2e3f4a5b',
            kind: 'chat',
            user_text: 'What is the weather like on Mars?',
            assistant_text: 'Cold and dusty. It rarely gets above freezing.',
            heard_text: 'Cold and dusty.',
            tool_calls: [],
            outcome: 'interrupted',
            started_at: '2026-01-01T12:00:00.000Z',
            ended_at: '2026-01-01T12:00:02.400Z',
          },
        ],
      },
    ],
  },
);
