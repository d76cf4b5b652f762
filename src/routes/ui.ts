import fs from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';

const PUBLIC_DIR = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'public');

/** The demo page a newcomer sees after `npm start`. */
const uiRoutes: FastifyPluginAsyncTypebox = async (app) => {
  app.get('/', { schema: { hide: true } }, async (_request, reply) => {
    reply.type('text/html; charset=utf-8').send(await fs.readFile(path.join(PUBLIC_DIR, 'index.html')));
  });
  app.get('/app.js', { schema: { hide: true } }, async (_request, reply) => {
    reply.type('application/javascript; charset=utf-8').send(await fs.readFile(path.join(PUBLIC_DIR, 'app.js')));
  });
};

export default uiRoutes;
