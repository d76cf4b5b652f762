import type { Logger } from 'pino';
import type { InspectionEvent } from 'xstate';
import type { StageBus } from '../../actors/stage/ports.ts';
import type { QueuedSegment } from '../../actors/llm/heard.ts';
import type { SessionActor, TurnKind, TurnOutcome } from '../../machines/session.machine.ts';
import type { SessionEventMap, SessionEventRecord, SessionEventType } from './session-events.ts';
import { Turn, type TurnStart } from './turn.ts';

export type { TurnKind, TurnOutcome };

export interface SessionBusEvents {
  /** A spec event (6.1) for SSE consumers; the hub subscribes and writes it out. */
  spec: SessionEventRecord;
  /**
   * The machine moved; `from`/`to` are its active leaf states (`running.turn.phase.speaking`, …). A debugging aid:
   * only emitted while the session's logger is at debug (`sessionInspect`), and nothing but the debug log follows it.
   */
  transition: { from: string; to: string; event: string };
  /** From the machine (`relayTurns`). `ttsProvider`: the provider the turn speaks with (its own, else the session's). */
  'turn.started': TurnStart;
  'turn.finished': { turnId: string; kind: TurnKind; outcome: TurnOutcome };
  /** The turn's first sample went to WebRTC. */
  'media.firstSample': { turnId: string };
  /** The media clock dropped everything queued and scheduled (barge-in, pause, error). */
  'media.flushed': Record<string, never>;
  /** Voice input (`voice-input.ts`): the VAD heard speech start or end (`atMs` on the source's audio timeline). */
  'voice.speech': { source: string; stage: 'start' | 'end'; atMs: number };
  /** The user paused inside their turn (a VAD dip of `PAUSE_MIN_MS`–`PAUSE_MAX_MS`, `actors/attention.ts`), reported as they resume. */
  'voice.pause': { source: string; atMs: number; pauseMs: number };
  /** A user's turn ended and its utterance went to recognition (the turn `turnId`, kind `voice`). */
  'voice.turn': { turnId: string; source: string; speechMs: number };
  /** The recogniser answered a voice turn, `ms` after its end of turn. */
  'voice.transcript': { turnId: string; ms: number };
  /**
   * A voice turn's latency figures, once its first sample went to WebRTC: from the end of turn (the VAD's
   * decision) to the final transcript, the first LLM token and the first sample sent.
   */
  'voice.latency': { turnId: string; transcriptMs: number | null; firstTokenMs: number | null; firstSampleMs: number };
  /** Speech while the avatar was busy interrupted it (barge-in by voice). */
  'voice.bargeIn': { source: string };
  /** A speech onset right after the avatar started speaking matched its own voice and was ignored. */
  'voice.echoIgnored': { source: string };
  /**
   * A tool call settled (`tools.ts`): `ok` when the tool answered (a webhook's JSON, a client's `tool_results`), false
   * when it failed, timed out or was cancelled by an interrupt. Its start is the spec event `tool_call`.
   */
  'tool.result': { turnId: string; callId: string; name: string; ok: boolean };
  /** The renderer failed; the error says whether the session can go on (see `actors/stage/errors.ts`). */
  'media.failed': { error: Error };
  /** A text segment of a turn went to playout, with how long its audio plays (what `heardReply` reads). */
  'tts.queued': { turnId: string } & QueuedSegment;
}
export type SessionBusEvent = keyof SessionBusEvents;
type Listener<K extends SessionBusEvent> = (data: SessionBusEvents[K]) => void;

/**
 * A session's internal event bus: machine transitions, turn lifecycle, media happenings and the spec events
 * meant for clients. Subscribers (the SSE hub, metrics, turn logs, the media actor) each follow what they need,
 * so none has to infer the machine's state from what another one publishes. Synchronous; a listener that
 * throws is reported to `onListenerError` and does not stop the others.
 */
export class SessionBus implements StageBus {
  private readonly listeners = new Map<SessionBusEvent, Set<Listener<never>>>();
  private closed = false;
  /** The turn between its `turn.started` and its `turn.finished`: the machine runs one turn at a time. */
  private running: Turn | null = null;
  /** The turn opened last: the running one, else the one that ended last, until the next opens. */
  private latest: Turn | null = null;

  constructor(private readonly onListenerError: (error: unknown, event: SessionBusEvent) => void = () => undefined) {}

  on<K extends SessionBusEvent>(event: K, listener: Listener<K>): () => void {
    let set = this.listeners.get(event);
    if (!set) this.listeners.set(event, (set = new Set()));
    set.add(listener as Listener<never>);
    return () => set.delete(listener as Listener<never>);
  }

  emit<K extends SessionBusEvent>(event: K, data: SessionBusEvents[K]): void {
    if (this.closed) return;
    // A turn's record is there before anyone hears of its start, and until everyone heard of its end.
    if (event === 'turn.started') this.running = this.latest = new Turn(data as TurnStart);
    const ending = event === 'turn.finished' ? this.turn((data as SessionBusEvents['turn.finished']).turnId) : null;
    if (ending) ending.finished = true;
    for (const listener of [...(this.listeners.get(event) ?? [])]) {
      try {
        (listener as Listener<K>)(data);
      } catch (error) {
        this.onListenerError(error, event);
      }
    }
    if (ending && this.running === ending) this.running = null;
  }

  /** The running turn's record when `turnId` is the running turn; null for a turn that has ended (or never ran). */
  turn(turnId: string): Turn | null {
    return this.running?.id === turnId ? this.running : null;
  }

  /** The running turn's record (what events without a turn id of their own belong to), null between turns. */
  get runningTurn(): Turn | null {
    return this.running;
  }

  /** The turn opened last, running or ended (`Turn.finished`); null before the first. */
  get latestTurn(): Turn | null {
    return this.latest;
  }

  /** A spec event for clients: same signature as the hub's, so stage actors do not care who writes SSE. */
  publish<K extends SessionEventType>(type: K, data: SessionEventMap[K]): void {
    this.emit('spec', { type, data } as SessionEventRecord);
  }

  /** A segment of a turn's speech was queued for playout (the transcript's heard text follows it). */
  segmentQueued(turnId: string, segment: QueuedSegment): void {
    this.emit('tts.queued', { turnId, ...segment });
  }

  /** Nothing is delivered after this (the session's close cascade ends with it). Idempotent. */
  close(): void {
    this.closed = true;
    this.listeners.clear();
  }
}

/** The active leaf states of a snapshot value, e.g. `running.turn.phase.speaking+running.turn.text.generating`. */
export function leafStates(value: unknown, prefix = ''): string {
  if (typeof value === 'string') return prefix ? `${prefix}.${value}` : value;
  if (!value || typeof value !== 'object') return prefix;
  return Object.entries(value as Record<string, unknown>)
    .map(([key, child]) => leafStates(child, prefix ? `${prefix}.${key}` : key))
    .join('+');
}

/**
 * Relays the turn lifecycle the machine emits (`turn.started`, `turn.finished`: a turn is its `turn` or `transcribe`
 * context entry; a transcription that goes on as a chat stays one turn) to the bus. Each is delivered once the
 * machine's step is done, after what else the step did (statuses, the flush), so subscribers see a turn end after
 * the events that closed it.
 */
export function relayTurns(actor: SessionActor, bus: SessionBus): void {
  const pending: Array<() => void> = [];
  actor.on('turn.started', ({ type: _type, ...started }) => pending.push(() => bus.emit('turn.started', started)));
  actor.on('turn.finished', ({ type: _type, ...finished }) => pending.push(() => bus.emit('turn.finished', finished)));
  // Observers hear of a step after its emitted events and sends were delivered.
  actor.subscribe({
    next: () => {
      for (const deliver of pending.splice(0)) deliver();
    },
    // The session logs a crashed actor; what its last step left undelivered goes with it.
    error: () => {
      pending.length = 0;
    },
  });
}

/**
 * An XState `inspect` callback tracing the session's root actor's transitions on the bus (the turn log's
 * `session transition` debug lines). A debugging aid, attached only at debug (`sessionInspect`): turns come from the
 * machine (`relayTurns`), the interrupt → flush timing from the session's send (`SessionMetrics.timeInterrupt`).
 */
export function machineTrace(bus: SessionBus): (event: InspectionEvent) => void {
  let state = '';
  return (inspection) => {
    if (inspection.actorRef.sessionId !== inspection.rootId || inspection.type !== '@xstate.snapshot') return;
    const snapshot = inspection.snapshot as { value?: unknown };
    const to = leafStates(snapshot.value);
    if (to !== state) {
      bus.emit('transition', { from: state, to, event: inspection.event.type });
      state = to;
    }
  };
}

/**
 * XState's `inspect` option for a session actor: the live inspector's callback (SERVICE_INSPECTOR=on) and, while the
 * session's logger is at debug, the transition trace (`machineTrace`). Undefined when neither is wanted, so no
 * inspection is attached at all: nothing the service does depends on it.
 */
export function sessionInspect(
  bus: SessionBus,
  logger: Logger,
  inspector?: (event: InspectionEvent) => void,
): ((event: InspectionEvent) => void) | undefined {
  const trace = logger.isLevelEnabled('debug') ? machineTrace(bus) : undefined;
  if (!trace || !inspector) return trace ?? inspector;
  return (event) => {
    trace(event);
    inspector(event);
  };
}

/**
 * Turn logs from the bus: `turn started` and `turn finished` (kind, outcome, duration) on a child logger per
 * turn, so every line carries `sessionId` (the session's logger) and `turnId`; machine transitions at debug
 * (traced only while debug is on, `sessionInspect`).
 */
export function logTurns(bus: SessionBus, logger: Logger): void {
  bus.on('turn.started', ({ turnId, kind }) => {
    const turn = bus.turn(turnId);
    const log = logger.child({ turnId });
    if (turn) turn.log = log;
    log.info({ kind }, 'turn started');
  });
  bus.on('turn.finished', ({ turnId, kind, outcome }) => {
    const turn = bus.turn(turnId);
    const log = turn?.log ?? logger.child({ turnId });
    log.info(
      { kind, outcome, durationMs: turn?.log ? Math.round(performance.now() - turn.startedAt) : undefined },
      'turn finished',
    );
  });
  bus.on('transition', ({ from, to, event }) => logger.debug({ from, to, event }, 'session transition'));
}
