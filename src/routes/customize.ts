import { Type } from '@sinclair/typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Nullable, SessionIdParams, errors } from '../schemas/common.ts';
import {
  defaultsPersona,
  resolveTtsSelection,
  type SessionToolDefinition,
  type TtsOverrides,
} from '../sessions/index.ts';
import type { Services } from '../services.ts';
import { ToolList } from '../schemas/tools.ts';

const PersonaPatch = Type.Object(
  {
    system_prompt: Type.Optional(
      Nullable(
        Type.String({
          maxLength: 20_000,
          description: 'Language-model system prompt; null restores the service default',
        }),
      ),
    ),
    tts_provider: Type.Optional(Type.String({ description: 'TTS provider for following turns' })),
    tts_voice: Type.Optional(
      Nullable(Type.String({ maxLength: 256, description: 'Voice for following turns; null = provider default' })),
    ),
    tts_model: Type.Optional(
      Nullable(Type.String({ maxLength: 128, description: 'Provider-specific model for following turns' })),
    ),
  },
  {
    $id: 'PersonaPatch',
    additionalProperties: false,
    minProperties: 1,
    examples: [
      {
        system_prompt: 'You are a patient maths tutor. Explain one step at a time.',
        tts_provider: 'builtin',
        tts_voice: 'en-GB-RyanNeural',
      },
    ],
  },
);

/** A session's persona patch: the service-wide one plus the session's tools, which only a session has. */
const SessionPersonaPatch = Type.Object(
  {
    ...PersonaPatch.properties,
    tools: Type.Optional(ToolList),
    motion: Type.Optional(
      Type.Number({
        minimum: 0,
        maximum: 1,
        description:
          'Scales idle sway, breathing, nods and thinking cues (default 1); 0 leaves only blinks and the mouth; outside 0–1 → 400',
      }),
    ),
  },
  {
    $id: 'SessionPersonaPatch',
    additionalProperties: false,
    minProperties: 1,
    examples: [
      {
        system_prompt: 'You are a hotel concierge. Use your tools to check availability.',
        tools: [
          {
            type: 'function',
            function: {
              name: 'check_rooms',
              parameters: { type: 'object', properties: { guests: { type: 'integer' } } },
            },
          },
        ],
      },
    ],
  },
);

const PromptBody = Type.Object(
  { system_prompt: Type.String({ minLength: 1, maxLength: 20_000 }) },
  {
    $id: 'PromptBody',
    additionalProperties: false,
    examples: [{ system_prompt: 'You are a museum guide. Keep every answer under thirty words.' }],
  },
);

const Persona = Type.Object(
  {
    system_prompt: Nullable(Type.String()),
    tts_provider: Type.String(),
    tts_voice: Nullable(Type.String()),
    tts_model: Nullable(Type.String()),
  },
  { $id: 'Persona' },
);

type Patch = {
  system_prompt?: string | null;
  tts_provider?: string;
  tts_voice?: string | null;
  tts_model?: string | null;
};
type SessionPatch = Patch & { tools?: SessionToolDefinition[]; motion?: number };

/**
 * Persona customisation. With a session id the change applies to that session's following turns (a turn
 * in flight keeps what it started with); without one it sets service-wide defaults for new sessions,
 * persisted in LevelDB.
 */
const customizeRoutes: FastifyPluginAsyncTypebox = async (app) => {
  const { services } = app;
  app.addSchema(PersonaPatch);
  app.addSchema(SessionPersonaPatch);
  app.addSchema(PromptBody);
  app.addSchema(Persona);

  const sessionSchema = (
    summary: string,
    description: string,
    body: typeof SessionPersonaPatch | typeof PromptBody,
  ) => ({
    tags: ['persona'],
    summary,
    description,
    params: SessionIdParams,
    body,
    response: { 200: Persona, ...errors(400, 404, 409) },
  });
  const defaultsSchema = (summary: string, description: string, body: typeof PersonaPatch | typeof PromptBody) => ({
    tags: ['persona'],
    summary,
    description,
    body,
    response: { 200: Persona, ...errors(400) },
  });

  app.post('/sessions/:session_id/customize', {
    schema: sessionSchema(
      'Replace persona attributes',
      "Any of system_prompt, tts_provider, tts_voice, tts_model, tools (replaces the session's tools; [] removes them); validated like session creation. " +
        'Applies from the next turn.',
      SessionPersonaPatch,
    ),
    handler: async (request) => applyToSession(services, request.params.session_id, request.body),
  });
  app.post('/sessions/:session_id/customize/prompt', {
    schema: sessionSchema('Replace the system prompt', 'Applies from the next chat turn; history is kept.', PromptBody),
    handler: async (request) =>
      applyToSession(services, request.params.session_id, { system_prompt: request.body.system_prompt }),
  });
  app.post('/customize', {
    schema: defaultsSchema(
      'Set service-wide persona defaults',
      'Defaults for sessions created afterwards; persisted across restarts.',
      PersonaPatch,
    ),
    handler: async (request) => applyToDefaults(services, request.body),
  });
  app.post('/customize/prompt', {
    schema: defaultsSchema(
      'Set the default system prompt',
      'For sessions created afterwards; persisted across restarts.',
      PromptBody,
    ),
    handler: async (request) => applyToDefaults(services, { system_prompt: request.body.system_prompt }),
  });
};

/** A patch's voice fields as persona overrides: `tts_voice: null` asks for the provider's default voice. */
function overridesOf(patch: Patch): TtsOverrides {
  return {
    ...(patch.tts_provider !== undefined ? { provider: patch.tts_provider } : {}),
    ...(patch.tts_voice !== undefined ? { voice: patch.tts_voice } : {}),
    ...(patch.tts_model !== undefined ? { model: patch.tts_model } : {}),
  };
}

async function applyToSession(services: Services, sessionId: string, patch: SessionPatch) {
  const session = await services.supervisor.requireSession(sessionId);
  const tts = resolveTtsSelection((id) => services.tts.get(id), session.persona, overridesOf(patch));
  const systemPrompt =
    patch.system_prompt === undefined ? session.systemPrompt : (patch.system_prompt ?? services.config.llmSystemPrompt);
  // The machine decides whether the session still takes changes (a terminated one does not: 409).
  session.customize({
    tts,
    systemPrompt,
    ...(patch.tools !== undefined ? { tools: patch.tools } : {}),
    ...(patch.motion !== undefined ? { motion: patch.motion } : {}),
  });
  await services.supervisor.persistState(session);
  const persona = session.persona;
  return {
    system_prompt: session.systemPrompt,
    tts_provider: persona.provider,
    tts_voice: persona.voice,
    tts_model: persona.model ?? null,
  };
}

async function applyToDefaults(services: Services, patch: Patch) {
  const { config } = services;
  const tts = resolveTtsSelection(
    (id) => services.tts.get(id),
    defaultsPersona(config, await services.defaults.get()),
    overridesOf(patch),
  );
  const next = await services.defaults.update({
    ...(patch.system_prompt !== undefined ? { systemPrompt: patch.system_prompt ?? undefined } : {}),
    ttsProvider: tts.provider,
    ttsVoice: tts.voice,
    ttsModel: tts.model,
  });
  return {
    system_prompt: next.systemPrompt ?? config.llmSystemPrompt,
    tts_provider: next.ttsProvider ?? config.ttsDefaultProvider,
    tts_voice: next.ttsVoice ?? null,
    tts_model: next.ttsModel ?? null,
  };
}

export default customizeRoutes;
