import fs from 'node:fs/promises';
import path from 'node:path';
import { Type } from '@sinclair/typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { AvatarIdParams, AvatarManifest, AvatarSummary } from '../schemas/avatars.ts';
import { errors } from '../schemas/common.ts';
import { forbidden, notFound } from '../errors.ts';
import { MAX_AVATAR_NAME_LENGTH, renameCustomAvatar } from '../catalog/custom-avatar.ts';

/** The avatar catalog: list, manifest, preview and deletion of custom avatars. */
const avatarRoutes: FastifyPluginAsyncTypebox = async (app) => {
  const { catalog } = app.services;

  app.get('/avatars', {
    schema: {
      tags: ['avatars'],
      summary: 'List avatars',
      description:
        'Avatars with `metadata.hidden=true` are omitted. Photo (`lipsync`) avatars carry `animated`: false when no usable face was found (a still image).',
      response: { 200: Type.Array(Type.Ref('AvatarSummary')) },
    },
    handler: async () => catalog.list(),
  });

  app.get('/avatars/:avatar_id', {
    schema: {
      tags: ['avatars'],
      summary: 'Full avatar manifest',
      params: AvatarIdParams,
      response: { 200: Type.Ref('AvatarManifest'), ...errors(404) },
    },
    handler: async (request) => {
      const entry = await catalog.get(request.params.avatar_id);
      if (!entry) throw notFound('avatar not found');
      const { manifest } = entry;
      // Tell clients whether the lipsync renderer can move the mouth or only shows the still image.
      if (manifest.model_type === 'lipsync')
        return { ...manifest, metadata: { ...manifest.metadata, animated: manifest.metadata.animation !== undefined } };
      return manifest;
    },
  });

  app.get('/avatars/:avatar_id/preview', {
    schema: {
      tags: ['avatars'],
      summary: 'Avatar preview image',
      params: AvatarIdParams,
      produces: ['image/png'],
      response: { 200: Type.String({ format: 'binary', description: 'image/png' }), ...errors(404) },
    },
    handler: async (request, reply) => {
      const entry = await catalog.get(request.params.avatar_id);
      if (!entry) throw notFound('avatar not found');
      let png: Buffer;
      try {
        png = await fs.readFile(path.join(entry.dir, 'preview.png'));
      } catch {
        throw notFound('avatar has no preview.png');
      }
      return reply
        .type('image/png')
        .header('cache-control', 'no-cache')
        .send(png as never);
    },
  });

  app.patch('/avatars/:avatar_id', {
    schema: {
      tags: ['avatars'],
      summary: 'Rename a custom avatar',
      description:
        `Sets the display \`name\` (1–${MAX_AVATAR_NAME_LENGTH} characters after trimming); the id stays. Only avatars created through ` +
        'POST /avatars/custom can be renamed (403 for built-in and hidden ones); 404 unknown; 400 empty or over-long name. ' +
        'Sessions already using the avatar are not affected. Answers the updated AvatarSummary.',
      params: AvatarIdParams,
      body: Type.Object(
        { name: Type.String({ minLength: 1, maxLength: MAX_AVATAR_NAME_LENGTH, description: 'New display name' }) },
        { additionalProperties: false, examples: [{ name: 'Ada at the desk' }] },
      ),
      response: { 200: Type.Ref('AvatarSummary'), ...errors(400, 403, 404) },
    },
    handler: async (request) => {
      const entry = await catalog.get(request.params.avatar_id);
      if (!entry) throw notFound('avatar not found');
      if (!entry.isCustom || entry.manifest.metadata.hidden === true)
        throw forbidden('only custom avatars can be renamed');
      const avatar = await renameCustomAvatar(catalog, entry, request.body.name);
      request.log.info({ avatarId: entry.id }, 'custom avatar renamed');
      return avatar;
    },
  });

  app.delete('/avatars/:avatar_id', {
    schema: {
      tags: ['avatars'],
      summary: 'Delete a custom avatar',
      description:
        'Only avatars created through POST /avatars/custom can be deleted (403 for built-in and hidden ones). ' +
        'Sessions already using the avatar keep working until they end: their renderer loaded it at creation. ' +
        'Of concurrent DELETEs of one avatar exactly one answers 200, the others 404.',
      params: AvatarIdParams,
      response: { 200: Type.Object({ deleted: Type.Boolean() }), ...errors(403, 404) },
    },
    handler: async (request) => {
      const entry = await catalog.get(request.params.avatar_id);
      if (!entry) throw notFound('avatar not found');
      if (!entry.isCustom || entry.manifest.metadata.hidden === true)
        throw forbidden('only custom avatars can be deleted');
      // A concurrent DELETE of the same avatar may have removed it since the lookup: that one answers 200, this one 404.
      if (!(await catalog.remove(entry.id))) throw notFound('avatar not found');
      request.log.info({ avatarId: entry.id }, 'custom avatar deleted');
      return { deleted: true };
    },
  });
};

export default avatarRoutes;
export { AvatarSummary, AvatarManifest };
