import { Type } from '@sinclair/typebox';
import { MODEL_TYPES } from '../../actors/render/types.ts';
import { Nullable } from './common.ts';

export const AvatarSummary = Type.Object(
  {
    id: Type.String({ description: 'Globally unique avatar identifier' }),
    name: Nullable(Type.String({ description: 'Display name; defaults to id' })),
    model_type: Type.Union(MODEL_TYPES.map((m) => Type.Literal(m))),
    width: Type.Integer({ description: 'Output video width in pixels' }),
    height: Type.Integer({ description: 'Output video height in pixels' }),
    is_custom: Type.Boolean({
      description: 'True when created through POST /avatars/custom; only such avatars may be deleted',
    }),
    animated: Type.Optional(
      Type.Boolean({
        description:
          'Added field, photo (`lipsync`) avatars only: false when no usable face was found, so the mouth never moves (a still image)',
      }),
    ),
    reason: Type.Optional(
      Type.String({
        description:
          'Added field, in the answer of POST /avatars/custom when `animated` is false: why, in words for the person who uploaded the picture',
      }),
    ),
  },
  { $id: 'AvatarSummary' },
);

export const AvatarManifest = Type.Object(
  {
    id: Type.String(),
    name: Type.String(),
    model_type: Type.Union(MODEL_TYPES.map((m) => Type.Literal(m))),
    fps: Type.Number(),
    sample_rate: Type.Integer(),
    width: Type.Integer(),
    height: Type.Integer(),
    version: Type.String(),
    metadata: Type.Object(
      {
        hidden: Type.Optional(Type.Boolean()),
        custom_avatar: Type.Optional(Type.Boolean()),
        base_avatar_id: Type.Optional(Type.String()),
        animation: Type.Optional(
          Type.Object(
            {},
            {
              additionalProperties: true,
              description: 'Mouth-detection result; present only when detection succeeded',
            },
          ),
        ),
        animated: Type.Optional(
          Type.Boolean({ description: 'Served field: false when the lipsync renderer can only show the still image' }),
        ),
      },
      { additionalProperties: true },
    ),
  },
  { $id: 'AvatarManifest', additionalProperties: true },
);

export const AvatarIdParams = Type.Object({
  avatar_id: Type.String({
    minLength: 1,
    maxLength: 128,
    description: 'Avatar slug (letters, digits, hyphen, underscore, CJK)',
  }),
});
