import { Type } from '@sinclair/typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { MODEL_TYPES } from '../models.ts';
import { HealthReporter } from '../health/report.ts';
import { PROBE_CACHE_MS, PROBE_TIMEOUT_MS } from '../health/probe-cache.ts';
import { TTS_PROVIDER_SERVICES } from '../voices/provider-names.ts';
import { isTtsProviderId } from '../tts/stage.ts';

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
  status: Type.Union([Type.Literal('ok'), Type.Literal('not_configured'), Type.Literal('error')], {
    description: 'ok: usable; not_configured: not set up (reason names the variable to set); error: set up but failing',
  }),
  checked_at: Type.String({
    format: 'date-time',
    description: `When this dependency was last checked (remote probes are cached for ${PROBE_CACHE_MS / 1000} s)`,
  }),
  reason: Type.Optional(Type.String({ description: 'Why it is not ok, and what to check' })),
  detail: Type.Optional(Type.String({ description: 'Extra facts about a dependency that is ok' })),
  service: Type.Optional(
    Type.String({
      description: 'Added field, `tts.<provider>` components: the real service or engine behind the provider id',
    }),
  ),
  latency_ms: Type.Optional(Type.Integer({ description: 'How long the probe took' })),
});

const HealthBody = Type.Object(
  {
    status: Type.Union([Type.Literal('ok'), Type.Literal('degraded')], {
      description: 'degraded when any component is in error',
    }),
    uptime_ms: Type.Integer(),
    sessions: Type.Object({ live: Type.Integer(), active: Type.Integer(), capacity: Type.Integer() }),
    components: Type.Record(Type.String(), ComponentHealth, {
      description:
        'storage, avatars, llm, asr, tts.<provider> for every TTS provider, renderer.<model> for every rendering model',
    }),
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
  const reporter = new HealthReporter(services);
  app.addHook('onClose', async () => reporter.close());

  app.get('/healthz', {
    schema: {
      tags: ['health'],
      summary: 'Liveness probe',
      response: { 200: Type.Object({ status: Type.Literal('ok') }) },
    },
    handler: async () => ({ status: 'ok' as const }),
  });

  app.get('/health', {
    schema: {
      tags: ['health'],
      summary: 'Component health',
      description:
        'Every dependency as ok, not_configured or error, with when it was checked and why it is not ok. The LLM and ASR ' +
        'servers are asked `GET {base}/models`, TTS servers with a configured base URL are checked for reachability; ' +
        `those probes are bounded (${PROBE_TIMEOUT_MS / 1000} s) and cached (${PROBE_CACHE_MS / 1000} s). \`degraded\` when any dependency is in error. ` +
        'For a cheap liveness check use `/healthz`.',
      response: { 200: HealthBody },
    },
    handler: async () => {
      const report = await reporter.report();
      const sup = services.supervisor;
      return {
        status: report.status,
        uptime_ms: Date.now() - startedAt,
        sessions: { live: sup.liveCount, active: sup.activeCount, capacity: sup.capacity },
        // Each TTS provider id says which service it is (its status says whether it is configured).
        components: Object.fromEntries(
          Object.entries(report.components).map(([name, health]) => {
            const provider = name.startsWith('tts.') ? name.slice(4) : '';
            return [name, isTtsProviderId(provider) ? { ...health, service: TTS_PROVIDER_SERVICES[provider] } : health];
          }),
        ),
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
    handler: async () => {
      // Remote backends (lipsync_c) are re-checked here, at most every few seconds (their own cache).
      await services.models.refresh();
      return { models: services.models.list() };
    },
  });
};

export default healthRoutes;
