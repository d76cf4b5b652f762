import type { Logger } from 'pino';
import type { QueuedSegment } from '../../actors/llm/heard.ts';
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
}

/**
 * One turn of a session, from the machine's `turn.started` to its `turn.finished` (as livekit/agents-js's
 * `SpeechHandle`): the one per-turn record its followers share — the turn log's logger, the transcript's draft and
 * the segments its speech queued, the metrics' figures — instead of a map per follower keyed by the turn id. The
 * session bus opens it before any listener hears of the turn and closes it after every listener heard of its end
 * (`SessionBus.turn`), so the turn ids the stage actors' events carry resolve to it while it runs.
 */
export class Turn {
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

  constructor(start: TurnStart) {
    this.id = start.turnId;
    this.kind = start.kind;
    this.ttsProvider = start.ttsProvider;
    this.text = start.text;
  }
}
