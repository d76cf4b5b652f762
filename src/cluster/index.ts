import path from 'node:path';
import type { Logger } from 'pino';
import type { ServiceConfig, ClusterConfig } from '../config.ts';
import type { SessionSupervisor } from '../sessions/supervisor.ts';
import { errorForLog } from '../logger.ts';
import { connectRedis, NodeRegistry } from './node.ts';
import { SessionDirectory } from './session-directory.ts';
import { RedisVoiceCatalog } from './voice-catalog.ts';
import { RedisDefaultsStore } from './defaults.ts';
import { ClusterOfflineQueue, OFFLINE_LOCK_MIN_MS, type ClusterOfflineDeps } from './offline-queue.ts';
import { ClusterWebhookQueue, type ClusterWebhookDeps } from './webhook-queue.ts';
import { NODE_LOST } from './scripts.ts';
import { clusterSecret } from './internal-auth.ts';
import { Counter, type Registry } from 'prom-client';
import { METRICS_PREFIX } from '../metrics/service-metrics.ts';

/** What a node forwarded to an owner: plain HTTP (SSE included), WebSocket tunnels, placed creates. */
export type ForwardKind = 'http' | 'websocket' | 'create';

/** How often a client stream that lost its owner node re-reads the directory for the session's fate. */
const FATE_POLL_MS = 500;

/**
 * One node of a cluster (`SERVICE_REDIS_URL` set): the Redis connections, the node registry, the session
 * directory, the shared catalogs and the BullMQ offline queue. `src/services.ts` uses these instead of
 * the LevelDB stores; `src/cluster/routing.ts` forwards requests for sessions other nodes own.
 */
export class ClusterNode {
  readonly redis;
  /** BullMQ's connection (its commands block, so they may not time out like the service's own). */
  private readonly bullRedis;
  readonly registry: NodeRegistry;
  readonly directory: SessionDirectory;
  readonly voices: RedisVoiceCatalog;
  readonly defaults: RedisDefaultsStore;
  /** This node's private directory under the shared data directory (its LevelDB and recordings). */
  readonly nodeDataDir: string;
  supervisor: SessionSupervisor | null = null;
  /** The key internal headers are signed with (src/cluster/internal-auth.ts); set by connect(). */
  secret = '';
  /** Requests this node forwarded, by kind (also `avatar_cluster_forwarded_requests_total` on /metrics). */
  readonly forwarded: Record<ForwardKind, number> = { http: 0, websocket: 0, create: 0 };
  private forwardCounter: Counter<'kind'> | null = null;
  private offline: ClusterOfflineQueue | null = null;
  private readonly fateWaiters = new Map<string, Set<() => void>>();
  private draining = false;
  private closed = false;

  constructor(
    readonly config: ServiceConfig,
    readonly cluster: ClusterConfig,
    private readonly logger: Logger,
  ) {
    this.redis = connectRedis(cluster.redisUrl);
    this.bullRedis = connectRedis(cluster.redisUrl, { forBullmq: true });
    for (const connection of [this.redis, this.bullRedis]) {
      // ioredis reconnects by itself; each failure is logged (never the URL: it may carry a password).
      connection.on('error', (error: Error) => logger.warn({ err: errorForLog(error) }, 'redis connection error'));
    }
    this.registry = new NodeRegistry({
      config: cluster,
      redis: this.redis,
      logger: logger.child({ component: 'cluster' }),
      tombstoneRetentionMs: config.tombstoneRetentionMs,
      load: () => this.load(),
      onSessionsLost: (ids) => this.sessionsLost(ids),
      onSelfLost: () => void this.selfLost(),
    });
    this.directory = new SessionDirectory(this.redis, this.registry.id);
    this.voices = new RedisVoiceCatalog(this.redis);
    this.defaults = new RedisDefaultsStore(this.redis);
    this.nodeDataDir = path.join(config.dataDir, 'nodes', this.registry.id);
  }

  get nodeId(): string {
    return this.registry.id;
  }

  /** Fails start-up (rather than serve without the cluster) when Redis cannot be reached. */
  async connect(): Promise<void> {
    await this.redis.ping();
    this.secret = await clusterSecret(this.redis, this.cluster.secret);
  }

  /** Another node's private directory on the shared data directory (a lost node's recordings are read there). */
  dataDirOf(nodeId: string): string {
    // Ids come from Redis: only a node id's shape may become a path.
    if (!/^[0-9a-f]{16}$/u.test(nodeId)) throw new Error('not a node id');
    return path.join(this.config.dataDir, 'nodes', nodeId);
  }

  /** Adds the forwarding counter to the service's Prometheus registry. */
  attachMetrics(registry: Registry): void {
    this.forwardCounter = new Counter({
      name: `${METRICS_PREFIX}cluster_forwarded_requests_total`,
      help: 'Requests this node forwarded to the node owning their session (cluster mode), by kind: http (SSE included), websocket, create',
      labelNames: ['kind'],
      registers: [registry],
    });
  }

  countForward(kind: ForwardKind): void {
    this.forwarded[kind]++;
    this.forwardCounter?.inc({ kind });
  }

  offlineQueue(deps: Omit<ClusterOfflineDeps, 'connection' | 'nodeId' | 'lockMs' | 'liveNodes'>): ClusterOfflineQueue {
    this.offline = new ClusterOfflineQueue({
      ...deps,
      connection: this.bullRedis,
      nodeId: this.nodeId,
      lockMs: Math.max(OFFLINE_LOCK_MIN_MS, this.cluster.nodeTtlMs),
      liveNodes: async () => (await this.registry.liveNodes()).length,
    });
    return this.offline;
  }

  /** Webhook deliveries on BullMQ: delivered once cluster-wide, by whichever node's worker takes each. */
  webhookQueue(deps: Omit<ClusterWebhookDeps, 'connection' | 'nodeId'>): ClusterWebhookQueue {
    return new ClusterWebhookQueue({ ...deps, connection: this.bullRedis, nodeId: this.nodeId });
  }

  /** Joins the cluster once the supervisor exists (its counts are the published load). */
  async start(supervisor: SessionSupervisor): Promise<void> {
    this.supervisor = supervisor;
    await this.registry.start();
  }

  /** Stops new placements on this node (shutdown): its hash stays until close so its sessions route. */
  drain(): void {
    this.draining = true;
    this.registry.publishSoon();
  }

  private load() {
    const supervisor = this.supervisor;
    const active = supervisor?.activeCount ?? 0;
    // Created sessions that are live; creations in flight are still counted by their reservation tokens.
    const pending = supervisor ? Math.max(0, supervisor.liveCount - active) : 0;
    const maxActive = this.config.maxSessions;
    this.offline?.setAccepting(active < maxActive);
    return {
      active,
      pending,
      maxActive,
      maxPending: this.config.maxPendingSessions,
      draining: this.draining || this.closed,
    };
  }

  /** Resolves when `sessionId` is reported lost (or after `ms`): what a forwarded SSE stream waits for. */
  async awaitFate(sessionId: string, ownerNode: string, ms: number): Promise<boolean> {
    const deadline = Date.now() + ms;
    let woken = false;
    const wake = () => (woken = true);
    const set = this.fateWaiters.get(sessionId) ?? new Set();
    set.add(wake);
    this.fateWaiters.set(sessionId, set);
    try {
      while (Date.now() < deadline && !this.closed) {
        if (woken) return true;
        const record = await this.directory.lookup(sessionId).catch(() => undefined);
        if (!record || record.state === 'terminated') return true;
        if (record.node === ownerNode && !(await this.registry.urlOf(ownerNode).catch(() => 'unknown'))) {
          await this.registry.reapIfLost(ownerNode).catch(() => undefined);
          continue;
        }
        await new Promise((resolve) => setTimeout(resolve, FATE_POLL_MS).unref());
      }
      return woken;
    } finally {
      set.delete(wake);
      if (set.size === 0) this.fateWaiters.delete(sessionId);
    }
  }

  private sessionsLost(ids: string[]): void {
    for (const id of ids) for (const wake of this.fateWaiters.get(id) ?? []) wake();
  }

  /** This node was silent past its TTL: sessions the others declared lost are closed here too. */
  private async selfLost(): Promise<void> {
    const supervisor = this.supervisor;
    if (!supervisor) return;
    for (const stored of await supervisor.liveIds()) {
      const record = await this.directory.lookup(stored).catch(() => undefined);
      if (record?.state === 'terminated') {
        await supervisor
          .terminate(stored, NODE_LOST)
          .catch((error: unknown) =>
            this.logger.warn({ sessionId: stored, err: errorForLog(error) }, 'lost session not closed'),
          );
      }
    }
  }

  async close(): Promise<void> {
    if (this.closed) return;
    await this.registry.close();
    this.closed = true;
    this.redis.disconnect();
    this.bullRedis.disconnect();
  }
}

export async function openCluster(config: ServiceConfig, logger: Logger): Promise<ClusterNode | null> {
  if (!config.cluster) return null;
  const node = new ClusterNode(config, config.cluster, logger);
  await node.connect();
  logger.info({ nodeId: node.nodeId }, 'cluster mode');
  return node;
}
