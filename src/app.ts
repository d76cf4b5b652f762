import Fastify, { type FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { Logger } from 'pino';
import type { ServiceConfig } from './config.ts';
import { createServices, type ServiceOverrides, type Services } from './services.ts';
import { clientErrorHandler, frameworkErrors } from './framework-errors.ts';
import externalPlugins from './plugins/external/index.ts';
import servicesPlugin from './plugins/app/services.ts';
import errorPlugin from './plugins/app/errors.ts';
import requestGuardPlugin from './plugins/app/request-guard.ts';
import { RequestOriginGuard } from './security/request-origin.ts';
import healthRoutes from './routes/health.ts';
import avatarRoutes from './routes/avatars.ts';
import customAvatarRoutes from './routes/avatars-custom.ts';
import sessionRoutes from './routes/sessions.ts';
import interactionRoutes from './routes/interaction.ts';
import webrtcRoutes from './routes/webrtc.ts';
import eventRoutes from './routes/events.ts';
import uiRoutes from './routes/ui.ts';
import audioStreamRoutes from './routes/audio-stream.ts';
import listenRoutes from './routes/listen.ts';
import customizeRoutes from './routes/customize.ts';
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

/** Whole-request receive bound: 12 MB at ~100 kB/s fits; a stalled or trickling upload is cut off (408). */
export const REQUEST_TIMEOUT_MS = 120_000;

/** Route plugins, each encapsulated; later capabilities add theirs here. */
const ROUTES = [healthRoutes, avatarRoutes, customAvatarRoutes, sessionRoutes, interactionRoutes, webrtcRoutes, eventRoutes, audioStreamRoutes, listenRoutes, customizeRoutes, metricsRoutes, customizeReferenceRoutes, ttsRoutes, ttsVoiceRoutes, voiceRoutes, recordingRoutes, offlineRoutes, inspectRoutes, uiRoutes];

export interface BuiltApp {
  app: FastifyInstance;
  services: Services;
}

/**
 * Builds the service in three layers like fastify/demo: external plugins, app plugins (decorators and
 * error handling), then encapsulated route plugins.
 */
export async function buildApp(config: ServiceConfig, logger: Logger, overrides: ServiceOverrides = {}): Promise<BuiltApp> {
  const services = await createServices(config, logger, overrides);
  const app = Fastify({
    loggerInstance: logger,
    // Sessions are terminated before the server closes; lingering keep-alive or SSE sockets must not hold shutdown.
    forceCloseConnections: true,
    bodyLimit: 1024 * 1024,
    // A client trickling a body (the largest upload is 12 MB) must not hold a request open forever.
    requestTimeout: REQUEST_TIMEOUT_MS,
    // Request ids in logs; paths with user input stay out of static messages.
    requestIdHeader: 'x-request-id',
    ajv: { customOptions: { removeAdditional: false, coerceTypes: false, allErrors: false } },
    // Refusals before routing (bad URL, over-long parameter, oversized headers) answer {detail} too.
    frameworkErrors,
    clientErrorHandler,
  }).withTypeProvider<TypeBoxTypeProvider>();

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
  return { app: app as unknown as FastifyInstance, services };
}
