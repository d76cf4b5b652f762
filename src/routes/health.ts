import { Type } from '@sinclair/typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { MODEL_TYPES } from '../../actors/render/types.ts';

const ModelEntry = Type.Object(
  {
    id: Type.Union(MODEL_TYPES.map((m) => Type.Literal(m))),
    connected: Type.Boolean({ description: 'Session creation requires true' }),
    status: Type.Union([Type.Literal('connected'), Type.Literal('not_configured'), Type.Literal('error')], {
      description: 'connected: usable now; not_configured: its backend is not set up; error: it failed to start',
    }),
    reason: Type.String({ description: 'Human explanation of the status' }),
    renders: Type.Array(Type.String(), { description: 'Avatar model types this model can render' }),
    backend: Type.String(),
  },
  { $id: 'ModelEntry' },
);

const ComponentHealth = Type.Object({
  status: Type.Union([Type.Literal('ok'), Type.Literal('degraded'), Type.Literal('not_configured'), Type.Literal('error')]),
  detail: Type.Optional(Type.String()),
});

const HealthBody = Type.Object(
  {
    status: Type.Union([Type.Literal('ok'), Type.Literal('degraded')]),
    uptime_ms: Type.Integer(),
    sessions: Type.Object({ live: Type.Integer(), active: Type.Integer(), capacity: Type.Integer() }),
    components: Type.Record(Type.String(), ComponentHealth),
  },
  { $id: 'HealthBody' },
);

const QueueStatus = Type.Object(
  {
    capacity: Type.Integer({ description: 'SERVICE_MAX_SESSIONS: most sessions running or paused at once' }),
    active: Type.Integer({ description: 'Sessions running or paused' }),
    available: Type.Integer({ description: 'capacity - active; start answers 503 when 0' }),
    created: Type.Integer({ description: 'Sessions created but not started' }),
  },
  { $id: 'QueueStatus' },
);

const startedAt = Date.now();

/** Liveness, readiness detail, the model list and session capacity. */
const healthRoutes: FastifyPluginAsyncTypebox = async (app) => {
  const { services } = app;

  app.get('/healthz', {
    schema: { tags: ['health'], summary: 'Liveness probe', response: { 200: Type.Object({ status: Type.Literal('ok') }) } },
    handler: async () => ({ status: 'ok' as const }),
  });

  app.get('/health', {
    schema: {
      tags: ['health'],
      summary: 'Component health',
      description: 'Per-component detail: storage, avatar catalog, renderers, TTS, LLM and ASR. `degraded` when a required part fails.',
      response: { 200: HealthBody },
    },
    handler: async () => {
      const components: Record<string, { status: 'ok' | 'degraded' | 'not_configured' | 'error'; detail?: string }> = {};
      try {
        await services.sessionStore.get('health-probe');
        components.storage = { status: 'ok' };
      } catch (error) {
        components.storage = { status: 'error', detail: (error as Error).message };
      }
      const avatars = await services.catalog.list();
      components.avatars = avatars.length > 0 ? { status: 'ok', detail: `${avatars.length} avatars` } : { status: 'degraded', detail: 'no avatars found' };
      const models = services.models.list();
      const failed = models.filter((m) => m.status === 'error');
      components.renderers = failed.length
        ? { status: 'degraded', detail: failed.map((m) => `${m.id}: ${m.reason}`).join('; ') }
        : { status: 'ok', detail: `${models.filter((m) => m.connected).length} models connected` };
      const defaultTts = services.tts.get(services.config.ttsDefaultProvider).status();
      components.tts = defaultTts.configured
        ? { status: 'ok', detail: `default provider ${services.config.ttsDefaultProvider}` }
        : { status: 'error', detail: defaultTts.reason };
      const llm = services.llm.status();
      components.llm = llm.configured ? { status: 'ok' } : { status: 'not_configured', detail: llm.reason };
      const asr = services.asr.status();
      components.asr = asr.configured ? { status: 'ok' } : { status: 'not_configured', detail: asr.reason };
      const degraded = Object.values(components).some((c) => c.status === 'error' || c.status === 'degraded');
      const sup = services.supervisor;
      return {
        status: degraded ? ('degraded' as const) : ('ok' as const),
        uptime_ms: Date.now() - startedAt,
        sessions: { live: sup.liveCount, active: sup.activeCount, capacity: sup.capacity },
        components,
      };
    },
  });

  app.get('/queue/status', {
    schema: { tags: ['health'], summary: 'Session capacity', response: { 200: QueueStatus } },
    handler: async () => {
      const sup = services.supervisor;
      return {
        capacity: sup.capacity,
        active: sup.activeCount,
        available: Math.max(0, sup.capacity - sup.activeCount),
        created: sup.liveCount - sup.activeCount,
      };
    },
  });

  app.get('/models', {
    schema: {
      tags: ['health'],
      summary: 'Rendering models',
      description: 'One entry per model type. Session creation requires `connected=true`.',
      response: { 200: Type.Object({ models: Type.Array(ModelEntry) }) },
    },
    handler: async () => ({ models: services.models.list() }),
  });
};

export default healthRoutes;
