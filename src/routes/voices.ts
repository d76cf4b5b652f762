import { open } from 'node:fs/promises';
import { Type } from '@sinclair/typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { errors, Nullable } from '../schemas/common.ts';
import { HttpError, badGateway, badRequest, notFound, quoteClientValue } from '../errors.ts';
import { isTtsProviderId, TTS_PROVIDER_IDS } from '../tts/stage.ts';
import { toPublicEntry } from '../voices/catalog.ts';
import { TTS_PROVIDER_SERVICES } from '../voices/provider-names.ts';
import {
  CLONE_PROVIDERS,
  CloneValidationError,
  MAX_CLONE_AUDIO_BYTES,
  MIN_CLONE_AUDIO_BYTES,
  cloneVoice,
  deleteClonedVoice,
  type CloneResponse,
} from '../voices/clone.ts';
import { UPLOAD_TOKEN_PATTERN } from '../voices/uploads.ts';
import type { Services } from '../services.ts';
import { readMultipart } from '../http/multipart.ts';
import { multipartForm } from '../schemas/multipart-form.ts';
import { closedSignal } from '../http/closed-signal.ts';
import { describeDuration, uploadAdmission } from '../http/audio-uploads.ts';
import { MAX_CLONE_SAMPLE_MS } from '../voices/convert.ts';

/** How the sample bounds read in the clone and reference route descriptions. */
export const CLONE_SAMPLE_BOUNDS_TEXT = `${MIN_CLONE_AUDIO_BYTES} B to 12 MB, decoding to at most ${describeDuration(MAX_CLONE_SAMPLE_MS)} of audio`;

/**
 * Whole-clone bound: ffmpeg conversion (30 s bound) plus one provider enrolment (adapters bound it to
 * 30 s for headers and 120 s for the body); beyond that the provider is stuck and the client gets 502.
 */
export const CLONE_TIMEOUT_MS = 180_000;

export const VoiceEntrySchema = Type.Object(
  {
    id: Type.Integer({ description: 'Catalog primary key; use it in DELETE /voices/{entry_id}' }),
    user_id: Nullable(Type.String({ description: 'Reserved for multi-tenant use' })),
    provider: Type.String({ description: `One of ${CLONE_PROVIDERS.join(', ')}` }),
    voice_id: Type.String({
      description: 'Provider-side voice id: pass it as session tts_voice or as voice of speak/chat/preview',
    }),
    display_label: Type.String(),
    target_model: Type.String({ description: 'TTS model the clone was created for' }),
    source: Type.String({ description: 'Always `clone` for entries made by POST /voices/clone' }),
  },
  { $id: 'VoiceEntry' },
);

const ProviderName = Type.Object(
  {
    id: Type.String({ description: 'Provider id' }),
    service: Type.String({ description: 'The real service or engine behind the id (docs/providers.md)' }),
    configured: Type.Boolean({ description: 'Whether the variables the provider needs are set' }),
    can_clone: Type.Boolean({ description: 'Whether POST /voices/clone accepts this provider' }),
  },
  { $id: 'VoiceProviderName' },
);

const VoiceList = Type.Object(
  {
    items: Type.Array(VoiceEntrySchema),
    providers: Type.Optional(
      Type.Array(ProviderName, {
        description:
          'Added field: every provider id (or the filtered one) with its service name and whether it is configured',
      }),
    ),
  },
  { $id: 'VoiceList' },
);

export const CloneResponseSchema = Type.Object(
  {
    ok: Type.Boolean(),
    entry_id: Type.Integer({ description: 'Catalog id, for later deletion' }),
    voice_id: Type.String({ description: 'Provider-side id to use in speak, chat or preview' }),
    display_label: Type.String({ description: 'Resolved label, possibly with a ` (YYYYMMDD-HHMMSS)` suffix' }),
    provider: Type.String(),
    target_model: Type.String(),
    message: Type.String(),
  },
  { $id: 'CloneResponse' },
);

/** Documents the multipart body (validation happens while the parts stream in). */
const CloneForm = Type.Object(
  {
    provider: Type.String({ description: CLONE_PROVIDERS.join(', '), example: 'local_clone_a' }),
    target_model: Type.String({ description: 'TTS model the clone is used with', example: 'en' }),
    display_label: Type.String({
      description: 'Human-readable label; on conflict a timestamp suffix is appended',
      example: 'Narrator (warm)',
    }),
    audio: Type.String({
      format: 'binary',
      description: `Sample, ${CLONE_SAMPLE_BOUNDS_TEXT}, any format ffmpeg converts to 24 kHz mono WAV`,
    }),
    prefix: Type.Optional(
      Type.String({ description: 'cloud_b only: 1-9 lower-case letters/digits; random when omitted' }),
    ),
    preferred_name: Type.Optional(
      Type.String({ description: 'cloud_a only: 1-16 letters/digits/_; random when omitted' }),
    ),
  },
  { $id: 'CloneForm' },
);

const DeleteResponse = Type.Object({ deleted: Type.Boolean() }, { $id: 'VoiceDeleteResponse' });

/** Cloned voice catalog (spec 4.10). */
const voiceRoutes: FastifyPluginAsyncTypebox = async (app) => {
  const { services } = app;
  app.addSchema(VoiceEntrySchema);
  app.addSchema(ProviderName);
  app.addSchema(VoiceList);
  app.addSchema(CloneResponseSchema);
  app.addSchema(CloneForm);
  app.addSchema(DeleteResponse);

  app.get('/voices', {
    schema: {
      tags: ['voices'],
      summary: 'List cloned voices',
      description:
        'Public catalog entries in id order. `provider` filters by provider id; any known provider id is accepted (providers that cannot ' +
        `clone simply have no entries); a value that is not a provider id (${TTS_PROVIDER_IDS.join(', ')}) → 400.`,
      querystring: Type.Object({
        provider: Type.Optional(Type.String({ description: `Filter; common values ${CLONE_PROVIDERS.join(', ')}` })),
      }),
      response: { 200: VoiceList, ...errors(400) },
    },
    handler: async (request) => {
      const { provider } = request.query;
      if (provider !== undefined && !isTtsProviderId(provider))
        throw badRequest(
          `provider ${quoteClientValue(provider)} is unknown; use one of ${TTS_PROVIDER_IDS.join(', ')}`,
        );
      const entries = await services.voices.list(provider ? { provider } : {});
      const providers = (provider ? [provider] : TTS_PROVIDER_IDS).map((id) => ({
        id,
        service: TTS_PROVIDER_SERVICES[id],
        configured: services.tts.get(id).status().configured,
        can_clone: (CLONE_PROVIDERS as readonly string[]).includes(id),
      }));
      return { items: entries.map(toPublicEntry), providers };
    },
  });

  app.post('/voices/clone', {
    schema: {
      tags: ['voices'],
      summary: 'Clone a voice',
      description:
        'multipart/form-data (see CloneForm): provider, target_model, display_label, audio, optional prefix (cloud_b) and preferred_name ' +
        '(cloud_a). The sample is converted to 24 kHz mono WAV and handed to the provider; the catalog entry is written only after the ' +
        'provider accepted. 400: malformed multipart body (no boundary, truncated, too many fields or files), unsupported or ' +
        'unconfigured provider, missing field, audio missing, under 256 B, over 12 MB (refused while ' +
        `uploading), decoding to more than ${describeDuration(MAX_CLONE_SAMPLE_MS)} (refused while converting) or not convertible. ` +
        '502: the provider rejected the sample or failed (its text in `detail`). 503 (Retry-After): too many uploads in progress, ' +
        'refused before the body is read. cloud_b downloads the sample from SERVICE_PUBLIC_BASE_URL/voice-uploads/{token}.',
      ...multipartForm(CloneForm),
      response: { 200: CloneResponseSchema, ...errors(400, 502, 503) },
    },
    handler: async (request, reply) => {
      const form = await readCloneForm(services, request, reply);
      return runClone(services, reply, {
        provider: form.fields.provider ?? '',
        targetModel: form.fields.target_model ?? '',
        displayLabel: form.fields.display_label ?? '',
        audio: form.audio,
        prefix: form.fields.prefix || null,
        preferredName: form.fields.preferred_name || null,
      });
    },
  });

  app.delete('/voices/:entry_id', {
    schema: {
      tags: ['voices'],
      summary: 'Delete a cloned voice',
      description:
        'Removes the catalog entry (and the reference WAV of a local clone). `entry_id` is an integer; anything else → 400; unknown → 404.',
      params: Type.Object({ entry_id: Type.String({ pattern: '^[0-9]{1,15}$', description: 'Integer catalog id' }) }),
      response: { 200: DeleteResponse, ...errors(400, 404) },
    },
    handler: async (request) => {
      const id = Number(request.params.entry_id);
      const deleted = await deleteClonedVoice({ id, catalog: services.voices, voiceDir: services.voiceDir });
      if (!deleted) throw notFound(`voice entry ${id} not found`);
      return { deleted: true };
    },
  });

  app.get('/voice-uploads/:token', {
    schema: {
      tags: ['voices'],
      summary: 'Download an uploaded clone sample',
      description:
        'Serves the 24 kHz mono WAV that cloud_b downloads while enrolling a voice. No credentials: the 32-hex-character token is the ' +
        'only protection (rate-limit this path at the proxy). 404 when the token is malformed or the sample expired (~300 s after upload).',
      params: Type.Object({ token: Type.String({ description: '32 hexadecimal characters' }) }),
      produces: ['audio/wav'],
      response: { 200: Type.String({ format: 'binary' }), ...errors(404) },
    },
    handler: async (request, reply) => {
      const { token } = request.params;
      if (!UPLOAD_TOKEN_PATTERN.test(token)) throw notFound('upload token is malformed');
      const file = await services.uploads.path(token);
      if (!file) throw notFound('sample not found or expired');
      let handle;
      try {
        // Opened before answering so a concurrent expiry sweep cannot cut the body short.
        handle = await open(file, 'r');
      } catch {
        throw notFound('sample not found or expired');
      }
      let size: number;
      try {
        ({ size } = await handle.stat());
      } catch (error) {
        await handle.close();
        throw error;
      }
      reply.header('cache-control', 'no-store').header('content-length', size).type('audio/wav');
      return reply.send(handle.createReadStream() as never);
    },
  });
};

export interface CloneFormData {
  fields: Record<string, string>;
  audio: Buffer;
}

/**
 * Reads a clone upload once a service-wide upload slot is free (503 otherwise, before the body is read): `audio`
 * is refused while streaming once it passes 12 MB (400 here, as spec 7 asks for the clone route), so an oversized
 * sample is never buffered whole.
 */
export async function readCloneForm(
  services: Services,
  request: FastifyRequest,
  reply: FastifyReply,
): Promise<CloneFormData> {
  uploadAdmission(services).admitUpload(reply);
  let form;
  try {
    form = await readMultipart(request, {
      fileField: 'audio',
      maxFileBytes: MAX_CLONE_AUDIO_BYTES,
      tooLargeDetail: 'audio is over 12 MB',
    });
  } catch (error) {
    if (error instanceof HttpError && error.statusCode === 413) throw badRequest(error.detail);
    throw error;
  }
  if (!form.file) throw badRequest('audio file is required');
  return { fields: form.fields, audio: form.file.data };
}

/** `cloneVoice` with the request's lifetime and the route's time bound; library errors mapped to HTTP. */
export async function runClone(
  services: Services,
  reply: FastifyReply,
  input: {
    provider: string;
    targetModel: string;
    displayLabel: string;
    audio: Buffer;
    prefix?: string | null;
    preferredName?: string | null;
  },
): Promise<CloneResponse> {
  const timeout = AbortSignal.timeout(CLONE_TIMEOUT_MS);
  const signal = AbortSignal.any([closedSignal(reply), timeout]);
  try {
    return await cloneVoice({
      ...input,
      registry: services.tts,
      catalog: services.voices,
      uploads: services.uploads,
      voiceDir: services.voiceDir,
      publicBaseUrl: services.config.publicBaseUrl,
      signal,
    });
  } catch (error) {
    if (error instanceof CloneValidationError) throw badRequest(error.message);
    if (timeout.aborted) throw badGateway(`voice cloning did not finish within ${CLONE_TIMEOUT_MS / 1000} s`);
    throw error;
  }
}

export default voiceRoutes;
