import fs from 'node:fs/promises';
import { createRequire } from 'node:module';
import cors from '@fastify/cors';
import multipart from '@fastify/multipart';
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import websocket from '@fastify/websocket';
import fp from 'fastify-plugin';
import type { FastifyInstance } from 'fastify';
import type { ServiceConfig } from '../../config.ts';
import type { RequestOriginGuard } from '../../security/request-origin.ts';
import { ErrorBody } from '../../schemas/common.ts';
import { SERVICE_VERSION } from '../../version.ts';
import { documentMultipartForms } from '../../schemas/multipart-form.ts';

/** The default per-file bound (clone audio, 12 MB); each route passes its own limit to `readMultipart`. */
export const MAX_UPLOAD_BYTES = 12 * 1024 * 1024;

/**
 * Shape bounds for every multipart form. The richest form (voice cloning) has six text fields and one
 * file, so these leave room for clients that add a field or two while keeping the parts a form may
 * buffer small: 16 fields of at most 64 KiB (a persona prompt fits) is 1 MiB of text at most.
 */
export const MULTIPART_LIMITS = {
  fileSize: MAX_UPLOAD_BYTES,
  files: 1,
  fields: 16,
  fieldSize: 64 * 1024,
  parts: 20,
  /** Header lines per part: a browser sends two (Content-Disposition, Content-Type). */
  headerPairs: 16,
} as const;

const require = createRequire(import.meta.url);

export const PREFLIGHT_REFUSED_DETAIL =
  'CORS preflight refused: its Origin is not listed in SERVICE_CORS_ORIGINS (docs/security.md)';

/** Third-party plugins: CORS, multipart, websocket and the OpenAPI document with its two UIs, all offline. */
export default fp(async function externalPlugins(
  app: FastifyInstance,
  opts: { config: ServiceConfig; guard: RequestOriginGuard },
) {
  const { config, guard } = opts;
  // A preflight from an origin SERVICE_CORS_ORIGINS does not list: 403 {detail} without CORS headers, before
  // @fastify/cors (which would leave it to the router: 404). Listed origins' preflights are @fastify/cors's (204).
  app.addHook('onRequest', async (request, reply) => {
    if (request.method !== 'OPTIONS' || request.headers['access-control-request-method'] === undefined) return;
    const origin = request.headers.origin;
    if (config.corsOrigins.length > 0 && origin !== undefined && guard.listsOrigin(origin)) return;
    return reply.code(403).send({ detail: PREFLIGHT_REFUSED_DETAIL });
  });
  await app.register(cors, {
    // SERVICE_CORS_ORIGINS as the origin guard reads it (one owner): a page it lists may read the answers.
    // A foreign page's state-changing request is refused by the guard (src/plugins/app/request-guard.ts).
    origin:
      config.corsOrigins.length > 0
        ? (origin, done) => done(null, origin !== undefined && guard.listsOrigin(origin))
        : false,
    methods: ['GET', 'POST', 'DELETE', 'OPTIONS'],
    // Cross-origin clients read the turn id a speak/chat/audio request answers with, and a WHEP viewer's resource.
    exposedHeaders: ['x-turn-id', 'location'],
  });
  await app.register(multipart, {
    limits: { ...MULTIPART_LIMITS },
  });
  await app.register(websocket, { options: { maxPayload: 1024 * 1024 } });

  app.addSchema(ErrorBody);
  await app.register(swagger, {
    openapi: {
      openapi: '3.0.3',
      info: {
        title: 'Avatar Conversation Service',
        version: SERVICE_VERSION,
        description:
          'Talking-avatar sessions: REST, server-sent events (`GET /sessions/{session_id}/events`) and an audio WebSocket ' +
          '(`/sessions/{session_id}/speak_audio_stream`). Media flows over WebRTC. See docs/ in the repository.\n\n' +
          'Every route may also answer, with `{detail}`: 431 (request line or headers over 16 KiB), 417 (an `Expect` other than ' +
          '`100-continue`), 408 (headers not in within 10 s, or the whole request within 120 s) and 503 with `Retry-After` (the ' +
          'service is draining for shutdown, or out of file descriptors). Connections past `SERVICE_MAX_CONNECTIONS` are closed ' +
          'unanswered (docs/configuration.md, "Connection limits").',
      },
      tags: [
        { name: 'health', description: 'Health, models and queue' },
        { name: 'avatars', description: 'Avatar catalog' },
        { name: 'sessions', description: 'Session lifecycle' },
        { name: 'interaction', description: 'Speak, chat, transcribe, interrupt, direct audio' },
        { name: 'persona', description: 'Persona customisation' },
        { name: 'webrtc', description: 'WebRTC signaling and WHEP playback' },
        { name: 'streaming', description: 'RTMP and WHIP outputs to media servers' },
        { name: 'events', description: 'Server-sent events' },
        { name: 'tools', description: 'Tool calling: client tools answer here (docs/integration.md)' },
        { name: 'tts', description: 'Speech preview' },
        { name: 'voices', description: 'Cloned voice catalog' },
        { name: 'recording', description: 'Recording and offline rendering' },
      ],
    },
    refResolver: { buildLocalReference: (json, _baseUri, _fragment, i) => String(json.$id ?? `def-${i}`) },
    // Multipart routes document their form as the request body (never validated by Fastify: the handlers stream it).
    transform: documentMultipartForms as never,
  });
  await app.register(swaggerUi, { routePrefix: '/docs', staticCSP: false, uiConfig: { deepLinking: true } });

  // The bundle's footer logo points at a CDN; serve it with an inline image so /redoc needs no network.
  const redocBundle = (await fs.readFile(require.resolve('redoc/bundles/redoc.standalone.js'), 'utf8')).replaceAll(
    'https://cdn.redoc.ly/redoc/logo-mini.svg',
    REDOC_LOGO_DATA_URI,
  );
  app.get('/redoc', { schema: { hide: true } }, async (_req, reply) => {
    reply.type('text/html').send(REDOC_PAGE);
  });
  app.get('/redoc/redoc.standalone.js', { schema: { hide: true } }, async (_req, reply) => {
    reply.type('application/javascript').header('cache-control', 'public, max-age=86400').send(redocBundle);
  });
  app.get('/openapi.json', { schema: { hide: true } }, async () => app.swagger());
});

const REDOC_LOGO_DATA_URI = "data:image/svg+xml,%3Csvg xmlns='http://www.w3.org/2000/svg' width='16' height='16'/%3E";

const REDOC_PAGE = `<!doctype html>
<html><head><meta charset="utf-8"><title>Avatar Conversation Service – API</title>
<meta name="viewport" content="width=device-width, initial-scale=1"></head>
<body><div id="redoc"></div>
<script src="/redoc/redoc.standalone.js"></script>
<script>Redoc.init('/openapi.json', { hideDownloadButton: false }, document.getElementById('redoc'));</script>
</body></html>`;
