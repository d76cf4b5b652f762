import type { Writable } from 'node:stream';
import type { StageEventMap } from '../../actors/stage/ports.ts';
import type { SessionBus } from './session-bus.ts';

/** Spec 6.1 rule 4: a consumer this far behind may be disconnected; others are unaffected. */
export const SSE_MAX_LAG_MS = 5_000;
/** Keeps idle proxies from closing the stream; comments are ignored by EventSource. */
export const SSE_KEEPALIVE_MS = 15_000;

/** The spec events (6.1): those the stage actors publish (`StageEventMap`) and the session's own. */
export interface SessionEventMap extends StageEventMap {
  frame: { frame_idx: number; pts_ms: number };
  /** `turn_id`: the machine's turn when it emitted the status (the hub adds it to the other turn events). */
  status: { stage: string; message?: string; turn_id?: string };
  error: { code: string; message: string };
  'session.terminated': Record<string, never>;
}
export type SessionEventType = keyof SessionEventMap;
export type SessionEventRecord = { [K in SessionEventType]: { type: K; data: SessionEventMap[K] } }[SessionEventType];

/** Events that belong to a turn and carry its `turn_id`. */
const TURN_EVENTS = new Set<SessionEventType>(['transcript', 'llm', 'tts', 'frame', 'status', 'error']);
/** Status stages that close a turn after the machine ended it. */
const CLOSING_STAGES = new Set(['interrupted', 'error', 'idle']);

interface Subscriber {
  out: Writable;
  /** Chunks the socket has not accepted yet, with the time they were produced. */
  backlog: Array<{ at: number; chunk: string }>;
  closed: boolean;
  onClose: () => void;
}

/**
 * Fans a session's spec events (6.1) out to any number of SSE consumers without back-pressure on the pipeline:
 * a slow consumer accumulates a backlog and is dropped once its oldest unsent event is older than
 * `SSE_MAX_LAG_MS`. Local listeners (tests, the WebSocket) get every event synchronously.
 *
 * The hub only writes what clients see. It subscribes to the session's bus (`session-bus.ts`) for the spec
 * events; nothing inside the service follows the hub to learn what the machine did.
 */
export class SessionEventHub {
  private readonly subscribers = new Set<Subscriber>();
  private readonly listeners = new Set<(event: SessionEventRecord) => void>();
  private keepalive: NodeJS.Timeout | null = null;
  private closed = false;
  private readonly unsubscribe: () => void;

  /** The machine's current turn: its events carry `turn_id`. */
  private turnId: string | null = null;
  /** The turn that just ended: the status/error events that close it carry its id until the pipeline is idle again. */
  private endedTurnId: string | null = null;

  constructor(bus?: SessionBus) {
    const offs = [
      bus?.on('turn.started', ({ turnId }) => {
        this.turnId = turnId;
        this.endedTurnId = null;
      }),
      bus?.on('turn.finished', ({ turnId }) => {
        if (this.turnId === turnId) this.turnId = null;
        this.endedTurnId = turnId;
      }),
      bus?.on('spec', (record) => this.publish(record.type, this.withTurn(record) as never)),
    ];
    this.unsubscribe = () => offs.forEach((off) => off?.());
  }

  /**
   * Adds `turn_id` (an extra field; spec 6.1 names the others) to the events of a turn, so a client can match SSE
   * to the turn id its request answered with (`X-Turn-Id`), the logs (`turnId`) and `GET /sessions/{id}/metrics`.
   */
  private withTurn(record: SessionEventRecord): object {
    if (!TURN_EVENTS.has(record.type)) return record.data;
    if (record.type === 'status' && record.data.turn_id) {
      if (record.data.stage === 'idle') this.endedTurnId = null;
      return record.data;
    }
    if (this.turnId) return { ...record.data, turn_id: this.turnId };
    const closing = record.type === 'error' || (record.type === 'status' && CLOSING_STAGES.has(record.data.stage));
    if (!closing || !this.endedTurnId) return record.data;
    const turnId = this.endedTurnId;
    if (record.type === 'status' && record.data.stage === 'idle') this.endedTurnId = null;
    return { ...record.data, turn_id: turnId };
  }

  publish<K extends SessionEventType>(type: K, data: SessionEventMap[K]): void {
    if (this.closed) return;
    const record = { type, data } as SessionEventRecord;
    for (const listener of this.listeners) listener(record);
    const chunk = `event: ${type}\ndata: ${JSON.stringify(data)}\n\n`;
    const now = Date.now();
    for (const sub of this.subscribers) this.write(sub, chunk, now);
  }

  /** Synchronous in-process listener; returns the unsubscribe function. */
  listen(listener: (event: SessionEventRecord) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Attaches an SSE response stream; `onClose` runs once when it is dropped or the hub closes. */
  attach(out: Writable, onClose: () => void): void {
    if (this.closed) {
      out.end();
      onClose();
      return;
    }
    const sub: Subscriber = { out, backlog: [], closed: false, onClose };
    this.subscribers.add(sub);
    out.on('drain', () => this.flush(sub));
    out.on('close', () => this.drop(sub));
    out.on('error', () => this.drop(sub));
    if (!this.keepalive) {
      this.keepalive = setInterval(() => {
        const now = Date.now();
        for (const s of this.subscribers) this.write(s, ': keepalive\n\n', now);
      }, SSE_KEEPALIVE_MS);
      this.keepalive.unref();
    }
  }

  get subscriberCount(): number {
    return this.subscribers.size;
  }

  /** Ends every stream (after `session.terminated` was published). Idempotent. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.unsubscribe();
    if (this.keepalive) clearInterval(this.keepalive);
    for (const sub of [...this.subscribers]) {
      if (sub.backlog.length === 0) sub.out.end();
      else sub.out.once('drain', () => sub.out.end());
      this.drop(sub, false);
    }
    this.listeners.clear();
  }

  private write(sub: Subscriber, chunk: string, now: number): void {
    if (sub.closed) return;
    if (sub.backlog.length > 0) {
      if (now - sub.backlog[0].at > SSE_MAX_LAG_MS) {
        sub.out.destroy();
        this.drop(sub);
        return;
      }
      sub.backlog.push({ at: now, chunk });
      return;
    }
    if (!sub.out.write(chunk)) sub.backlog.push({ at: now, chunk: '' });
  }

  private flush(sub: Subscriber): void {
    while (sub.backlog.length > 0 && !sub.closed) {
      const next = sub.backlog.shift()!;
      if (next.chunk && !sub.out.write(next.chunk)) {
        sub.backlog.unshift({ at: next.at, chunk: '' });
        return;
      }
    }
  }

  private drop(sub: Subscriber, destroy = false): void {
    if (sub.closed) return;
    sub.closed = true;
    this.subscribers.delete(sub);
    if (destroy) sub.out.destroy();
    sub.onClose();
  }
}
