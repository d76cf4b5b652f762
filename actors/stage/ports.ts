import type { PlayoutClock } from '../media/playout.ts';
import type { PlayoutTurn } from '../media/turn-playout.ts';
import type { QueuedSegment } from '../llm/heard.ts';
import type { ExpressionName } from '../expression.ts';

/**
 * What the stage actors need from the session that runs them, declared here so that `actors/` never imports
 * `src/`: the session's bus, media and metrics (`src/sessions/`) implement these ports. Only what an actor
 * uses is in them.
 */

/** The spec events (6.1) the stage actors publish, with their payloads; the SSE hub's map extends it. */
export interface StageEventMap {
  transcript: { text: string; is_final: boolean };
  llm: { delta: string };
  tts: { stage: 'start' | 'first_audio' | 'complete'; ms_elapsed: number; sentence_index?: number };
  /** An expression cue (`actors/expression.ts`): from the language model's tags or `POST /sessions/{id}/expression`. */
  expression: {
    name: ExpressionName;
    intensity: number;
    duration_ms: number | null;
    start_ms: number;
    source: 'llm' | 'api';
  };
}

/**
 * The session's bus as a stage sees it: `publish` puts a spec event out for SSE clients; `segmentQueued` says a
 * text segment of a turn went to playout and how long it plays (the session's transcript keeps what was heard).
 */
export interface StageBus {
  publish<K extends keyof StageEventMap>(type: K, data: StageEventMap[K]): void;
  segmentQueued(turnId: string, segment: QueuedSegment): void;
}

/**
 * One turn as the stage actors and the media clock hold it (as livekit/agents-js's `SpeechHandle`): its id and the
 * media clock's record of its audio (`TurnPlayout`), made with the turn. It rides on the machine's `TurnInfo` and
 * `TranscribeRequest` to the stage actors, and the session's `Turn` record (`src/sessions/turn.ts`) holds the same
 * one, so what the clock knows of a turn is asked of the turn, never looked up by its id.
 */
export type TurnHandle = PlayoutTurn;

/** The session's media as a stage sees it: the media clock it feeds, what of a turn was heard, flush and failures. */
export interface StageMedia
  extends Pick<PlayoutClock, 'enqueue' | 'waitForRoom' | 'endTurn' | 'whenDrained' | 'express' | 'answerAwaitedMs'> {
  /** Ms of a turn's audio that left for WebRTC (what the listener heard of it). */
  playedMsOf(turn: TurnHandle): number;
  /** Barge-in: everything queued or scheduled goes. */
  flush(): void;
  /** Calls `listener` with each renderer failure, recoverable or fatal (`errors.ts`); returns the unsubscribe. */
  onFailure(listener: (error: Error) => void): () => void;
}

/** The per-turn figures a turn can record once (first token, first audio queued, first sample sent). */
export type TurnMark = 'transcript_ms' | 'llm_first_token_ms' | 'first_audio_queued_ms' | 'first_sample_sent_ms';

/** The session's per-turn latency bookkeeping as a stage sees it: it marks when a turn reached a step. */
export interface StageMetrics {
  mark(turnId: string, what: TurnMark): void;
}
