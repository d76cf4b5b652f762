import { randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import type { QueuedSegment } from '../../actors/llm/heard.ts';
import { newPlayoutTurn, type TurnPlayout } from '../../actors/media/turn-playout.ts';
import type { TurnHandle } from '../../actors/stage/ports.ts';
import type { TurnKind } from '../../machines/session.machine.ts';
import type { TranscriptTurn } from '../store/transcripts.ts';
import type { TurnMetrics } from './metrics.ts';

/** A transcript entry while its turn runs: what is known before the turn's outcome and heard text. */
export type TranscriptDraft = Omit<TranscriptTurn, 'outcome' | 'ended_at' | 'heard_text'>;

/** A turn's latency figures while it is kept, with the instant they count from. */
export interface TurnFigures extends TurnMetrics {
  t0: number;
}

/** What the machine says when a turn starts (`turn.started` on the session bus). */
export interface TurnStart {
  turnId: string;
  kind: TurnKind;
  ttsProvider?: string;
  text?: string;
  /** The media clock's record of the turn's audio, from the turn's handle (`TurnInfo`, `TranscribeRequest`). */
  playout: TurnPlayout;
}

/** The figures of a voice turn's latency while its first sample is awaited, from its end of turn (`endedAt`). */
export interface VoiceLatency {
  endedAt: number;
  transcriptMs: number | null;
  firstTokenMs: number | null;
}

/** A new turn's handle (`TurnInfo`, `TranscribeRequest`): a fresh id and the media clock's record of its audio. */
export function newTurnHandle(id: string = randomUUID()): TurnHandle {
  return newPlayoutTurn(id);
}

/**
 * One turn of a session, from the machine's `turn.started` to its `turn.finished` (as livekit/agents-js's
 * `SpeechHandle`): the one per-turn record its followers share — the media clock's record of its audio (the handle
 * the stage actors hold), the turn log's logger, the transcript's draft and the segments its speech queued, the
 * metrics' figures, the voice latency, which turn the SSE events belong to — instead of a map or slot per follower
 * keyed by the turn id. The session bus opens it before any listener hears of the turn and closes it after every
 * listener heard of its end (`SessionBus.turn`), so the turn ids the stage actors' events carry resolve to it while
 * it runs.
 */
export class Turn implements TurnHandle {
  readonly id: string;
  readonly kind: TurnKind;
  /** The provider the turn speaks with (its own, else the session's). */
  readonly ttsProvider: string | undefined;
  /** speak: what is said; chat: the prompt. */
  readonly text: string | undefined;
  /** `performance.now()` at the start: the turn's durations count from here. */
  readonly startedAt = performance.now();
  /** The turn log's child logger (`logTurns`): its lines carry the turn id. */
  log: Logger | null = null;
  /** The transcript's entry as it is being recorded (`TranscriptRecorder`); null for a session that keeps none. */
  transcript: TranscriptDraft | null = null;
  /** The text segments the turn's speech queued for playout, in order: what the heard text is cut from. */
  readonly segments: QueuedSegment[] = [];
  /** The turn's latency figures (`SessionMetrics`); null for a session that times none. */
  figures: TurnFigures | null = null;
  /** The media clock's record of the turn's audio: the same one the stage actors' handle (`TurnInfo`) carries. */
  readonly playout: TurnPlayout;
  /** A voice turn's latency figures until its first sample is sent (`VoiceInput`); null for other turns. */
  voiceLatency: VoiceLatency | null = null;
  /** The machine said the turn ended (`turn.finished`): set by the bus before any listener hears of it. */
  finished = false;
  /**
   * The SSE hub sent the idle status that closes the turn after it ended: later closing events (an error, the next
   * idle) are no longer the turn's and carry no `turn_id` (`SessionEventHub`).
   */
  closedForClients = false;

  constructor(start: TurnStart) {
    this.id = start.turnId;
    this.playout = start.playout;
    this.kind = start.kind;
    this.ttsProvider = start.ttsProvider;
    this.text = start.text;
  }
}
