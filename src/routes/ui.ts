import fs from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { clientBundle, type ClientBundleName } from '../ui/client-bundles.ts';

const PUBLIC_DIR = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'public');

const FAVICON_SVG =
  '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 64 64"><rect x="4" y="4" width="56" height="46" rx="12" fill="#3b7ddd"/>' +
  '<path d="M18 50 L14 62 L30 50 Z" fill="#3b7ddd"/><circle cx="24" cy="22" r="4" fill="#fff"/><circle cx="40" cy="22" r="4" fill="#fff"/>' +
  '<ellipse cx="32" cy="36" rx="9" ry="6" fill="#1b2a41"/></svg>';

/** The page a newcomer sees after `npm start`. */
const uiRoutes: FastifyPluginAsyncTypebox = async (app) => {
  app.get('/', { schema: { hide: true } }, async (_request, reply) => {
    reply.type('text/html; charset=utf-8').send(await fs.readFile(path.join(PUBLIC_DIR, 'index.html')));
  });
  // An inline SVG (a face in a speech bubble): browsers ask for /favicon.ico whatever the page links.
  app.get('/favicon.ico', { schema: { hide: true } }, async (_request, reply) => {
    reply.type('image/svg+xml').header('cache-control', 'public, max-age=86400').send(FAVICON_SVG);
  });
  app.get('/app.js', { schema: { hide: true } }, async (_request, reply) => {
    reply.type('application/javascript; charset=utf-8').send(await fs.readFile(path.join(PUBLIC_DIR, 'app.js')));
  });
  // The client library for other pages (docs/embedding.md): any origin may load it, as with any public script. Using
  // the service from that page is what SERVICE_CORS_ORIGINS decides.
  const bundles: Array<[string, ClientBundleName]> = [
    ['/widget.js', 'widget'],
    ['/client.js', 'client'],
  ];
  for (const [url, name] of bundles) {
    app.get(url, { schema: { hide: true } }, async (_request, reply) => {
      reply
        .type('application/javascript; charset=utf-8')
        .header('access-control-allow-origin', '*')
        .header('cross-origin-resource-policy', 'cross-origin')
        .header('cache-control', 'public, max-age=300')
        .send(await clientBundle(name));
    });
  }
};

export default uiRoutes;
