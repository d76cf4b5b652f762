import { Type } from '@sinclair/typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { Nullable, SessionIdParams, errors } from '../schemas/common.ts';
import { badRequest } from '../errors.ts';
import {
  defaultsPersona,
  resolveTtsSelection,
  selectTts,
  type PersonaBase,
  type TtsSelection,
} from '../sessions/index.ts';
import { describeDuration } from '../http/audio-uploads.ts';
import { CLONE_PROVIDERS, type CloneProviderId } from '../voices/clone.ts';
import { MAX_CLONE_SAMPLE_MS } from '../voices/convert.ts';
import type { Services } from '../services.ts';
import { CLONE_SAMPLE_BOUNDS_TEXT, readCloneForm, runClone } from './voices.ts';
import { multipartForm } from '../schemas/multipart-form.ts';

const ReferenceForm = Type.Object(
  {
    audio: Type.String({
      format: 'binary',
      description: `Reference sample, ${CLONE_SAMPLE_BOUNDS_TEXT}, any format ffmpeg converts to 24 kHz mono WAV`,
    }),
    tts_provider: Type.Optional(
      Type.String({
        description: `Clone-capable provider: ${CLONE_PROVIDERS.join(', ')}; default the current one if it can clone`,
        example: 'local_clone_a',
      }),
    ),
    target_model: Type.Optional(
      Type.String({
        description:
          'Model the clone is made for; default the current tts_model, else a per-provider default (cloud_a: required)',
        example: 'en',
      }),
    ),
  },
  { $id: 'ReferenceForm' },
);

const ReferencePersona = Type.Object(
  {
    system_prompt: Nullable(Type.String()),
    tts_provider: Type.String(),
    tts_voice: Nullable(Type.String({ description: 'The voice_id of the new clone' })),
    tts_model: Nullable(Type.String({ description: 'The target model of the clone' })),
    entry_id: Type.Integer({ description: 'Catalog entry of the clone (GET /voices, DELETE /voices/{entry_id})' }),
  },
  { $id: 'ReferencePersona' },
);

const DESCRIPTION =
  'multipart/form-data (see ReferenceForm): `audio` (required), `tts_provider`, `target_model`. Sets a reference audio for voice ' +
  'continuity: the sample is cloned with a clone-capable provider exactly like POST /voices/clone (a catalog entry labelled ' +
  '`reference <session_id|default>` is created), then the persona switches to that provider and the new voice_id. ' +
  '400: malformed multipart body (no boundary, truncated, too many fields or files), provider cannot clone or is not configured, ' +
  `audio missing/under 256 B/over 12 MB/decoding to more than ${describeDuration(MAX_CLONE_SAMPLE_MS)}/not convertible, cloud_a without ` +
  'target_model. 502: the provider rejected the sample. 503 (Retry-After): too many uploads in progress, refused before the body is read.';

interface ReferenceRequest {
  providerId: CloneProviderId;
  targetModel: string;
  audio: Buffer;
}

/** Persona reference audio (spec 4.4 "customize/reference"), for one session or as the service-wide default. */
const customizeReferenceRoutes: FastifyPluginAsyncTypebox = async (app) => {
  const { services } = app;
  app.addSchema(ReferenceForm);
  app.addSchema(ReferencePersona);

  app.post('/sessions/:session_id/customize/reference', {
    schema: {
      tags: ['persona'],
      summary: 'Set a reference voice for the session',
      description: `${DESCRIPTION} Applies from the next turn (a turn in flight keeps its voice). 404 unknown session.`,
      params: SessionIdParams,
      ...multipartForm(ReferenceForm),
      response: { 200: ReferencePersona, ...errors(400, 404, 409, 502, 503) },
    },
    handler: async (request, reply) => {
      const session = await services.supervisor.requireSession(request.params.session_id);
      const reference = await readReference(services, request, reply, session.persona);
      const clone = await runClone(services, reply, {
        provider: reference.providerId,
        targetModel: reference.targetModel,
        displayLabel: `reference ${session.id}`,
        audio: reference.audio,
      });
      const tts = cloneSelection(services, session.persona, reference, clone);
      // The clone took a while: the session may have ended meanwhile (then 404/409; the catalog entry stays usable).
      await services.supervisor.requireSession(session.id);
      session.customize({ tts });
      await services.supervisor.persistState(session);
      const persona = session.persona;
      return {
        system_prompt: session.systemPrompt ?? null,
        tts_provider: persona.provider,
        tts_voice: persona.voice ?? null,
        tts_model: persona.model ?? null,
        entry_id: clone.entry_id,
      };
    },
  });

  app.post('/customize/reference', {
    schema: {
      tags: ['persona'],
      summary: 'Set a default reference voice',
      description: `${DESCRIPTION} Becomes the service-wide default provider/voice/model for sessions created afterwards; persisted.`,
      ...multipartForm(ReferenceForm),
      response: { 200: ReferencePersona, ...errors(400, 502, 503) },
    },
    handler: async (request, reply) => {
      const reference = await readReference(
        services,
        request,
        reply,
        defaultsPersona(services.config, await services.defaults.get()),
      );
      return applyDefaultReference(services, reply, reference);
    },
  });
};

async function applyDefaultReference(services: Services, reply: FastifyReply, reference: ReferenceRequest) {
  const clone = await runClone(services, reply, {
    provider: reference.providerId,
    targetModel: reference.targetModel,
    displayLabel: 'reference default',
    audio: reference.audio,
  });
  const tts = cloneSelection(
    services,
    defaultsPersona(services.config, await services.defaults.get()),
    reference,
    clone,
  );
  const next = await services.defaults.update({ ttsProvider: tts.provider, ttsVoice: tts.voice, ttsModel: tts.model });
  return {
    system_prompt: next.systemPrompt ?? services.config.llmSystemPrompt,
    tts_provider: next.ttsProvider ?? services.config.ttsDefaultProvider,
    tts_voice: next.ttsVoice ?? null,
    tts_model: next.ttsModel ?? null,
    entry_id: clone.entry_id,
  };
}

/** The persona after a clone: its provider, the new voice and the model it was made for, checked like any selection. */
function cloneSelection(
  services: Services,
  persona: PersonaBase,
  reference: ReferenceRequest,
  clone: { voice_id: string; target_model: string },
): TtsSelection {
  return resolveTtsSelection((id) => services.tts.get(id), persona, {
    provider: reference.providerId,
    voice: clone.voice_id,
    model: clone.target_model,
  });
}

/** Reads the form and resolves provider and target model against the persona it will change. */
async function readReference(
  services: Services,
  request: FastifyRequest,
  reply: FastifyReply,
  persona: PersonaBase,
): Promise<ReferenceRequest> {
  const form = await readCloneForm(services, request, reply);
  const requested = form.fields.tts_provider?.trim() || null;
  const providerId = requested ?? persona.provider;
  if (!isCloneProvider(providerId)) {
    throw badRequest(
      requested
        ? `tts_provider "${providerId}" cannot clone a reference; use one of ${CLONE_PROVIDERS.join(', ')}`
        : `the current tts_provider "${providerId}" cannot clone a reference; pass tts_provider (one of ${CLONE_PROVIDERS.join(', ')})`,
    );
  }
  // The persona rule decides whether the current model carries over (only with the same provider); nothing is synthesised yet.
  const personaModel = selectTts(persona, { provider: providerId }).model;
  const targetModel =
    form.fields.target_model?.trim() || personaModel || services.tts.get(providerId).defaultCloneModel;
  if (!targetModel) throw badRequest(`target_model is required for ${providerId}`);
  return { providerId, targetModel, audio: form.audio };
}

function isCloneProvider(value: string): value is CloneProviderId {
  return (CLONE_PROVIDERS as readonly string[]).includes(value);
}

export default customizeReferenceRoutes;
