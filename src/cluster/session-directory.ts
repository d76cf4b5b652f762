import type { Redis } from 'ioredis';
import { SessionStore, type StoredSession } from '../store/sessions.ts';
import { nodeSessionsKey, sessionKey } from './scripts.ts';

/** A directory record: the stored session plus the node that owns (renders) it. */
export type DirectoryRecord = StoredSession & { node: string };

/**
 * The session directory: the session store of cluster mode. Each record is one Redis string
 * (`avs:s:<id>`, the stored session plus its owner node), so any node can describe any session and find
 * its owner; a node's live sessions are indexed in `avs:ns:<node>` (what the reap script terminates when
 * the node is lost). A tombstone is the same key with a TTL of the retention time, out of the index.
 * Only the owner writes a live record; `all()` lists this node's own live sessions, which is what the
 * supervisor's restart recovery and tombstone sweep work on.
 */
export class SessionDirectory {
  constructor(
    private readonly redis: Redis,
    readonly nodeId: string,
  ) {}

  /** The record with its owner, for routing. */
  async lookup(sessionId: string): Promise<DirectoryRecord | undefined> {
    const raw = await this.redis.get(sessionKey(sessionId));
    return raw ? (JSON.parse(raw) as DirectoryRecord) : undefined;
  }

  async get(sessionId: string): Promise<StoredSession | undefined> {
    const record = await this.lookup(sessionId);
    if (!record) return undefined;
    const { node: _node, ...stored } = record;
    return stored;
  }

  async put(session: StoredSession): Promise<void> {
    const record: DirectoryRecord = { ...session, node: this.nodeId };
    const key = sessionKey(session.session_id);
    if (session.state === 'terminated') {
      const ttlMs = session.expires_at ? Date.parse(session.expires_at) - Date.now() : 0;
      const multi = this.redis.multi().srem(nodeSessionsKey(this.nodeId), session.session_id);
      if (ttlMs >= 1) multi.set(key, JSON.stringify(record), 'PX', Math.ceil(ttlMs));
      else multi.del(key);
      await multi.exec();
      return;
    }
    await this.redis
      .multi()
      .set(key, JSON.stringify(record))
      .sadd(nodeSessionsKey(this.nodeId), session.session_id)
      .exec();
  }

  async delete(sessionId: string): Promise<void> {
    await this.redis.multi().del(sessionKey(sessionId)).srem(nodeSessionsKey(this.nodeId), sessionId).exec();
  }

  /** This node's live sessions. */
  async all(): Promise<StoredSession[]> {
    const ids = await this.redis.smembers(nodeSessionsKey(this.nodeId));
    if (ids.length === 0) return [];
    const raws = await this.redis.mget(ids.map(sessionKey));
    const out: StoredSession[] = [];
    for (const [i, raw] of raws.entries()) {
      if (!raw) {
        await this.redis.srem(nodeSessionsKey(this.nodeId), ids[i]);
        continue;
      }
      const { node: _node, ...stored } = JSON.parse(raw) as DirectoryRecord;
      out.push(stored);
    }
    return out;
  }

  tombstoneOf(session: StoredSession, retentionMs: number, reason: string, now = new Date()): StoredSession {
    return SessionStore.prototype.tombstoneOf.call(null, session, retentionMs, reason, now);
  }
}
