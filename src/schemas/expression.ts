import { Type } from '@sinclair/typebox';
import { EXPRESSION_BLEND_MS, EXPRESSION_NAMES, MAX_EXPRESSION_DURATION_MS } from '../../actors/expression.ts';

/** `POST /sessions/{id}/expression` (docs/api.md): the vocabulary and ranges are the renderers' (`actors/expression.ts`). */
export const ExpressionRequest = Type.Object(
  {
    name: Type.Union(
      EXPRESSION_NAMES.map((name) => Type.Literal(name)),
      { description: `One of ${EXPRESSION_NAMES.join(', ')}; anything else is a 400` },
    ),
    intensity: Type.Optional(
      Type.Number({ minimum: 0, maximum: 1, default: 1, description: '0..1 (default 1); outside it is a 400' }),
    ),
    duration_ms: Type.Optional(
      Type.Integer({
        minimum: 1,
        maximum: MAX_EXPRESSION_DURATION_MS,
        description: `Held this long, then blended out (${EXPRESSION_BLEND_MS} ms); absent: until the next expression (emphasis: a short flash)`,
      }),
    ),
  },
  { $id: 'ExpressionRequest', additionalProperties: false, examples: [{ name: 'smile', intensity: 0.8 }] },
);

export const ExpressionResponse = Type.Object(
  {
    name: Type.Union(EXPRESSION_NAMES.map((name) => Type.Literal(name))),
    intensity: Type.Number(),
    duration_ms: Type.Union([Type.Integer(), Type.Null()]),
    start_ms: Type.Number({
      description: 'When it starts blending in, on the session media clock (as on the SSE `expression` event)',
    }),
  },
  { $id: 'ExpressionResponse', examples: [{ name: 'smile', intensity: 0.8, duration_ms: null, start_ms: 12040 }] },
);
