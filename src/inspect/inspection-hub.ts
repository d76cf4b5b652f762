import type { Writable } from 'node:stream';
import type { InspectionEvent } from 'xstate';
import { SSE_KEEPALIVE_MS, SSE_MAX_LAG_MS } from '../sessions/event-hub.ts';
import { SseFanout } from '../sessions/sse-fanout.ts';
import type { SessionInspection } from '../sessions/session-factory.ts';

/**
 * The live state inspector's feed. Each session actor is created with `inspect: hub.inspectorFor(id)`;
 * XState calls it for every actor created, event delivered and snapshot taken in the session's actor tree.
 * The hub turns those into small JSON records, keeps the last few per session (a late viewer sees the
 * current state at once) and fans them out to `GET /inspect/events` subscribers. It is development
 * tooling: records carry payload summaries with user text, so the inspector is off unless enabled.
 */

/** Records kept per session for viewers that connect later; enough for a few turns of history. */
export const INSPECT_HISTORY_PER_SESSION = 300;
/** Payload summaries are cut here: the inspector shows what happened, not whole transcripts. */
export const INSPECT_PAYLOAD_MAX_CHARS = 160;
/**
 * A viewer with this much unsent data is disconnected (its socket destroyed) rather than buffered without
 * bound: ~3000 records, ten sessions' worth of history, far more than a viewer that reads ever falls behind.
 */
export const INSPECT_MAX_BACKLOG_BYTES = 1024 * 1024;
/**
 * Viewers at once. The inspector is a developer's page (one stream per open tab); this many bound what viewers
 * can hold (each at most INSPECT_MAX_BACKLOG_BYTES) to a few MB. 200 non-reading viewers once held +160 MB.
 */
export const INSPECT_MAX_VIEWERS = 8;
/**
 * A viewer that was sent no record for this long is ended: an abandoned tab stops holding a socket. A page
 * still open reconnects (EventSource does) and is sent only the records it has not seen (`Last-Event-ID`).
 */
export const INSPECT_VIEWER_IDLE_MS = 10 * 60_000;
/** Sessions ended this long ago leave the hub (their records with them). */
export const INSPECT_TERMINATED_RETENTION_MS = 60_000;

export type InspectionKind = '@xstate.actor' | '@xstate.event' | '@xstate.snapshot';

export interface InspectionRecord {
  seq: number;
  at: number;
  session_id: string;
  type: InspectionKind;
  /** Actor path in the session's tree: `session`, `session/tts`, … */
  actor: string;
  /** @xstate.event: who sent it (`session/llm`, or `client` for events from outside the tree). */
  source?: string;
  /** @xstate.event / @xstate.snapshot: the event's type. */
  event?: string;
  /** @xstate.event: the event's other fields as short JSON. */
  payload?: string;
  /** @xstate.snapshot of the session actor: its state value, status and the ids of its live children. */
  value?: unknown;
  status?: string;
  children?: string[];
}

export interface InspectedSession {
  session_id: string;
  value: unknown;
  status: string;
  children: string[];
  updated_at: number;
  terminated_at: number | null;
}

interface ActorLike {
  id: string;
  sessionId: string;
  _parent?: ActorLike;
}

function actorPath(actor: ActorLike | undefined): string {
  if (!actor) return 'client';
  const parts: string[] = [];
  for (let current: ActorLike | undefined = actor; current; current = current._parent) {
    parts.unshift(current._parent ? current.id : 'session');
  }
  return parts.join('/');
}

function summarise(event: Record<string, unknown>): string | undefined {
  const { type: _type, ...rest } = event;
  if (Object.keys(rest).length === 0) return undefined;
  let text: string;
  try {
    text = JSON.stringify(rest, (_key, value: unknown) =>
      value instanceof Int16Array || value instanceof Uint8Array ? `<${value.length} samples>` : value,
    );
  } catch {
    text = '<unserialisable>';
  }
  return text.length > INSPECT_PAYLOAD_MAX_CHARS ? `${text.slice(0, INSPECT_PAYLOAD_MAX_CHARS - 1)}…` : text;
}

/** One record as an SSE message; its `id` lets a reconnecting viewer skip what it already has. */
function message(record: InspectionRecord): string {
  return `id: ${record.seq}\ndata: ${JSON.stringify(record)}\n\n`;
}

export class InspectionHub implements SessionInspection {
  private seq = 0;
  private readonly history = new Map<string, InspectionRecord[]>();
  private readonly sessions = new Map<string, InspectedSession>();
  private readonly viewers = new SseFanout<string | null>({
    maxLagMs: SSE_MAX_LAG_MS,
    maxBacklogBytes: INSPECT_MAX_BACKLOG_BYTES,
    keepaliveMs: SSE_KEEPALIVE_MS,
    idleMs: INSPECT_VIEWER_IDLE_MS,
  });
  private closed = false;

  constructor(readonly enabled: boolean) {}

  /** The `inspect` option for one session's actor, or undefined when the inspector is off (no cost at all). */
  inspectorFor(sessionId: string): ((event: InspectionEvent) => void) | undefined {
    if (!this.enabled) return undefined;
    return (event) => this.observe(sessionId, event);
  }

  /** Live and recently ended sessions with their current state, newest first. */
  list(): InspectedSession[] {
    this.forgetEnded();
    return [...this.sessions.values()].sort((a, b) => b.updated_at - a.updated_at);
  }

  /** The buffered records (one session's, or the newest of all sessions as much as one session keeps). */
  recent(sessionId: string | null): InspectionRecord[] {
    if (sessionId) return this.history.get(sessionId) ?? [];
    return [...this.history.values()]
      .flat()
      .sort((a, b) => a.seq - b.seq)
      .slice(-INSPECT_HISTORY_PER_SESSION);
  }

  /** Viewers streaming now; `attach` refuses more than INSPECT_MAX_VIEWERS. */
  get viewerCount(): number {
    return this.viewers.size;
  }

  get full(): boolean {
    return this.viewers.size >= INSPECT_MAX_VIEWERS;
  }

  /** Marks the session ended (its actor is gone); it stays listed for a while so a viewer sees the end. */
  ended(sessionId: string): void {
    const session = this.sessions.get(sessionId);
    if (session && session.terminated_at === null) session.terminated_at = Date.now();
  }

  /**
   * Streams records (optionally one session's) as SSE `id:`/`data:` messages, starting with what is buffered
   * after `afterSeq` (a reconnecting EventSource's Last-Event-ID). The caller checks `full` first.
   */
  attach(out: Writable, sessionId: string | null, afterSeq = 0): void {
    if (this.closed) {
      out.end();
      return;
    }
    const viewer = this.viewers.attach(out, sessionId);
    if (!viewer) return;
    for (const record of this.recent(sessionId)) if (record.seq > afterSeq) this.viewers.send(viewer, message(record));
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.viewers.close();
  }

  private observe(sessionId: string, event: InspectionEvent): void {
    if (this.closed) return;
    if (!this.history.has(sessionId)) this.forgetEnded();
    const base = { seq: ++this.seq, at: Date.now(), session_id: sessionId };
    let record: InspectionRecord | null = null;
    const actor = event.actorRef as unknown as ActorLike;
    if (event.type === '@xstate.actor') {
      record = { ...base, type: event.type, actor: actorPath(actor) };
    } else if (event.type === '@xstate.event') {
      const payload = summarise(event.event as Record<string, unknown>);
      record = {
        ...base,
        type: event.type,
        actor: actorPath(actor),
        source: actorPath(event.sourceRef as unknown as ActorLike | undefined),
        event: event.event.type,
        ...(payload ? { payload } : {}),
      };
    } else if (event.type === '@xstate.snapshot') {
      const snapshot = event.snapshot as { value?: unknown; status?: string; children?: Record<string, unknown> };
      const path = actorPath(actor);
      record = { ...base, type: event.type, actor: path, event: event.event.type, status: snapshot.status };
      if (path === 'session') {
        record.value = snapshot.value;
        record.children = Object.keys(snapshot.children ?? {});
        this.sessions.set(sessionId, {
          session_id: sessionId,
          value: snapshot.value,
          status: snapshot.status ?? 'active',
          children: record.children,
          updated_at: base.at,
          terminated_at: snapshot.status === 'active' ? null : (this.sessions.get(sessionId)?.terminated_at ?? base.at),
        });
      }
    }
    if (!record) return;
    let list = this.history.get(sessionId);
    if (!list) this.history.set(sessionId, (list = []));
    list.push(record);
    if (list.length > INSPECT_HISTORY_PER_SESSION) list.splice(0, list.length - INSPECT_HISTORY_PER_SESSION);
    this.viewers.publish(message(record), (filter) => filter === null || filter === sessionId);
  }

  private forgetEnded(): void {
    const cutoff = Date.now() - INSPECT_TERMINATED_RETENTION_MS;
    for (const [id, session] of this.sessions) {
      if (session.terminated_at !== null && session.terminated_at < cutoff) {
        this.sessions.delete(id);
        this.history.delete(id);
      }
    }
  }
}
