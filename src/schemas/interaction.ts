import { Type } from '@sinclair/typebox';
import { Nullable } from './common.ts';

/** Speak text bound: several minutes of speech; longer content belongs in an offline bundle. */
export const SPEAK_MAX_CHARS = 10_000;
export const CHAT_MAX_CHARS = 10_000;

const overrides = {
  voice: Type.Optional(
    Nullable(Type.String({ maxLength: 256, description: 'Voice for this request only; format depends on provider' })),
  ),
  tts_provider: Type.Optional(Nullable(Type.String({ description: 'Provider for this request only; unknown → 400' }))),
  tts_model: Type.Optional(
    Nullable(Type.String({ maxLength: 128, description: 'Provider-specific model for this request only' })),
  ),
};

export const SpeakRequest = Type.Object(
  {
    text: Type.String({
      minLength: 1,
      maxLength: SPEAK_MAX_CHARS,
      description: 'Text to speak; bypasses the language model',
    }),
    ...overrides,
  },
  {
    $id: 'SpeakRequest',
    additionalProperties: false,
    examples: [
      {
        text: 'Welcome aboard! Ask me anything about life on the space station.',
        voice: 'en-US-JennyNeural',
        tts_provider: 'builtin',
      },
    ],
  },
);

export const ChatRequest = Type.Object(
  {
    prompt: Type.String({ minLength: 1, maxLength: CHAT_MAX_CHARS, description: 'User prompt for the language model' }),
    ...overrides,
  },
  {
    $id: 'ChatRequest',
    additionalProperties: false,
    examples: [{ prompt: 'How long does it take to fly to the Moon?' }],
  },
);

export const InterruptResponse = Type.Object(
  { interrupted: Type.Boolean() },
  { $id: 'InterruptResponse', examples: [{ interrupted: true }] },
);
export const TranscribeResponse = Type.Object(
  {
    transcript: Type.String(),
    turn_id: Type.String({
      format: 'uuid',
      description: 'The turn this recognition was (a chat it triggers keeps the id); also on its SSE events',
    }),
  },
  {
    $id: 'TranscribeResponse',
    examples: [
      { transcript: 'How long does it take to fly to the Moon?', turn_id: '9b2f4c1e-7a3d-4e58-8f0b-6c2d1a9e3b47' },
    ],
  },
);

/** Documents a multipart body in OpenAPI; the handler parses it with bounded streaming. */
export const AudioUploadForm = Type.Object(
  {
    audio: Type.String({
      format: 'binary',
      description: 'WAV, MP3 or raw 16-bit signed little-endian mono PCM (detected from the bytes)',
    }),
    sample_rate: Type.Optional(
      Type.Integer({
        minimum: 8000,
        maximum: 48000,
        description: 'Required for raw PCM; default 16000',
        example: 16000,
      }),
    ),
  },
  { $id: 'AudioUploadForm' },
);

export const TranscribeForm = Type.Object(
  {
    audio: Type.String({
      format: 'binary',
      description: '16-bit signed mono PCM at the session sample rate (WAV also accepted)',
    }),
    trigger_chat: Type.Optional(
      Type.Boolean({ description: 'Forward the recognized text to the language model', example: false }),
    ),
  },
  { $id: 'TranscribeForm' },
);
