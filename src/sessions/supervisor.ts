import type { SessionRecords, StoredSession } from '../store/sessions.ts';
import { Overloaded, InvalidInput, SessionNotFound, SessionTerminated } from '../domain-errors.ts';
import { SessionFactory, type CreateSessionInput, type SessionFactoryDeps } from './session-factory.ts';
import type { Session } from './session.ts';
import { errorForLog } from '../logger.ts';
import type { WebhookEvents } from '../webhooks/events.ts';
import { transcriptBody, type SessionTranscripts, type TranscriptPage } from './transcript.ts';

/** How often expired tombstones are swept from LevelDB. */
const TOMBSTONE_SWEEP_MS = 60_000;
/** Retry-After of a full cap: a slot frees whenever a session starts, ends or expires, so a few seconds is a fair guess. */
const CAPACITY_RETRY_AFTER_S = 5;
/**
 * Orphan checks run every quarter of SERVICE_ORPHAN_TIMEOUT_S (so a session is reaped at most 25 % late),
 * but at least this often: a watched consumer (a peer connection) is only seen at a check.
 */
const ORPHAN_CHECK_MAX_MS = 5_000;
/** Tombstone reasons the service counts (`GET /metrics`). */
export const ORPHANED = 'orphaned';
export const NOT_STARTED_IN_TIME = 'not started in time';

/** A service shutting down refuses like a full one: the client retries, and reaches the restarted service or another node. */
const shuttingDown = () => new Overloaded('service is shutting down', CAPACITY_RETRY_AFTER_S);

/** The factory's parts plus where sessions and tombstones are stored. */
export interface SupervisorDeps extends SessionFactoryDeps {
  store: SessionRecords;
  /** Each session's transcript, kept with its tombstone (`GET /sessions/{id}/transcript`). */
  transcripts?: SessionTranscripts;
  /** The webhook events of sessions (`session.started`, `session.terminated`, `turn.completed`). */
  webhooks?: WebhookEvents;
}

/** Sessions terminated since the service started, by the reasons it decides itself. */
export interface TerminationCounters {
  orphaned: number;
  not_started_in_time: number;
}

/**
 * Owns every live session (one supervised actor each) and the tombstones of terminated ones.
 * Admission: `create` takes a pending slot (`SERVICE_MAX_PENDING_SESSIONS`) and `start` an active one
 * (`SERVICE_MAX_SESSIONS`), each in one synchronous step before any `await`, so no interleaving of
 * concurrent requests can exceed either cap. Started sessions nobody uses are reaped (`SERVICE_ORPHAN_TIMEOUT_S`).
 */
export class SessionSupervisor {
  private readonly live = new Map<string, Session>();
  /**
   * Sessions being torn down: out of `live` (no new work reaches them) but their tombstone not yet
   * stored. Reads answer from the tombstone here, so no client sees the last live state between a
   * DELETE and its write; a second DELETE waits for the first.
   */
  private readonly closing = new Map<string, { tombstone: StoredSession; done: Promise<void> }>();
  /** `POST /sessions` calls past admission but not yet live: they hold pending slots. */
  private creating = 0;
  private sweepTimer: NodeJS.Timeout | null = null;
  /** Runs only while some session is started (a created session costs no timer but its start timeout). */
  private orphanTimer: NodeJS.Timeout | null = null;
  private closed = false;
  readonly terminations: TerminationCounters = { orphaned: 0, not_started_in_time: 0 };

  /** Builds each session's parts; the supervisor admits, stores, supervises and reaps what it builds. */
  private readonly factory: SessionFactory;

  constructor(private readonly deps: SupervisorDeps) {
    this.factory = new SessionFactory(deps);
  }

  /** After a restart, sessions that were live are reported terminated (their media is gone), not lost. */
  async recover(): Promise<void> {
    const now = new Date();
    for (const stored of await this.deps.store.all()) {
      if (stored.state !== 'terminated') {
        const tombstone = this.deps.store.tombstoneOf(
          stored,
          this.deps.config.tombstoneRetentionMs,
          'service restarted',
          now,
        );
        await this.deps.store.put(tombstone);
        // Its transcript stays as long as the tombstone; receivers learn it ended (it could not tell them before).
        await this.deps.transcripts?.expireWith(stored.session_id, tombstone.expires_at);
        await this.deps.webhooks?.sessionTerminated(stored, 'service restarted');
      } else if (stored.expires_at && Date.parse(stored.expires_at) <= now.getTime()) {
        await this.deps.store.delete(stored.session_id);
      }
    }
    await this.sweepTranscripts();
    this.sweepTimer = setInterval(() => void this.sweepTombstones(), TOMBSTONE_SWEEP_MS);
    this.sweepTimer.unref();
  }

  get activeCount(): number {
    let count = 0;
    for (const session of this.live.values()) if (session.state === 'running' || session.state === 'paused') count++;
    return count;
  }

  get liveCount(): number {
    return this.live.size;
  }

  /** Sessions created but not started, plus creations in flight: what SERVICE_MAX_PENDING_SESSIONS bounds. */
  get pendingCount(): number {
    let count = this.creating;
    for (const session of this.live.values()) if (session.state === 'created') count++;
    return count;
  }

  get pendingCapacity(): number {
    return this.deps.config.maxPendingSessions;
  }

  get capacity(): number {
    return this.deps.config.maxSessions;
  }

  /** Live sessions by state, with `creating` for `POST /sessions` calls in progress (`avatar_sessions`). */
  sessionsByState(): Record<string, number> {
    const counts: Record<string, number> = { creating: this.creating };
    for (const session of this.live.values()) counts[session.state] = (counts[session.state] ?? 0) + 1;
    return counts;
  }

  /** Frames sent and late so far, and connected peers, over the live sessions (`avatar_frames_*`). */
  liveFrames(): { sent: number; late: number; peers: number } {
    const totals = { sent: 0, late: 0, peers: 0 };
    for (const session of this.live.values()) {
      const frames = session.frameCounts;
      totals.sent += frames.sent;
      totals.late += frames.late;
      if (session.peerConnected) totals.peers++;
    }
    return totals;
  }

  /** Ids of the sessions this process holds (cluster mode checks them against the directory). */
  liveIds(): string[] {
    return [...this.live.keys()];
  }

  liveSession(sessionId: string): Session | undefined {
    return this.live.get(sessionId);
  }

  /** A live session, else `SessionNotFound`; tombstones are `SessionTerminated`. Every REST call on a session passes here and counts as activity. */
  async requireSession(sessionId: string): Promise<Session> {
    const session = this.live.get(sessionId);
    if (session) {
      session.touch();
      return session;
    }
    if (this.closing.has(sessionId)) throw new SessionTerminated();
    const stored = await this.deps.store.get(sessionId);
    if (stored) throw new SessionTerminated();
    throw new SessionNotFound();
  }

  /**
   * The session's transcript as its JSON body (`{session_id, turns}`, its newest turns or one page of them), live or
   * kept with its tombstone; `SessionNotFound` otherwise.
   */
  async transcript(sessionId: string, page: TranscriptPage = {}): Promise<Buffer> {
    const session = this.live.get(sessionId);
    if (session) session.touch();
    const exists = async () =>
      session !== undefined || this.closing.has(sessionId) || (await this.deps.store.get(sessionId)) !== undefined;
    // An unknown session is 404 before anything is said about its pages.
    if (page.after !== undefined && !(await exists())) throw new SessionNotFound();
    const body = await this.deps.transcripts?.read(sessionId, page);
    if (body !== undefined) return body;
    if (await exists()) return transcriptBody(sessionId, []);
    throw new SessionNotFound();
  }

  async describe(sessionId: string): Promise<StoredSession & { pipeline: string }> {
    const session = this.live.get(sessionId);
    if (session) {
      session.touch();
      return { ...session.record, state: session.state, pipeline: session.pipelineStage };
    }
    const stored = this.closing.get(sessionId)?.tombstone ?? (await this.deps.store.get(sessionId));
    if (!stored) throw new SessionNotFound();
    return { ...stored, pipeline: 'idle' };
  }

  async create(input: CreateSessionInput): Promise<Session> {
    const { config } = this.deps;
    // Each created session holds a renderer; unstarted ones must not pile up without bound. The slot is
    // taken here, before the first await, and handed over when the session goes live (or given back on failure).
    if (this.closed) throw shuttingDown();
    if (input.webhook_url) {
      if (!this.deps.webhooks) throw new InvalidInput('webhook_url is not supported by this service');
      this.deps.webhooks.assertCallbackUrl(input.webhook_url);
    }
    if (this.pendingCount >= config.maxPendingSessions) {
      throw new Overloaded(
        `too many sessions created but not started (${config.maxPendingSessions}); start or delete some, or retry later`,
        CAPACITY_RETRY_AFTER_S,
      );
    }
    this.creating++;
    let reserved = true;
    const release = () => {
      if (!reserved) return;
      reserved = false;
      this.creating--;
    };
    try {
      return await this.createReserved(input, release);
    } finally {
      release();
    }
  }

  /** `create` past admission; calls `release` in the same synchronous step that makes the session live. */
  private async createReserved(input: CreateSessionInput, release: () => void): Promise<Session> {
    const { config } = this.deps;
    const session = await this.factory.assemble(input);
    const { id: sessionId, record: stored } = session;
    const logger = session.log;
    try {
      await this.deps.store.put(stored);
      // Shut down while this one was being set up: closeAll has already run, so nobody would close it.
      if (this.closed) throw shuttingDown();
    } catch (error) {
      await session.close();
      throw error;
    }
    this.live.set(sessionId, session);
    release();
    if (this.deps.transcripts)
      session.keepTranscript(
        this.deps.transcripts,
        (turn) => void this.deps.webhooks?.turnCompleted(session.record, turn),
      );
    // An unrecoverable stage error terminates the machine by itself; keep the tombstone rules the same.
    session.onTerminated(() =>
      setImmediate(() =>
        // Nobody awaits this: a failing tombstone write must be logged, not left as an unhandled rejection.
        this.reap(sessionId, 'unrecoverable error').catch((error: unknown) =>
          logger.error({ err: errorForLog(error) }, 'terminated session not reaped'),
        ),
      ),
    );
    // A session nobody starts is an abandoned one: release it after the documented time.
    const startTimer = setTimeout(() => {
      if (session.state !== 'created' || !this.live.has(sessionId)) return;
      this.terminations.not_started_in_time++;
      this.terminate(sessionId, NOT_STARTED_IN_TIME).catch((error: unknown) =>
        logger.error({ err: errorForLog(error) }, 'unstarted session not reaped'),
      );
    }, config.startTimeoutMs);
    startTimer.unref();
    session.onTerminated(() => clearTimeout(startTimer));
    logger.info(
      { avatarId: stored.avatar_id, model: stored.model, ttsProvider: stored.tts_provider },
      'session created',
    );
    return session;
  }

  async start(sessionId: string): Promise<void> {
    const session = await this.requireSession(sessionId);
    // From here to START is one synchronous step: the session counts as active the moment it passes the
    // check, so concurrent starts of different sessions cannot together exceed SERVICE_MAX_SESSIONS. The
    // machine answers first (a started session is a 409 even at capacity).
    session.assertAdmits('START');
    if (this.activeCount >= this.deps.config.maxSessions) {
      throw new Overloaded(
        `session capacity reached (${this.deps.config.maxSessions} active); retry later`,
        CAPACITY_RETRY_AFTER_S,
      );
    }
    session.start();
    this.watchForOrphans();
    await this.persistState(session);
    await this.deps.webhooks?.sessionStarted(session.record);
  }

  async pause(sessionId: string): Promise<void> {
    const session = await this.requireSession(sessionId);
    session.pause();
    await this.persistState(session);
  }

  async resume(sessionId: string): Promise<void> {
    const session = await this.requireSession(sessionId);
    session.resume();
    await this.persistState(session);
  }

  /** DELETE: tears the session down and keeps a tombstone. Deleting a tombstone is a no-op that still answers. */
  async terminate(sessionId: string, reason = 'deleted by client'): Promise<void> {
    const session = this.live.get(sessionId);
    if (!session) {
      const closing = this.closing.get(sessionId);
      if (closing) return closing.done;
      if (await this.deps.store.get(sessionId)) return;
      throw new SessionNotFound();
    }
    this.live.delete(sessionId);
    // In the same step as leaving `live`: the service's frame counters never go backwards.
    this.deps.metrics?.sessionEnded(reason, session.frameCounts);
    const tombstone = this.deps.store.tombstoneOf(session.record, this.deps.config.tombstoneRetentionMs, reason);
    const done = this.tearDown(session, tombstone);
    this.closing.set(sessionId, { tombstone, done });
    try {
      await done;
    } finally {
      this.closing.delete(sessionId);
    }
  }

  private async tearDown(session: Session, tombstone: StoredSession): Promise<void> {
    await session.close();
    this.deps.inspection?.ended(session.id);
    await this.deps.store.put(tombstone);
    await this.deps.transcripts?.retain(session.id, tombstone.expires_at);
    await this.deps.webhooks?.sessionTerminated(session.record, tombstone.terminated_reason ?? 'terminated');
    session.log.info({ reason: tombstone.terminated_reason }, 'session terminated');
  }

  /** Called when a session's machine terminated on its own (unrecoverable error). */
  async reap(sessionId: string, reason: string): Promise<void> {
    if (this.live.has(sessionId)) await this.terminate(sessionId, reason);
  }

  async persistState(session: Session): Promise<void> {
    // A session torn down meanwhile has its tombstone written; its last live state must not overwrite it.
    if (this.live.get(session.id) !== session) return;
    await this.deps.store.put(session.recordState());
  }

  async closeAll(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.sweepTimer) clearInterval(this.sweepTimer);
    if (this.orphanTimer) clearInterval(this.orphanTimer);
    this.orphanTimer = null;
    // Teardowns already under way (a DELETE just before shutdown) finish too: their tombstones need the store open.
    const underway = [...this.closing.values()].map(({ done }) => done.catch(() => undefined));
    await Promise.all([...[...this.live.keys()].map((id) => this.terminate(id, 'service shutting down')), ...underway]);
  }

  /** Starts the orphan check if it is enabled and not running; it stops itself when no session is started. */
  private watchForOrphans(): void {
    const timeoutMs = this.deps.config.orphanTimeoutMs;
    if (timeoutMs <= 0 || this.orphanTimer || this.closed) return;
    this.orphanTimer = setInterval(() => this.reapOrphans(), Math.min(ORPHAN_CHECK_MAX_MS, timeoutMs / 4));
    this.orphanTimer.unref();
  }

  /** Terminates every started session that had no consumer for SERVICE_ORPHAN_TIMEOUT_S (a closed tab, a crashed client). */
  private reapOrphans(): void {
    const timeoutMs = this.deps.config.orphanTimeoutMs;
    let started = 0;
    for (const [sessionId, session] of this.live) {
      if (session.state !== 'running' && session.state !== 'paused') continue;
      started++;
      const logger = session.log;
      const idleMs = session.idleMs();
      if (idleMs < timeoutMs) continue;
      this.terminations.orphaned++;
      logger.info({ idleS: Math.round(idleMs / 1000), timeoutS: timeoutMs / 1000 }, 'session orphaned');
      // terminate() removes it from `live` synchronously, so the next check cannot reap it twice.
      this.terminate(sessionId, ORPHANED).catch((error: unknown) =>
        logger.error({ err: errorForLog(error) }, 'orphaned session not reaped'),
      );
    }
    if (started === 0 && this.orphanTimer) {
      clearInterval(this.orphanTimer);
      this.orphanTimer = null;
    }
  }

  /** Transcripts live exactly as long as their tombstone (a crash between the two deletes leaves one behind). */
  private async sweepTranscripts(): Promise<void> {
    await this.deps.transcripts?.sweep(
      async ({ session_id }) => this.live.has(session_id) || (await this.deps.store.get(session_id)) !== undefined,
    );
  }

  private async sweepTombstones(): Promise<void> {
    const now = Date.now();
    try {
      for (const stored of await this.deps.store.all()) {
        if (stored.state === 'terminated' && stored.expires_at && Date.parse(stored.expires_at) <= now) {
          await this.deps.store.delete(stored.session_id);
          await this.deps.transcripts?.remove(stored.session_id);
        }
      }
      // Tombstones another node (or a restart) removed take their transcripts here too.
      await this.sweepTranscripts();
    } catch (error) {
      this.deps.logger.warn({ err: errorForLog(error) }, 'tombstone sweep failed');
    }
  }
}
