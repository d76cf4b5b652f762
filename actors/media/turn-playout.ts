/** A tagged stretch of a turn's audio, samples from the turn's first; `onset`: its first `CAPTION_ONSET_LEVEL` sample. */
export interface TurnSegment {
  segment: number;
  start: number;
  end: number;
  caption?: string;
  onset?: number;
}

/**
 * The media clock's record of one turn's audio: what was enqueued and played, its tagged segments, who waits for it
 * to drain. Made with the turn and held by it (`PlayoutTurn.playout`), not by the clock in a map keyed by turn id:
 * it lives as long as whoever asks about the turn, and the clock keeps only the turns still playing. Only
 * `PlayoutClock` (`playout.ts`) reads or writes its fields.
 */
export class TurnPlayout {
  /** Clock sample of the turn's first played sample. */
  startSample: number | null = null;
  /** Samples enqueued but not yet played. */
  pendingSamples = 0;
  enqueuedSamples = 0;
  playedSamples = 0;
  readonly segments: TurnSegment[] = [];
  /** Segments whose speech onset has played (their captions are scheduled). */
  segmentsStarted = 0;
  /** No more audio comes (ended, or flushed): audio enqueued for it from now on is dropped. */
  ended = false;
  /** Ended with nothing left to play. */
  settled = false;
  readonly drained: Array<() => void> = [];

  /**
   * Nothing: this is the clock's working state (counters, segments, waiters' callbacks), not data about the turn. A
   * turn handle or an event carrying one serialises as its id alone, as it did before the record rode on it: the
   * inspector's payload summaries (`INSPECT_PAYLOAD_MAX_CHARS`) and logs keep the user's text, not the clock's counters.
   */
  toJSON(): undefined {
    return undefined;
  }
}

/**
 * A turn as the media clock is handed it: its id (for the clock's events) and the clock's record of its audio. The
 * stage actors know it as `TurnHandle` (`actors/stage/ports.ts`): the machine's `TurnInfo` and the session's `Turn`
 * record are one.
 */
export interface PlayoutTurn {
  readonly id: string;
  readonly playout: TurnPlayout;
}

/** A turn `id` with a fresh record of its audio, as a turn is made (`newTurnHandle`, `src/sessions/turn.ts`). */
export function newPlayoutTurn(id: string): PlayoutTurn {
  return { id, playout: new TurnPlayout() };
}
