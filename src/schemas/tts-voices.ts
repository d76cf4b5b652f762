import { Type } from '@sinclair/typebox';
import { Nullable } from './common.ts';
import { TTS_PROVIDER_IDS } from '../../actors/tts/types.ts';

/** One voice a provider can speak; `id` is what to pass as `voice` / `tts_voice`. */
export const TtsVoice = Type.Object(
  {
    id: Type.String({
      description: 'Pass as `voice` of speak/chat/preview or `tts_voice` of a session, with this provider',
    }),
    name: Type.String({ description: 'Display name (the id where the provider gives none)' }),
    language: Nullable(
      Type.String({
        description: 'BCP-47 tag as the provider gives it (`en-US`, `en`); null when unknown (clones, xtts speakers)',
      }),
    ),
    gender: Nullable(
      Type.Union([Type.Literal('female'), Type.Literal('male'), Type.Literal('neutral')], {
        description: 'null when unknown',
      }),
    ),
    source: Type.Union([Type.Literal('builtin'), Type.Literal('provider'), Type.Literal('clone')], {
      description:
        "`builtin`: the offline voice table; `provider`: listed by the provider's own API; `clone`: the voice catalog (GET /voices)",
    }),
    description: Type.Optional(
      Type.String({
        description:
          'Added field, built-in voices: the engine and engine voice, language and character behind the id, and which ids sound the same',
      }),
    ),
    entry_id: Type.Optional(Type.Integer({ description: 'Clones only: catalog id, for DELETE /voices/{entry_id}' })),
    target_model: Type.Optional(
      Type.String({ description: 'Clones only: the model the clone was made for (used when tts_model is omitted)' }),
    ),
  },
  { $id: 'TtsVoice' },
);

export const TtsVoiceProvider = Type.Object(
  {
    id: Type.String({ description: `Provider id: ${TTS_PROVIDER_IDS.join(', ')}` }),
    service: Type.String({ description: 'Added field: the real service or engine behind the id (docs/providers.md)' }),
    configured: Type.Boolean({ description: 'Whether the variables the provider needs are set' }),
    status: Type.Union([Type.Literal('ok'), Type.Literal('not_configured'), Type.Literal('error')], {
      description: "`error`: the provider's voice list failed or timed out (see `reason`); its clones are still listed",
    }),
    reason: Type.Optional(
      Type.String({ description: 'not_configured: which variable to set; error: why the list failed (upstream text)' }),
    ),
    is_default: Type.Boolean({
      description: 'The provider used when a request names none (persona default, else SERVICE_TTS_DEFAULT_PROVIDER)',
    }),
    default_voice: Nullable(
      Type.String({
        description: 'Voice used when a request names none; null: the provider has no stock voice (cloud_d)',
      }),
    ),
    lists_voices: Type.Boolean({
      description:
        'Whether stock voices can be enumerated; when false, other voice names of the provider still work (docs/providers.md)',
    }),
    can_clone: Type.Boolean({ description: 'Whether POST /voices/clone accepts this provider' }),
    truncated: Type.Boolean({ description: 'The provider listed more voices than the service passes on (5000)' }),
    voices: Type.Array(TtsVoice, {
      description: 'Built-in or provider voices sorted by language and name, then clones in catalog order',
    }),
  },
  { $id: 'TtsVoiceProvider' },
);

export const TtsVoicesResponse = Type.Object(
  { providers: Type.Array(TtsVoiceProvider) },
  {
    $id: 'TtsVoicesResponse',
    examples: [
      {
        providers: [
          {
            id: 'builtin',
            service: 'Built-in offline voices (flite and eSpeak NG)',
            configured: true,
            status: 'ok',
            is_default: true,
            default_voice: 'en-US-JennyNeural',
            lists_voices: true,
            can_clone: false,
            truncated: false,
            voices: [
              {
                id: 'en-US-JennyNeural',
                name: 'Jenny',
                description: 'Jenny: flite “slt”, American English, female (same voice as Aria)',
                language: 'en-US',
                gender: 'female',
                source: 'builtin',
              },
              {
                id: 'de-DE-ConradNeural',
                name: 'Conrad',
                description: 'Conrad: eSpeak NG “de+m3”, German (Germany), male',
                language: 'de-DE',
                gender: 'male',
                source: 'builtin',
              },
            ],
          },
          {
            id: 'cloud_c',
            service: 'ElevenLabs',
            configured: true,
            status: 'ok',
            is_default: false,
            default_voice: '21m00Tcm4TlvDq8ikWAM',
            lists_voices: true,
            can_clone: false,
            truncated: false,
            voices: [
              { id: '21m00Tcm4TlvDq8ikWAM', name: 'Rachel', language: 'en', gender: 'female', source: 'provider' },
            ],
          },
          {
            id: 'cloud_e',
            service: 'Azure AI Speech',
            configured: true,
            status: 'error',
            reason:
              'cloud_e: upstream returned 401: Access denied due to invalid subscription key or wrong API endpoint.',
            is_default: false,
            default_voice: 'en-US-JennyNeural',
            lists_voices: true,
            can_clone: false,
            truncated: false,
            voices: [],
          },
          {
            id: 'local_clone_a',
            service: 'Coqui XTTS-v2 server (self-hosted)',
            configured: true,
            status: 'ok',
            is_default: false,
            default_voice: 'female',
            lists_voices: true,
            can_clone: true,
            truncated: false,
            voices: [
              { id: 'female', name: 'female', language: null, gender: null, source: 'provider' },
              {
                id: 'clone-1f2e3d4c5b6a7980',
                name: 'My voice',
                language: null,
                gender: null,
                source: 'clone',
                entry_id: 3,
                target_model: 'en',
              },
            ],
          },
          {
            id: 'cloud_f',
            service: 'Google Cloud Text-to-Speech',
            configured: false,
            status: 'not_configured',
            reason: 'set SERVICE_TTS_CLOUD_F_API_KEY',
            is_default: false,
            default_voice: 'en-US-Neural2-F',
            lists_voices: true,
            can_clone: false,
            truncated: false,
            voices: [],
          },
        ],
      },
    ],
  },
);
