import path from 'node:path';
import os from 'node:os';
import type { Logger } from 'pino';
import type { ServiceConfig } from './config.ts';
import { Store } from './store/db.ts';
import { SessionStore } from './store/sessions.ts';
import { AvatarCatalog } from './catalog/catalog.ts';
import { RenderKits } from './catalog/render-kits.ts';
import { closeRenderKitPool } from '../actors/render/render-kit-pool.ts';
import { ModelRegistry } from './models.ts';
import { SessionSupervisor } from './sessions/supervisor.ts';
import type { RenderOpener } from './sessions/session-factory.ts';
import { InspectionHub } from './inspect/inspection-hub.ts';
import { RenderPool } from '../actors/render/pool.ts';
import { RendererRouter } from '../actors/render-backends/router.ts';
import { InferencePool } from '../actors/inference/pool.ts';
import { LocalLipsyncModel } from '../actors/lipsync/local-model.ts';
import { RemoteLipsyncModel } from '../actors/lipsync/remote-model.ts';
import { createTtsRegistry, type TtsRegistry } from '../actors/tts/registry.ts';
import { closeBuiltinEngines } from '../actors/tts/providers/builtin.ts';
import { createOpenAiLlm } from '../actors/llm/providers/openai.ts';
import { createOpenAiAsr } from '../actors/asr/providers/openai.ts';
import { endpointFromServiceConfig } from '../actors/upstream/http.ts';
import type { LlmProvider } from '../actors/llm/types.ts';
import type { AsrProvider } from '../actors/asr/types.ts';
import { DefaultsStore } from './store/defaults.ts';
import { VoiceCatalog } from './voices/catalog.ts';
import { VoiceUploads } from './voices/uploads.ts';
import { catalogVoiceLookup } from './voices/clone.ts';
import { JobStore, type StoredJob } from './store/jobs.ts';
import { RecordingRegistry } from './recording/registry.ts';
import { OfflineJobQueue } from './recording/offline-jobs.ts';
import { sweepStartupLeftovers } from './startup-sweep.ts';
import type { SessionRecords } from './store/sessions.ts';
import type { VoiceCatalogStore } from './voices/catalog.ts';
import type { OfflineJobs } from './recording/offline-jobs.ts';
import type { ClusterNode } from './cluster/index.ts';
import { ServiceMetrics } from './metrics/service-metrics.ts';
import type { PoolLoadSnapshot } from '../actors/pool-load.ts';
import { SERVICE_VERSION } from './version.ts';
import { TranscriptStore } from './store/transcripts.ts';
import { SessionTranscripts, type TranscriptBudgets } from './sessions/transcript.ts';
import { WebhookOutbox } from './webhooks/outbox.ts';
import { WebhookDelivery } from './webhooks/delivery.ts';
import { WebhookEvents, type WebhookSink } from './webhooks/events.ts';
import { WebhookSigner } from '../actors/upstream/webhook-signing.ts';

export interface Services {
  config: ServiceConfig;
  logger: Logger;
  store: Store;
  sessionStore: SessionRecords;
  defaults: Pick<DefaultsStore, 'get' | 'update'>;
  catalog: AvatarCatalog;
  /** Render kits of client-rendered sessions (`GET /avatars/{id}/render-kit`), built once per avatar version and model. */
  renderKits: RenderKits;
  models: ModelRegistry;
  renderPool: RenderPool;
  /**
   * The shared ONNX inference pool (`actors/inference/pool.ts`), started on first use: the service only pays
   * for its worker threads when a model needs them (`lipsync_b` at start-up when configured).
   */
  inference(): InferencePool;
  /** Neural lip-sync models (`lipsync_b` local ONNX, `lipsync_c` KServe), for status and tests. */
  lipsync: { b: LocalLipsyncModel; c: RemoteLipsyncModel };
  tts: TtsRegistry;
  voices: VoiceCatalogStore;
  uploads: VoiceUploads;
  /** Where reference audio of locally cloned voices lives. */
  voiceDir: string;
  llm: LlmProvider;
  asr: AsrProvider;
  supervisor: SessionSupervisor;
  /** The live state inspector's feed (`/inspect`); `enabled` follows SERVICE_INSPECTOR. */
  inspection: InspectionHub;
  recordings: RecordingRegistry;
  jobs: OfflineJobs;
  /** Cluster mode (SERVICE_REDIS_URL): this node's registry, directory and shared stores; null on one node. */
  cluster: ClusterNode | null;
  /** Prometheus metrics (`GET /metrics`). */
  metrics: ServiceMetrics;
  /** Signed webhook events (`src/webhooks/`): what is sent when, stored in the outbox before it counts as emitted. */
  webhooks: WebhookEvents;
  close(): Promise<void>;
}

/** Replaceable parts, for tests that plug in loopback upstreams or a pre-built registry. */
export interface ServiceOverrides {
  tts?: TtsRegistry;
  llm?: LlmProvider;
  asr?: AsrProvider;
  /** Opens session renderers (default: the render pool); tests wrap the pool to make a renderer fail. */
  render?: RenderOpener;
  /** Webhook delivery timing (tests retry in milliseconds instead of seconds) and outbox bound. */
  webhooks?: { backoffBaseMs?: number; attemptTimeoutMs?: number; outboxMaxEntries?: number; outboxMaxBytes?: number };
  /** Transcript byte budgets (tests use small ones). */
  transcripts?: TranscriptBudgets;
}

/** Builds every long-lived service object in dependency order; `close()` tears them down in reverse. */
export async function createServices(
  config: ServiceConfig,
  logger: Logger,
  overrides: ServiceOverrides = {},
): Promise<Services> {
  // Cluster mode: sessions, voices, defaults and jobs live in Redis; the LevelDB is this node's own. The cluster
  // modules (BullMQ, ioredis: a third of a second of loading) are imported only when a Redis URL is configured.
  const cluster = config.cluster ? await (await import('./cluster/index.ts')).openCluster(config, logger) : null;
  const store = await Store.open(cluster ? cluster.nodeDataDir : config.dataDir);
  const sessionStore = cluster ? cluster.directory : new SessionStore(store);
  const defaults = cluster ? cluster.defaults : new DefaultsStore(store);
  const catalog = cluster
    ? await openSharedAvatarCatalog(config, logger, cluster)
    : new AvatarCatalog(config.avatarsDir, logger.child({ component: 'catalog' }));
  const renderPool = new RenderPool({
    threads: config.renderThreads || Math.max(1, os.availableParallelism() - 1),
    logger: logger.child({ component: 'render' }),
  });
  let inferencePool: InferencePool | undefined;
  const inference = (): InferencePool => (inferencePool ??= new InferencePool());
  const lipsync = {
    // Mel windows and paste-back run in the render workers, off the event loop the media clocks share.
    b: new LocalLipsyncModel({
      file: config.lipsync.bModel,
      provider: config.lipsync.onnxProvider,
      pool: inference,
      offload: renderPool,
    }),
    c: new RemoteLipsyncModel({
      baseUrl: config.lipsync.cUrl,
      model: config.lipsync.cModel,
      // A server failing mid-session hands the rest of the turn to the CPU photo renderer.
      fallback: (avatar, signal) => renderPool.open(avatar, 'lipsync', signal),
      offload: renderPool,
    }),
  };
  if (config.lipsync.bModel) {
    const status = await lipsync.b.check();
    const log = logger.child({ component: 'lipsync_b' });
    if (status.state === 'connected') log.info({ provider: config.lipsync.onnxProvider }, 'lipsync_b model ready');
    else log.warn({ reason: status.reason }, 'lipsync_b model not usable');
  }
  const models = new ModelRegistry({ lipsync_b: lipsync.b, lipsync_c: lipsync.c });
  const renderers = new RendererRouter({ pool: renderPool, lipsyncB: lipsync.b, lipsyncC: lipsync.c });
  const ttsConfig = config.tts;
  const voices = cluster ? cluster.voices : new VoiceCatalog(store.sublevel('voices'));
  const uploads = new VoiceUploads({ dir: path.join(config.dataDir, 'voice-uploads') });
  const tts =
    overrides.tts ??
    createTtsRegistry(ttsConfig, {
      logger: logger.child({ component: 'tts' }),
      voiceLookup: catalogVoiceLookup(voices),
    });
  const llm = overrides.llm ?? createOpenAiLlm(endpointFromServiceConfig(config.llm));
  const asr = overrides.asr ?? createOpenAiAsr(endpointFromServiceConfig(config.asr));

  const inspection = new InspectionHub(config.inspector);
  const metrics = new ServiceMetrics({ version: SERVICE_VERSION });
  // Webhooks: an event is emitted once stored, in this process's LevelDB outbox, or in cluster mode in BullMQ's
  // queue (every node's worker takes from it: delivered once cluster-wide, also when the emitting node died).
  // Pending deliveries of an earlier run are loaded before anything new.
  const signer = config.webhooks.secret ? new WebhookSigner(config.webhooks.secret) : null;
  const webhookLogger = logger.child({ component: 'webhooks' });
  let delivery: { kick(): void; close(): Promise<void> } | null = null;
  let webhookSink: WebhookSink;
  if (cluster) {
    const queue = cluster.webhookQueue({
      signer,
      logger: webhookLogger,
      counters: metrics.webhookDeliveries,
      backoffBaseMs: overrides.webhooks?.backoffBaseMs,
      maxEntries: overrides.webhooks?.outboxMaxEntries,
      maxBytes: overrides.webhooks?.outboxMaxBytes,
    });
    queue.start();
    webhookSink = queue;
    delivery = { kick: () => undefined, close: () => queue.close() };
  } else {
    const outbox = new WebhookOutbox(
      store,
      overrides.webhooks?.outboxMaxEntries,
      metrics.webhookDeliveries.dropped,
      overrides.webhooks?.outboxMaxBytes,
    );
    await outbox.load();
    webhookSink = outbox;
    if (signer) {
      delivery = new WebhookDelivery({
        outbox,
        signer,
        logger: webhookLogger,
        counters: metrics.webhookDeliveries,
        backoffBaseMs: overrides.webhooks?.backoffBaseMs,
        attemptTimeoutMs: overrides.webhooks?.attemptTimeoutMs,
      });
    }
  }
  const webhooks: WebhookEvents = new WebhookEvents({
    config: config.webhooks,
    outbox: webhookSink,
    delivery: { kick: () => delivery?.kick() },
    logger: webhookLogger,
    sessionUrlOf: (sessionId) => supervisor.liveSession(sessionId)?.record.webhook_url,
  });
  const transcripts = new SessionTranscripts(
    new TranscriptStore(store),
    logger.child({ component: 'transcripts' }),
    overrides.transcripts,
  );
  await transcripts.load();
  const supervisor = new SessionSupervisor({
    config,
    store: sessionStore,
    catalog,
    models,
    render: overrides.render ?? renderers,
    tts: (id) => tts.get(id),
    llm,
    asr,
    logger,
    defaults: () => defaults.get(),
    inspection,
    metrics,
    inference,
    transcripts,
    webhooks,
    // Cluster mode: the id carries this node's routing slot, so a sticky balancer finds the owner.
    ...(cluster ? { newSessionId: () => cluster.registry.newSessionId() } : {}),
  });
  cluster?.attachMetrics(metrics.registry);
  metrics.readFrom({
    sessionsByState: () => supervisor.sessionsByState(),
    capacity: () => ({ active: supervisor.capacity, pending: supervisor.pendingCapacity }),
    liveFrames: () => supervisor.liveFrames(),
    // The inference pool exists once something used it (VAD, a neural lip-sync model).
    pools: () => {
      const pools: Record<string, PoolLoadSnapshot> = { render: renderPool.loadSnapshot };
      if (inferencePool) pools.inference = inferencePool.loadSnapshot;
      return pools;
    },
    frameBuffers: () => {
      const buffers = renderPool.frameBuffers;
      return { outstanding: buffers.outstanding, free: buffers.freeCount, overReleases: buffers.overReleases };
    },
  });
  await supervisor.recover();
  delivery?.kick();
  // Load the built-in speech engines now (in their engine process) so the first speak does not pay for WASM compilation.
  if (config.ttsDefaultProvider === 'builtin') tts.get('builtin');
  const recordings = new RecordingRegistry(
    cluster ? cluster.nodeDataDir : config.dataDir,
    logger.child({ component: 'recording' }),
  );
  recordings.onReady((sessionId, recording) => void webhooks.recordingReady(sessionId, recording));
  const jobDeps = {
    dataDir: config.dataDir,
    sampleRate: config.sampleRate,
    // The same routing as live sessions, so jobs render with lipsync_b / lipsync_c too (docs/recording.md).
    openRenderer: async (avatarId: string, model: string, signal?: AbortSignal) => {
      const avatar = await catalog.get(avatarId);
      if (!avatar) throw new Error(`avatar "${avatarId}" no longer exists`);
      return renderers.open(avatar, model as never, signal, 'offline');
    },
    tts: (id: string) => tts.get(id as never),
    logger: logger.child({ component: 'offline' }),
    onSettled: (job: StoredJob) =>
      void webhooks.bundleSettled(job, `/sessions/${job.session_id}/rt-offline-bundle/${job.job_id}/download`),
  };
  const jobs: OfflineJobs = cluster
    ? cluster.offlineQueue(jobDeps)
    : new OfflineJobQueue({ ...jobDeps, store: new JobStore(store) });
  // Before listening: what a crash left (temp names, files no record points to) goes; unfinished jobs fail.
  await sweepStartupLeftovers(
    {
      voices,
      voiceDir: ttsConfig.voiceDir,
      uploads,
      avatarsDir: config.avatarsDir,
      recordings,
      jobs,
      shared: cluster !== null,
      avatarTag: cluster?.nodeId,
    },
    logger.child({ component: 'sweep' }),
  );
  // Expired clone samples are swept periodically too, so a long-running service never keeps one.
  uploads.start();
  // Joins the cluster last: from here other nodes place sessions and forward requests to this one.
  await cluster?.start(supervisor);

  let closed = false;
  return {
    config,
    logger,
    store,
    sessionStore,
    defaults,
    catalog,
    renderKits: new RenderKits(catalog),
    models,
    renderPool,
    inference,
    lipsync,
    tts,
    voices,
    uploads,
    voiceDir: ttsConfig.voiceDir,
    llm,
    asr,
    supervisor,
    inspection,
    recordings,
    jobs,
    cluster,
    metrics,
    webhooks,
    async close() {
      if (closed) return;
      closed = true;
      cluster?.drain();
      await jobs.close();
      await supervisor.closeAll();
      // After the sessions' last events were stored: what is not delivered yet stays in the outbox for the next start.
      await delivery?.close();
      // After the sessions' tombstones are written: the node leaves the registry, then Redis is closed.
      await cluster?.close();
      inspection.close();
      await recordings.close();
      uploads.close();
      await renderPool.close();
      await closeRenderKitPool();
      await inferencePool?.close();
      await closeBuiltinEngines();
      await store.close();
    },
  };
}

/** Cluster mode: the bundles stay on the shared directory, their entries live in Redis (every node sees a change at once). */
async function openSharedAvatarCatalog(
  config: ServiceConfig,
  logger: Logger,
  cluster: ClusterNode,
): Promise<AvatarCatalog> {
  const { RedisAvatarCatalog } = await import('./cluster/avatar-catalog.ts');
  const catalog = new RedisAvatarCatalog(
    config.avatarsDir,
    logger.child({ component: 'catalog' }),
    cluster.redis,
    cluster.nodeId,
  );
  await catalog.seed();
  const orphans = await catalog.sweepOrphans().catch(() => 0);
  if (orphans > 0) logger.info({ orphans }, 'custom avatar directories without a catalog entry removed');
  return catalog;
}
