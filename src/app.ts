import type { Server } from 'node:http';
import Fastify, { type FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { Logger } from 'pino';
import type { ServiceConfig } from './config.ts';
import { createServices, type ServiceOverrides, type Services } from './services.ts';
import { clientErrorHandler, expectationFailed, frameworkErrors } from './framework-errors.ts';
import externalPlugins from './plugins/external/index.ts';
import servicesPlugin from './plugins/app/services.ts';
import errorPlugin from './plugins/app/errors.ts';
import requestGuardPlugin from './plugins/app/request-guard.ts';
import { RequestOriginGuard } from './security/request-origin.ts';
import healthRoutes from './routes/health.ts';
import avatarRoutes from './routes/avatars.ts';
import customAvatarRoutes from './routes/avatars-custom.ts';
import renderKitRoutes from './routes/render-kit.ts';
import sessionRoutes from './routes/sessions.ts';
import interactionRoutes from './routes/interaction.ts';
import expressionRoutes from './routes/expression.ts';
import webrtcRoutes from './routes/webrtc.ts';
import whepRoutes from './routes/whep.ts';
import outputRoutes from './routes/outputs.ts';
import eventRoutes from './routes/events.ts';
import uiRoutes from './routes/ui.ts';
import audioStreamRoutes from './routes/audio-stream.ts';
import listenRoutes from './routes/listen.ts';
import customizeRoutes from './routes/customize.ts';
import toolRoutes from './routes/tools.ts';
import metricsRoutes from './routes/metrics.ts';
import recordingRoutes from './routes/recording.ts';
import offlineRoutes from './routes/offline.ts';
import ttsRoutes from './routes/tts.ts';
import ttsVoiceRoutes from './routes/tts-voices.ts';
import voiceRoutes from './routes/voices.ts';
import customizeReferenceRoutes from './routes/customize-reference.ts';
import inspectRoutes from './routes/inspect.ts';
import { AvatarManifest, AvatarSummary } from './schemas/avatars.ts';
import clusterRouting, { signedByNode } from './cluster/routing.ts';
import { LazySchemaCompilers } from './http/lazy-schema-compilers.ts';

/** Whole-request receive bound: 12 MB at ~100 kB/s fits; a stalled or trickling upload is cut off (408). */
export const REQUEST_TIMEOUT_MS = 120_000;
/**
 * A request's head (request line and headers) must be in within this from the first byte of the connection or of
 * the request (Node's `headersTimeout`), else 408 and the connection closes: this is what ends a connection that
 * never sends anything. Real clients send their head at once; Node's default (60 s) let 1,100 idle sockets hold
 * every file descriptor. Long-lived streams are untouched: an SSE response and an upgraded WebSocket had their
 * head long ago.
 */
export const HEADERS_TIMEOUT_MS = 10_000;
/**
 * An idle keep-alive connection between two requests closes after this (Fastify's default, 72 s, kept idle
 * sockets seven times longer). A proxy that pools connections to the service must drop idle ones sooner
 * (docs/configuration.md). An SSE stream is a response in progress and a WebSocket an upgraded socket: neither is idle keep-alive.
 */
export const KEEP_ALIVE_TIMEOUT_MS = 10_000;
/** How often Node checks connections against HEADERS_TIMEOUT_MS and REQUEST_TIMEOUT_MS (its default, 30 s, fires them up to 30 s late). */
export const CONNECTIONS_CHECK_INTERVAL_MS = 1_000;
/**
 * No inactivity timeout on a socket (Fastify's `connectionTimeout`, off): an SSE stream (a comment every 15 s)
 * or an audio WebSocket may carry nothing for longer, and both end with their session (orphan reaping). Idle
 * sockets that never send a request are bounded by HEADERS_TIMEOUT_MS, trickled bodies by REQUEST_TIMEOUT_MS.
 */
export const SOCKET_INACTIVITY_TIMEOUT_MS = 0;
/**
 * How long one plugin may take to load before start-up fails. Fastify's default (10 s) failed the start of a
 * healthy service on a heavily loaded 2-core host (load ~40: the OpenAPI plugins alone took longer); a plugin
 * that never loads is still reported, within the 120 s a loaded host may need to start the service.
 */
export const PLUGIN_START_TIMEOUT_MS = 120_000;
/** Connections refused at the cap are logged at most this often (with how many), not one line each during a flood. */
const DROPPED_CONNECTIONS_LOG_EVERY_MS = 10_000;

/** Route plugins, each encapsulated; later capabilities add theirs here. */
const ROUTES = [
  healthRoutes,
  avatarRoutes,
  customAvatarRoutes,
  renderKitRoutes,
  sessionRoutes,
  interactionRoutes,
  expressionRoutes,
  webrtcRoutes,
  whepRoutes,
  outputRoutes,
  eventRoutes,
  audioStreamRoutes,
  listenRoutes,
  customizeRoutes,
  toolRoutes,
  metricsRoutes,
  customizeReferenceRoutes,
  ttsRoutes,
  ttsVoiceRoutes,
  voiceRoutes,
  recordingRoutes,
  offlineRoutes,
  inspectRoutes,
  uiRoutes,
];

export interface BuiltApp {
  app: FastifyInstance;
  services: Services;
  /** Compiles every request validator and response serializer now (they are compiled on first use): proves each declared schema compiles; returns how many. */
  compileAllSchemas(): number;
}

/**
 * Builds the service in three layers like fastify/demo: external plugins, app plugins (decorators and
 * error handling), then encapsulated route plugins.
 */
export async function buildApp(
  config: ServiceConfig,
  logger: Logger,
  overrides: ServiceOverrides = {},
): Promise<BuiltApp> {
  const services = await createServices(config, logger, overrides);
  const schemaCompilers = new LazySchemaCompilers();
  const app = Fastify({
    loggerInstance: logger,
    // Sessions are terminated before the server closes; lingering keep-alive or SSE sockets must not hold shutdown.
    forceCloseConnections: true,
    bodyLimit: 1024 * 1024,
    // A client trickling a body (the largest upload is 12 MB) must not hold a request open forever.
    requestTimeout: REQUEST_TIMEOUT_MS,
    keepAliveTimeout: KEEP_ALIVE_TIMEOUT_MS,
    connectionTimeout: SOCKET_INACTIVITY_TIMEOUT_MS,
    http: { headersTimeout: HEADERS_TIMEOUT_MS, connectionsCheckingInterval: CONNECTIONS_CHECK_INTERVAL_MS },
    // Request ids in logs; paths with user input stay out of static messages.
    requestIdHeader: 'x-request-id',
    ajv: { customOptions: { removeAdditional: false, coerceTypes: false, allErrors: false } },
    // Refusals before routing (bad URL, over-long parameter, oversized headers) answer {detail} too.
    frameworkErrors,
    clientErrorHandler,
    pluginTimeout: PLUGIN_START_TIMEOUT_MS,
    // Each route's validator and serializers are compiled on its first request, not all before the app is ready (src/http/lazy-schema-compilers.ts).
    schemaController: { compilersFactory: schemaCompilers.factory },
  }).withTypeProvider<TypeBoxTypeProvider>();
  // An unknown `Expect` is refused by Node before Fastify sees the request; this gives that 417 its {detail}.
  app.server.on('checkExpectation', expectationFailed);
  capConnections(app.server, config.maxConnections, logger);

  // Host and Origin are judged before anything else (docs/security.md), also before a request is forwarded.
  const guard = new RequestOriginGuard(config);
  const cluster = services.cluster;
  await app.register(externalPlugins, { config, guard });
  await app.register(servicesPlugin, { services });
  await app.register(errorPlugin);
  await app.register(requestGuardPlugin, {
    guard,
    isFromNode: (method, url, headers) => cluster !== null && signedByNode(cluster.secret, method, url, headers),
  });
  // Cluster mode: requests for sessions other nodes own are forwarded before any route sees them.
  if (cluster) await app.register(clusterRouting, { node: cluster, guard });
  app.addSchema(AvatarSummary);
  app.addSchema(AvatarManifest);
  for (const routes of ROUTES) await app.register(routes);

  app.addHook('onClose', async () => {
    await services.close();
  });
  await app.ready();
  return { app: app as unknown as FastifyInstance, services, compileAllSchemas: () => schemaCompilers.compileAll() };
}

/**
 * SERVICE_MAX_CONNECTIONS: past it the kernel's next connection is closed at once (Node's `maxConnections`), so
 * idle sockets cannot take the descriptors that requests in progress need to open files. Refusals are logged in
 * batches. A descriptor shortage while accepting (EMFILE at `accept`) is logged, never a crash.
 */
function capConnections(server: Server, maxConnections: number, logger: Logger): void {
  server.maxConnections = maxConnections;
  let dropped = 0;
  let lastLogAt = -Infinity;
  server.on('drop', () => {
    dropped++;
    const now = performance.now();
    if (now - lastLogAt < DROPPED_CONNECTIONS_LOG_EVERY_MS) return;
    lastLogAt = now;
    logger.warn({ maxConnections, dropped }, 'connections refused: connection cap reached');
    dropped = 0;
  });
  server.on('error', (error: NodeJS.ErrnoException) => {
    if (error.syscall === 'accept') logger.warn({ code: error.code }, 'connection not accepted');
    // A failing listen is Fastify's to report (its own listener rejects `listen`); anything later is logged here.
    else if (server.listening) logger.error({ code: error.code }, 'server error');
  });
}
