import type { Writable } from 'node:stream';
import type { SessionBus } from './session-bus.ts';
import type { SessionEventMap, SessionEventRecord, SessionEventType } from './session-events.ts';
import { SseFanout } from './sse-fanout.ts';

/** Spec 6.1 rule 4: a consumer this far behind may be disconnected; others are unaffected. */
export const SSE_MAX_LAG_MS = 5_000;
/** Keeps idle proxies from closing the stream; comments are ignored by EventSource. */
export const SSE_KEEPALIVE_MS = 15_000;
/**
 * Unsent bytes a session stream may hold. Five seconds of a session's events (frames at 25 fps, LLM deltas,
 * transcripts) are a few KB; a consumer this far behind is not catching up, whatever its lag says.
 */
export const SSE_MAX_BACKLOG_BYTES = 1024 * 1024;

export type { SessionEventMap, SessionEventRecord, SessionEventType } from './session-events.ts';

/** Events that belong to a turn and carry its `turn_id`. */
const TURN_EVENTS = new Set<SessionEventType>(['transcript', 'llm', 'tts', 'frame', 'status', 'error']);
/** Status stages that close a turn after the machine ended it. */
const CLOSING_STAGES = new Set(['interrupted', 'error', 'idle']);

/**
 * Fans a session's spec events (6.1) out to any number of SSE consumers without back-pressure on the pipeline:
 * a slow consumer accumulates a backlog and is dropped once its oldest unsent event is older than
 * `SSE_MAX_LAG_MS`. Local listeners (tests, the WebSocket) get every event synchronously.
 *
 * The hub only writes what clients see. It subscribes to the session's bus (`session-bus.ts`) for the spec
 * events; nothing inside the service follows the hub to learn what the machine did.
 */
export class SessionEventHub {
  private readonly streams = new SseFanout({
    maxLagMs: SSE_MAX_LAG_MS,
    maxBacklogBytes: SSE_MAX_BACKLOG_BYTES,
    keepaliveMs: SSE_KEEPALIVE_MS,
  });
  private readonly listeners = new Set<(event: SessionEventRecord) => void>();
  private closed = false;
  private readonly unsubscribe: () => void;

  constructor(private readonly bus?: SessionBus) {
    const off = bus?.on('spec', (record) => this.publish(record.type, this.withTurn(record) as never));
    this.unsubscribe = () => off?.();
  }

  /**
   * Adds `turn_id` (an extra field; spec 6.1 names the others) to the events of a turn, so a client can match SSE
   * to the turn id its request answered with (`X-Turn-Id`), the logs (`turnId`) and `GET /sessions/{id}/metrics`.
   * The turn is the bus's latest (`Turn`): while it runs, its events; once it ended, the status/error events that
   * close it, until the pipeline is idle again (`Turn.closedForClients`).
   */
  private withTurn(record: SessionEventRecord): object {
    if (!TURN_EVENTS.has(record.type)) return record.data;
    if (record.type === 'error' && record.data.output_id) return record.data;
    const turn = this.bus?.latestTurn;
    if (record.type === 'status' && record.data.turn_id) {
      if (record.data.stage === 'idle' && turn?.finished) turn.closedForClients = true;
      return record.data;
    }
    if (turn && !turn.finished) return { ...record.data, turn_id: turn.id };
    const closing = record.type === 'error' || (record.type === 'status' && CLOSING_STAGES.has(record.data.stage));
    if (!closing || !turn || turn.closedForClients) return record.data;
    if (record.type === 'status' && record.data.stage === 'idle') turn.closedForClients = true;
    return { ...record.data, turn_id: turn.id };
  }

  publish<K extends SessionEventType>(type: K, data: SessionEventMap[K]): void {
    if (this.closed) return;
    const record = { type, data } as SessionEventRecord;
    for (const listener of this.listeners) listener(record);
    let json: string;
    try {
      json = JSON.stringify(data);
    } catch {
      // A value JSON cannot write (the tool path bounds depth first, `MAX_JSON_DEPTH`) costs this event, not the stream.
      return;
    }
    this.streams.publish(`event: ${type}\ndata: ${json}\n\n`);
  }

  /** Synchronous in-process listener; returns the unsubscribe function. */
  listen(listener: (event: SessionEventRecord) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Attaches an SSE response stream; `onClose` runs once when it is dropped or the hub closes. */
  attach(out: Writable, onClose: () => void): void {
    this.streams.attach(out, undefined, onClose);
  }

  get subscriberCount(): number {
    return this.streams.size;
  }

  /** Ends every stream (after `session.terminated` was published). Idempotent. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.unsubscribe();
    this.streams.close();
    this.listeners.clear();
  }
}
