import { createHash, randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import type { Logger } from 'pino';
import type { ClusterConfig } from '../config.ts';
import { errorForLog } from '../logger.ts';
import {
  BEATS_KEY,
  EXPIRED_LUA,
  HEARTBEAT_LUA,
  LOST_CHANNEL,
  NODES_KEY,
  PLACE_LUA,
  REAP_LUA,
  SLOT_CLAIM_LUA,
  SLOT_RELEASE_LUA,
  VOICE_CREATE_LUA,
  nodeKey,
  reservationsKey,
} from './scripts.ts';
import { SLOT_COUNT, sessionIdForSlot } from './slots.ts';

/** A Redis command that takes longer than this fails (the request answers 503) instead of hanging a request. */
export const REDIS_COMMAND_TIMEOUT_MS = 5_000;
/** Heartbeats per TTL: two can be lost (a slow Redis, a GC pause) before the node counts as lost. */
const HEARTBEATS_PER_TTL = 3;
/**
 * A reservation made by placement lives this long: enough for the forwarded `POST /sessions` to reach
 * the chosen node and for that node's next load publication; an unused one stops counting after it.
 */
export const RESERVATION_TTL_MS = 30_000;

/** What a node publishes about itself (the node hash). */
export interface NodeLoad {
  active: number;
  pending: number;
  maxActive: number;
  maxPending: number;
  draining: boolean;
}

export interface NodeInfo {
  id: string;
  url: string;
}

type ClusterRedis = Redis & {
  avsPlace(token: string, ttlMs: number, only: string, skip: string): Promise<string | null>;
  avsHeartbeat(...args: Array<string | number>): Promise<[number, number]>;
  avsSlotClaim(nodeId: string, ttlMs: number, wanted: string, count: number): Promise<number>;
  avsSlotRelease(slot: number, nodeId: string): Promise<number>;
  avsReap(nodeId: string, retentionMs: number, nowIso: string, expiresIso: string): Promise<string[]>;
  avsVoiceCreate(entryJson: string): Promise<number>;
  avsExpired(): Promise<string[]>;
};

/** The node's id: derived from its URL, so a restarted node finds (and closes) the sessions it owned. */
export function nodeIdOf(nodeUrl: string): string {
  return createHash('sha256').update(nodeUrl).digest('hex').slice(0, 16);
}

export function connectRedis(url: string, options: { forBullmq?: boolean } = {}): ClusterRedis {
  const redis = new Redis(url, {
    // BullMQ's blocking connections must retry forever; the service's own commands fail fast instead.
    maxRetriesPerRequest: options.forBullmq ? null : 2,
    commandTimeout: options.forBullmq ? undefined : REDIS_COMMAND_TIMEOUT_MS,
    enableOfflineQueue: true,
    lazyConnect: false,
  }) as ClusterRedis;
  redis.defineCommand('avsPlace', { numberOfKeys: 0, lua: PLACE_LUA });
  redis.defineCommand('avsHeartbeat', { numberOfKeys: 0, lua: HEARTBEAT_LUA });
  redis.defineCommand('avsReap', { numberOfKeys: 0, lua: REAP_LUA });
  redis.defineCommand('avsVoiceCreate', { numberOfKeys: 0, lua: VOICE_CREATE_LUA });
  redis.defineCommand('avsExpired', { numberOfKeys: 0, lua: EXPIRED_LUA });
  redis.defineCommand('avsSlotClaim', { numberOfKeys: 0, lua: SLOT_CLAIM_LUA });
  redis.defineCommand('avsSlotRelease', { numberOfKeys: 0, lua: SLOT_RELEASE_LUA });
  return redis;
}

export interface NodeRegistryDeps {
  config: ClusterConfig;
  redis: ClusterRedis;
  logger: Logger;
  /** This node's current load, read at every publication. */
  load(): NodeLoad;
  /** Tombstone retention (SERVICE_SESSION_TOMBSTONE_MS) for the sessions of a lost node. */
  tombstoneRetentionMs: number;
  /** Sessions of a lost node were terminated (by whichever node reaped it); called on every node. */
  onSessionsLost(sessionIds: string[], nodeId: string): void;
  /** This node itself was silent past its TTL: the others may have terminated its sessions. */
  onSelfLost(): void;
}

/**
 * Registration, heartbeat and load of this node; placement of new sessions; detection of lost nodes.
 * Every node checks every heartbeat for nodes whose hash expired and runs the reap script on them; the
 * script is atomic and idempotent, so the nodes need no leader.
 */
export class NodeRegistry {
  readonly id: string;
  readonly url: string;
  private timer: NodeJS.Timeout | null = null;
  private subscriber: Redis | null = null;
  private registered = false;
  private closed = false;
  /** Reservation tokens whose sessions are now counted in this node's `pending`: removed with the next publication. */
  private consumed: string[] = [];
  /** Publications in issue order: a later snapshot can never be overwritten by an earlier one. */
  private chain: Promise<void> = Promise.resolve();
  private publishQueued = false;
  private readonly urls = new Map<string, { url: string; at: number }>();
  /** This node's routing slot (claimed at start): the first three hex digits of the session ids it creates. */
  private slotNumber: number | null = null;

  constructor(private readonly deps: NodeRegistryDeps) {
    this.url = deps.config.nodeUrl;
    this.id = nodeIdOf(this.url);
  }

  get intervalMs(): number {
    return Math.floor(this.deps.config.nodeTtlMs / HEARTBEATS_PER_TTL);
  }

  /** The routing slot this node holds; throws before start. */
  get slot(): number {
    if (this.slotNumber === null) throw new Error('node has no routing slot before start');
    return this.slotNumber;
  }

  /** A new session id (UUID4) that carries this node's routing slot (src/cluster/slots.ts). */
  newSessionId(): string {
    return sessionIdForSlot(this.slot);
  }

  /**
   * Claims the routing slot (SERVICE_NODE_SLOT, or the lowest free one) in one script, so two live nodes
   * never hold the same slot. A wanted slot another live node holds fails start-up.
   */
  private async claimSlot(wanted: number | null): Promise<number> {
    const slot = Number(
      await this.deps.redis.avsSlotClaim(
        this.id,
        this.deps.config.nodeTtlMs,
        wanted === null ? '' : String(wanted),
        SLOT_COUNT,
      ),
    );
    if (slot < 0) {
      throw new Error(
        wanted === null
          ? 'every routing slot is held by a live node'
          : `routing slot ${wanted} (SERVICE_NODE_SLOT) is held by another live node`,
      );
    }
    return slot;
  }

  /** Registers the node, subscribes to loss announcements and starts the heartbeat. */
  async start(): Promise<void> {
    this.slotNumber = await this.claimSlot(this.deps.config.nodeSlot);
    this.deps.logger.info({ nodeId: this.id, slot: this.slotNumber }, 'routing slot claimed');
    this.subscriber = this.deps.redis.duplicate();
    this.subscriber.on('error', (error) =>
      this.deps.logger.warn({ err: errorForLog(error) }, 'redis subscriber error'),
    );
    await this.subscriber.subscribe(LOST_CHANNEL);
    this.subscriber.on('message', (_channel: string, message: string) => {
      try {
        const parsed = JSON.parse(message) as { node: string; sessions: string[] };
        if (Array.isArray(parsed.sessions)) this.deps.onSessionsLost(parsed.sessions, parsed.node);
      } catch {
        // Not ours: ignored.
      }
    });
    await this.publishNow();
    this.timer = setInterval(() => void this.tick(), this.intervalMs);
    this.timer.unref();
  }

  /** Publishes the load soon (after a create, start or delete), coalescing bursts into one write. */
  publishSoon(consumedToken?: string): void {
    if (consumedToken) this.consumed.push(consumedToken);
    if (this.publishQueued || this.closed) return;
    this.publishQueued = true;
    setImmediate(() => {
      this.publishQueued = false;
      this.publishNow().catch((error: unknown) =>
        this.deps.logger.warn({ err: errorForLog(error) }, 'node load not published'),
      );
    });
  }

  /** Writes the load (and drops consumed reservations) after every earlier publication. */
  publishNow(): Promise<void> {
    const run = this.chain.then(async () => {
      if (this.closed) return;
      const load = this.deps.load();
      const tokens = this.consumed;
      this.consumed = [];
      const [existed, slotHeld] = await this.deps.redis.avsHeartbeat(
        this.id,
        this.deps.config.nodeTtlMs,
        this.url,
        load.maxActive,
        load.maxPending,
        load.active,
        load.pending,
        load.draining ? 1 : 0,
        this.slot,
        ...tokens,
      );
      if (slotHeld === 0) {
        // Silent past its TTL, another node took the slot: new sessions carry a free one (old ones are forwarded).
        const previous = this.slot;
        this.slotNumber = await this.claimSlot(null);
        this.deps.logger.warn(
          { nodeId: this.id, previous, slot: this.slotNumber },
          'routing slot lost; another claimed',
        );
      }
      if (existed === 0 && this.registered) {
        this.deps.logger.warn(
          { nodeId: this.id },
          'node heartbeat had expired; its sessions may have been declared lost',
        );
        this.deps.onSelfLost();
      }
      this.registered = true;
    });
    this.chain = run.catch(() => undefined);
    return run;
  }

  /**
   * Reserves a slot on the least-loaded node with room (or only on `onlyNode`); the token goes with the
   * forwarded request and is dropped by that node's next publication. null when no node has room.
   */
  async place(onlyNode?: string, skip: string[] = []): Promise<{ nodeId: string; token: string } | null> {
    const token = randomUUID();
    const nodeId = await this.deps.redis.avsPlace(token, RESERVATION_TTL_MS, onlyNode ?? '', skip.join(' '));
    return nodeId ? { nodeId, token } : null;
  }

  /** Gives back a reservation that was not used (the forwarded create failed before the node saw it). */
  async release(nodeId: string, token: string): Promise<void> {
    await this.deps.redis.zrem(reservationsKey(nodeId), token);
  }

  /** A live node's URL; null when its heartbeat has expired. Cached for a fraction of the TTL. */
  async urlOf(nodeId: string): Promise<string | null> {
    if (nodeId === this.id) return this.url;
    const cached = this.urls.get(nodeId);
    if (cached && Date.now() - cached.at < this.intervalMs) return cached.url;
    const url = await this.deps.redis.hget(nodeKey(nodeId), 'url');
    if (url) this.urls.set(nodeId, { url, at: Date.now() });
    else this.urls.delete(nodeId);
    return url;
  }

  /** Reaps `nodeId` now if its heartbeat has expired (a request found its session's owner gone). */
  async reapIfLost(nodeId: string): Promise<string[]> {
    if (nodeId === this.id) return [];
    const now = new Date();
    const retention = Math.max(1, this.deps.tombstoneRetentionMs);
    const lost = await this.deps.redis.avsReap(
      nodeId,
      retention,
      now.toISOString(),
      new Date(now.getTime() + retention).toISOString(),
    );
    if (lost.length > 0)
      this.deps.logger.warn({ nodeId, sessions: lost.length }, 'node lost; its sessions are terminated');
    return lost;
  }

  async liveNodes(): Promise<string[]> {
    const ids = await this.deps.redis.smembers(NODES_KEY);
    const exists = await Promise.all(ids.map((id) => this.deps.redis.exists(nodeKey(id))));
    return ids.filter((_, i) => exists[i] === 1);
  }

  private async tick(): Promise<void> {
    try {
      await this.publishNow();
      // One range query per tick whatever the cluster size; usually empty.
      for (const id of await this.deps.redis.avsExpired()) await this.reapIfLost(id);
    } catch (error) {
      this.deps.logger.warn({ err: errorForLog(error) }, 'cluster heartbeat failed');
    }
  }

  /** Leaves the cluster: the node hash goes at once (its sessions were closed and tombstoned before). */
  async close(): Promise<void> {
    if (this.closed) return;
    if (this.timer) clearInterval(this.timer);
    await this.chain;
    this.closed = true;
    try {
      await this.deps.redis
        .multi()
        .del(nodeKey(this.id))
        .srem(NODES_KEY, this.id)
        .zrem(BEATS_KEY, this.id)
        .del(reservationsKey(this.id))
        .exec();
      if (this.slotNumber !== null) await this.deps.redis.avsSlotRelease(this.slotNumber, this.id);
    } catch (error) {
      this.deps.logger.warn({ err: errorForLog(error) }, 'node not deregistered');
    }
    this.subscriber?.disconnect();
  }
}
