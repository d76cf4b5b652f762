import { Type, type Static } from '@sinclair/typebox';
import { Nullable } from './common.ts';
import { ToolList } from './tools.ts';
import { PIPELINE_STAGES, SESSION_STATES } from '../../machines/session.machine.ts';

export const CreateSessionRequest = Type.Object(
  {
    avatar_id: Type.String({ minLength: 1, maxLength: 128, description: 'Must exist in GET /avatars' }),
    model: Type.String({ minLength: 1, description: 'Must appear in GET /models with connected=true' }),
    tts_provider: Type.Optional(Nullable(Type.String({ description: 'Overrides SERVICE_TTS_DEFAULT_PROVIDER; unknown value → 400' }))),
    tts_voice: Type.Optional(Nullable(Type.String({ maxLength: 256, description: 'Overrides the default voice; format depends on provider' }))),
    llm_system_prompt: Type.Optional(Nullable(Type.String({ maxLength: 20_000, description: 'Overrides SERVICE_LLM_SYSTEM_PROMPT' }))),
    lipsync_postprocess_mode: Type.Optional(Nullable(Type.String({ maxLength: 64, description: 'Post-processing flag for the lipsync model' }))),
    tools: Type.Optional(ToolList),
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
  { $id: 'CreateSessionResponse', examples: [{ session_id: '3f0c9a52-6d1e-4c8b-9a57-2b1e8f4d7c10', status: 'created' }] },
);

export const SessionInfo = Type.Object(
  {
    session_id: Type.String({ format: 'uuid' }),
    state: Type.Union(SESSION_STATES.map((s) => Type.Literal(s)), { description: 'High-level session state' }),
    pipeline: Type.Union(PIPELINE_STAGES.map((s) => Type.Literal(s)), { description: 'Pipeline stage (spec 3.2); idle outside running' }),
    avatar_id: Type.String(),
    model: Type.String(),
    tts_provider: Type.String(),
    tts_voice: Nullable(Type.String()),
    tts_model: Type.Optional(Nullable(Type.String())),
    llm_system_prompt: Nullable(Type.String()),
    lipsync_postprocess_mode: Nullable(Type.String()),
    created_at: Type.String({ format: 'date-time' }),
    updated_at: Type.String({ format: 'date-time' }),
    expires_at: Type.Optional(Type.String({ format: 'date-time', description: 'Tombstones only: when the record is forgotten' })),
    terminated_reason: Type.Optional(Type.String()),
  },
  { $id: 'SessionInfo' },
);

export const StatusOnly = (status: string) => Type.Object({ status: Type.Literal(status) });
