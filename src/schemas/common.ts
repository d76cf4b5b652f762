import { Type, type TSchema } from '@sinclair/typebox';

/** `{detail}` is the body of every 4xx/5xx answer (spec 7). */
export const ErrorBody = Type.Object(
  { detail: Type.String() },
  { $id: 'ErrorBody', description: 'Error with a human-readable detail' },
);

export const errorRef = Type.Ref('ErrorBody');

/** Response map helper: `errors(400, 404)` documents those statuses with `{detail}`. */
export function errors(...statuses: number[]): Record<number, TSchema> {
  const out: Record<number, TSchema> = {};
  for (const status of statuses) out[status] = errorRef;
  return out;
}

export const SessionIdParams = Type.Object({
  session_id: Type.String({ format: 'uuid', description: 'Session UUID4' }),
});

export const Nullable = <T extends TSchema>(schema: T) => Type.Union([schema, Type.Null()]);

export const EmptyBody = Type.Null({ description: 'Empty body' });
