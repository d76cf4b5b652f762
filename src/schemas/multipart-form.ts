import { Type, type TSchema } from '@sinclair/typebox';

/**
 * Route-schema key for a multipart form: the OpenAPI document shows it as the route's `multipart/form-data`
 * request body (`documentMultipartForms`), while Fastify never validates it: the handler streams the parts with
 * per-file bounds (`src/http/multipart.ts`) and answers 400/413 itself. The form schema stays the single source
 * of the field names, types and required set, and `test/openapi.request-bodies.test.ts` holds each route to it.
 */
export const MULTIPART_FORM = 'x-multipart-form';

/** Spread into a route schema: `consumes` multipart and the form (a schema registered with `addSchema`, by `$id`). */
export function multipartForm(form: TSchema): { consumes: string[]; [MULTIPART_FORM]: TSchema } {
  if (!form.$id)
    throw new Error('a multipart form schema needs an $id (it is registered with addSchema and referenced)');
  return { consumes: ['multipart/form-data'], [MULTIPART_FORM]: Type.Ref(form.$id) };
}

/** `@fastify/swagger` `transform`: a route's multipart form becomes its request body in the document. */
export function documentMultipartForms({ schema, url }: { schema: unknown; url: string }): {
  schema: unknown;
  url: string;
} {
  const routeSchema = schema as Record<string, unknown> | undefined;
  const form = routeSchema?.[MULTIPART_FORM];
  if (!routeSchema || !form) return { schema, url };
  const { [MULTIPART_FORM]: _form, ...rest } = routeSchema;
  return { schema: { ...rest, body: { content: { 'multipart/form-data': { schema: form } } } }, url };
}
