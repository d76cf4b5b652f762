import type { Logger } from 'pino';
import type { InspectionEvent } from 'xstate';
import type { SessionEventMap, SessionEventRecord, SessionEventType } from './event-hub.ts';

/** What a turn was started by: the machine's turn modes, or a transcription (which may go on as a chat). */
export type TurnKind = 'speak' | 'chat' | 'audio' | 'audio_stream' | 'transcribe' | 'voice';
/**
 * How a turn ended, from the event that ended it: its audio played out (`completed`), an interrupt, a
 * pause, a stage error, or the session ending.
 */
export type TurnOutcome = 'completed' | 'interrupted' | 'paused' | 'error' | 'terminated';

export interface SessionBusEvents {
  /** A spec event (6.1) for SSE consumers; the hub subscribes and writes it out. */
  spec: SessionEventRecord;
  /** The machine received an event (before it is processed). */
  received: { event: string };
  /** The machine moved; `from`/`to` are its active leaf states (`running.turn.phase.speaking`, …). */
  transition: { from: string; to: string; event: string };
  /** `ttsProvider`: the provider the turn speaks with (its own, else the session's). */
  'turn.started': { turnId: string; kind: TurnKind; ttsProvider?: string };
  'turn.finished': { turnId: string; kind: TurnKind; outcome: TurnOutcome };
  /** The turn's first sample went to WebRTC. */
  'media.firstSample': { turnId: string };
  /** The media clock dropped everything queued and scheduled (barge-in, pause, error). */
  'media.flushed': Record<string, never>;
  /** Voice input (`voice-input.ts`): the VAD heard speech start or end (`atMs` on the source's audio timeline). */
  'voice.speech': { source: string; stage: 'start' | 'end'; atMs: number };
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
  /** The renderer failed; the error says whether the session can go on (see `actors/session/stage-errors.ts`). */
  'media.failed': { error: Error };
}
export type SessionBusEvent = keyof SessionBusEvents;
type Listener<K extends SessionBusEvent> = (data: SessionBusEvents[K]) => void;

/**
 * A session's internal event bus: machine transitions, turn lifecycle, media happenings and the spec events
 * meant for clients. Subscribers (the SSE hub, metrics, turn logs, the media actor) each follow what they need,
 * so none has to infer the machine's state from what another one publishes. Synchronous; a listener that
 * throws is reported to `onListenerError` and does not stop the others.
 */
export class SessionBus {
  private readonly listeners = new Map<SessionBusEvent, Set<Listener<never>>>();
  private closed = false;

  constructor(private readonly onListenerError: (error: unknown, event: SessionBusEvent) => void = () => undefined) {}

  on<K extends SessionBusEvent>(event: K, listener: Listener<K>): () => void {
    let set = this.listeners.get(event);
    if (!set) this.listeners.set(event, (set = new Set()));
    set.add(listener as Listener<never>);
    return () => set.delete(listener as Listener<never>);
  }

  emit<K extends SessionBusEvent>(event: K, data: SessionBusEvents[K]): void {
    if (this.closed) return;
    for (const listener of [...(this.listeners.get(event) ?? [])]) {
      try {
        (listener as Listener<K>)(data);
      } catch (error) {
        this.onListenerError(error, event);
      }
    }
  }

  /** A spec event for clients: same signature as the hub's, so stage actors do not care who writes SSE. */
  publish<K extends SessionEventType>(type: K, data: SessionEventMap[K]): void {
    this.emit('spec', { type, data } as SessionEventRecord);
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

interface MachineTurnView {
  turn?: { id: string; mode: string; tts?: { provider: string } | null } | null;
  transcribe?: { id: string; source?: string } | null;
  tts?: { provider: string };
}

function turnOf(context: MachineTurnView | undefined): { turnId: string; kind: TurnKind; ttsProvider?: string } | null {
  if (context?.turn) return { turnId: context.turn.id, kind: context.turn.mode as TurnKind, ttsProvider: context.turn.tts?.provider ?? context.tts?.provider };
  if (context?.transcribe) return { turnId: context.transcribe.id, kind: context.transcribe.source === 'voice' ? 'voice' : 'transcribe', ttsProvider: context.tts?.provider };
  return null;
}

function outcomeOf(event: string, terminated: boolean): TurnOutcome {
  if (event === 'INTERRUPT') return 'interrupted';
  if (event === 'PAUSE') return 'paused';
  if (event === 'STAGE.ERROR') return 'error';
  if (terminated || event === 'TERMINATE') return 'terminated';
  return 'completed';
}

/**
 * An XState `inspect` callback feeding the bus from the session's root actor: each event it receives, each
 * transition, and turns starting and finishing. A turn is the machine's `turn` or `transcribe` context entry; it
 * finishes when that entry goes, with the outcome told by the event that removed it (a pause is not a completed turn).
 * A transcription that goes on as a chat keeps its id and stays one turn.
 */
export function machineFeed(bus: SessionBus): (event: InspectionEvent) => void {
  let state = '';
  let current: { turnId: string; kind: TurnKind; ttsProvider?: string } | null = null;
  return (inspection) => {
    if (inspection.actorRef.sessionId !== inspection.rootId) return;
    if (inspection.type === '@xstate.event') {
      bus.emit('received', { event: inspection.event.type });
      return;
    }
    if (inspection.type !== '@xstate.snapshot') return;
    const snapshot = inspection.snapshot as { value?: unknown; status?: string; context?: MachineTurnView };
    const event = inspection.event.type;
    const to = leafStates(snapshot.value);
    if (to !== state) {
      bus.emit('transition', { from: state, to, event });
      state = to;
    }
    const ended = snapshot.status === 'done';
    // The terminated state keeps its context as it was: a turn in it is over all the same.
    const next = ended ? null : turnOf(snapshot.context);
    if (current && current.turnId !== next?.turnId) {
      const finished = current;
      current = null;
      bus.emit('turn.finished', { turnId: finished.turnId, kind: finished.kind, outcome: outcomeOf(event, ended) });
    }
    if (next && !current) {
      current = next;
      bus.emit('turn.started', next);
    }
  };
}

/**
 * Turn logs from the bus: `turn started` and `turn finished` (kind, outcome, duration) on a child logger per
 * turn, so every line carries `sessionId` (the session's logger) and `turnId`; machine transitions at debug.
 */
export function logTurns(bus: SessionBus, logger: Logger): void {
  const open = new Map<string, { log: Logger; startedAt: number }>();
  bus.on('turn.started', ({ turnId, kind }) => {
    const log = logger.child({ turnId });
    open.set(turnId, { log, startedAt: performance.now() });
    log.info({ kind }, 'turn started');
  });
  bus.on('turn.finished', ({ turnId, kind, outcome }) => {
    const turn = open.get(turnId);
    open.delete(turnId);
    const log = turn?.log ?? logger.child({ turnId });
    log.info({ kind, outcome, durationMs: turn ? Math.round(performance.now() - turn.startedAt) : undefined }, 'turn finished');
  });
  bus.on('transition', ({ from, to, event }) => logger.debug({ from, to, event }, 'session transition'));
}
