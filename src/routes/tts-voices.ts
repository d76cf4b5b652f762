import { Type } from '@sinclair/typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { errors } from '../schemas/common.ts';
import { TtsVoice, TtsVoiceProvider, TtsVoicesResponse } from '../schemas/tts-voices.ts';
import { badRequest, quoteClientValue } from '../errors.ts';
import { isTtsProviderId, TTS_PROVIDER_IDS } from '../tts/stage.ts';
import { defaultVoiceSource, VOICE_LIST_CACHE_MS, VOICE_LIST_TIMEOUT_MS, VoiceDirectory } from '../voices/directory.ts';
import { closedSignal } from '../http/closed-signal.ts';

/** `GET /tts/voices`: what every TTS provider can speak, for a voice picker (the clone catalog stays at GET /voices). */
const ttsVoiceRoutes: FastifyPluginAsyncTypebox = async (app) => {
  const { services } = app;
  app.addSchema(TtsVoice);
  app.addSchema(TtsVoiceProvider);
  app.addSchema(TtsVoicesResponse);
  const directory = new VoiceDirectory({
    registry: services.tts,
    catalog: services.voices,
    defaults: defaultVoiceSource(() => services.defaults.get(), {
      provider: services.config.ttsDefaultProvider,
      voice: services.config.ttsDefaultVoice,
    }),
    logger: app.log,
  });
  app.addHook('onClose', async () => directory.close());

  app.get('/tts/voices', {
    schema: {
      tags: ['tts'],
      summary: 'List the voices of every TTS provider',
      description:
        "One entry per provider (all ten, configured or not): built-in voices with language and gender, the provider's own stock " +
        'voices where its API lists them (cloud_c, cloud_e, cloud_f, local_clone_a; asked with a ' +
        `${VOICE_LIST_TIMEOUT_MS / 1000} s bound and cached ${VOICE_LIST_CACHE_MS / 1000} s), and the cloned voices of the catalog. ` +
        'A provider whose list fails has `status: error` with the reason; the answer is still 200. `provider` filters to one ' +
        `provider id (${TTS_PROVIDER_IDS.join(', ')}); anything else → 400.`,
      querystring: Type.Object({
        provider: Type.Optional(Type.String({ maxLength: 64, description: 'Only this provider' })),
      }),
      response: { 200: TtsVoicesResponse, ...errors(400) },
    },
    handler: async (request, reply) => {
      const { provider } = request.query;
      if (provider !== undefined && !isTtsProviderId(provider))
        throw badRequest(
          `provider ${quoteClientValue(provider)} is unknown; use one of ${TTS_PROVIDER_IDS.join(', ')}`,
        );
      return { providers: await directory.list(provider ? { provider } : {}, closedSignal(reply)) };
    },
  });
};

export default ttsVoiceRoutes;
