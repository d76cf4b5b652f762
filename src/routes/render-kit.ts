import { Type } from '@sinclair/typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { AvatarIdParams } from '../schemas/avatars.ts';
import { EmptyBody, errors } from '../schemas/common.ts';
import { notFound } from '../errors.ts';

const RenderKitQuery = Type.Object({
  model: Type.Optional(
    Type.String({
      minLength: 1,
      maxLength: 64,
      description: "Model that draws the avatar: lipsync, rt or rt_head (default: the avatar's model_type)",
    }),
  ),
});

/**
 * The render kit of a client-rendered session (docs/avatars.md#render-kits): the plain URL redirects to the kit's
 * content-hashed URL, which never changes its bytes (immutable, ETag, 304).
 */
const renderKitRoutes: FastifyPluginAsyncTypebox = async (app) => {
  const { renderKits } = app.services;

  app.get('/avatars/:avatar_id/render-kit', {
    schema: {
      tags: ['avatars'],
      summary: 'Render kit of an avatar (redirect to its content-hashed URL)',
      description:
        'What a browser needs to draw this avatar with `model` (issue 47, `render: "client"` sessions): the CPU ' +
        "renderer's prepared state, built once per avatar version and model. Answers 302 to " +
        '`/avatars/{avatar_id}/render-kit/{hash}?model=…` (a relative `Location`: `render-kit/{hash}?model=…`), whose bytes never change. 404 unknown avatar; 400 a model that ' +
        'cannot draw in a browser (lipsync_b, lipsync_c, mock) or cannot render this avatar; 503 while the builder is busy.',
      params: AvatarIdParams,
      querystring: RenderKitQuery,
      response: { 302: EmptyBody, ...errors(400, 404, 503) },
    },
    handler: async (request, reply) => {
      const { avatar_id: avatarId } = request.params;
      const kit = await renderKits.kitOf(avatarId, request.query.model);
      // Relative to this URL (`…/render-kit` → `…/render-kit/{hash}`), so a proxy serving the service under a path
      // prefix keeps it.
      const location = `render-kit/${kit.hash}?model=${kit.model}`;
      return reply
        .code(302)
        .header('location', location)
        .header('cache-control', 'no-cache')
        .send('' as never);
    },
  });

  app.get('/avatars/:avatar_id/render-kit/:kit_hash', {
    schema: {
      tags: ['avatars'],
      summary: 'Render kit bytes at their content hash',
      description:
        'The kit (gzip; layout in docs/avatars.md#render-kits). `ETag` is the hash; `Cache-Control: immutable`; ' +
        '`If-None-Match` with it answers 304. 404 when the avatar is unknown or its kit has another hash now (ask the ' +
        'plain URL again).',
      params: Type.Object({
        ...AvatarIdParams.properties,
        kit_hash: Type.String({ pattern: '^[0-9a-f]{16}$', description: 'Content hash from the redirect' }),
      }),
      querystring: RenderKitQuery,
      produces: ['application/octet-stream'],
      response: {
        200: Type.String({ format: 'binary', description: 'application/octet-stream' }),
        304: EmptyBody,
        ...errors(400, 404, 503),
      },
    },
    handler: async (request, reply) => {
      const { avatar_id: avatarId, kit_hash: hash } = request.params;
      const kit = await renderKits.kitOf(avatarId, request.query.model);
      if (kit.hash !== hash)
        throw notFound('this render kit is not current; ask /avatars/{avatar_id}/render-kit again');
      const etag = `"${kit.hash}"`;
      reply.header('etag', etag).header('cache-control', 'public, max-age=31536000, immutable');
      const ifNoneMatch = request.headers['if-none-match'];
      if (ifNoneMatch && ifNoneMatch.split(',').some((tag) => tag.trim().replace(/^W\//u, '') === etag))
        return reply.code(304).send('' as never);
      return reply
        .type('application/octet-stream')
        .send(Buffer.from(kit.bytes.buffer, kit.bytes.byteOffset, kit.bytes.length) as never);
    },
  });
};

export default renderKitRoutes;
