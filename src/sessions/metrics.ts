import type { StageMetrics, TurnMark } from '../../actors/stage/ports.ts';
import type { SessionBus, TurnOutcome } from './session-bus.ts';
import type { Turn, TurnFigures } from './turn.ts';

export type { TurnMark };

/** Turns kept per session: enough to see a trend, bounded so a long session does not grow. */
export const METRICS_MAX_TURNS = 50;

export interface TurnMetrics {
  turn_id: string;
  mode: string;
  started_at: string;
  /**
   * Request accepted → final transcript (transcribe and voice turns). A voice turn starts at its end of
   * turn (the VAD's decision), so its figures read "end of speech → transcript / first token / first sample".
   */
  transcript_ms: number | null;
  /** Request accepted → first token from the language model (chat only). */
  llm_first_token_ms: number | null;
  /** Request accepted → first synthesised (or uploaded) audio queued for playout. */
  first_audio_queued_ms: number | null;
  /** Request accepted → first sample of the turn handed to WebRTC: the service's share of time to first sound. */
  first_sample_sent_ms: number | null;
  /** Request accepted → the turn ended (back to idle, interrupted, paused, failed), or null while running. */
  duration_ms: number | null;
  /** How the machine ended the turn: `completed` only when its audio played out; a pause is `paused`. */
  outcome: 'running' | TurnOutcome;
  /** Interrupt call → playout flushed (the next 10 ms audio chunk is silence). */
  interrupt_to_flush_ms: number | null;
}

/**
 * Where a session's turn figures go besides its own list: the service-wide Prometheus histograms
 * (`src/metrics/service-metrics.ts`), so both report the very same measurements.
 */
export interface TurnObserver {
  marked(turn: { turn_id: string; mode: string }, what: TurnMark, ms: number): void;
  finished(turn: { turn_id: string; mode: string }, outcome: TurnOutcome, durationMs: number): void;
  interruptFlushed(turn: { turn_id: string; mode: string } | null, ms: number): void;
}

/**
 * Per-session latency bookkeeping, so a deployment can see its own figures (`GET /sessions/{id}/metrics`)
 * rather than trusting a benchmark: each turn's time to first token, first audio and first sample sent,
 * and how fast interrupts silenced the output. Turns start and end as the machine says (`follow(bus)`):
 * what clients are told (a pause also says `status idle`) is not what decides.
 */
export class SessionMetrics implements StageMetrics {
  /** The figures of the last turns, oldest first: each is also its turn's record's (`Turn.figures`) while it runs. */
  private readonly turns: TurnFigures[] = [];
  /** The bus followed: the running turn's record is found there by the id a stage's mark carries. */
  private bus: SessionBus | null = null;
  /** Set while the session sends an INTERRUPT (`timeInterrupt`): the flush it causes happens in the same step. */
  private interruptAt: number | null = null;

  constructor(private readonly observer?: TurnObserver) {}

  /** Subscribes to the session bus: turn lifecycle, first sample sent, the flush an interrupt times. */
  follow(bus: SessionBus): void {
    this.bus = bus;
    bus.on('turn.started', ({ turnId }) => {
      const turn = bus.turn(turnId);
      if (turn) this.beginTurn(turn);
    });
    bus.on('turn.finished', ({ turnId, outcome }) => {
      const figures = bus.turn(turnId)?.figures;
      if (figures) this.finish(figures, outcome);
    });
    bus.on('media.firstSample', ({ turnId }) => this.mark(turnId, 'first_sample_sent_ms'));
    bus.on('media.flushed', () => this.flushed());
  }

  /** The figures being timed: the last turn's while it runs. */
  private get running(): TurnFigures | null {
    const last = this.turns.at(-1);
    return last?.outcome === 'running' ? last : null;
  }

  private beginTurn(turn: Turn): void {
    const now = turn.startedAt;
    const previous = this.running;
    if (previous) this.finish(previous, 'interrupted', now);
    turn.figures = {
      t0: now,
      turn_id: turn.id,
      mode: turn.kind,
      started_at: new Date().toISOString(),
      transcript_ms: null,
      llm_first_token_ms: null,
      first_audio_queued_ms: null,
      first_sample_sent_ms: null,
      duration_ms: null,
      outcome: 'running',
      interrupt_to_flush_ms: null,
    };
    this.turns.push(turn.figures);
    if (this.turns.length > METRICS_MAX_TURNS) this.turns.shift();
  }

  mark(turnId: string, what: TurnMark, now = performance.now()): void {
    const figures = this.bus?.turn(turnId)?.figures;
    if (!figures || figures[what] !== null) return;
    figures[what] = Math.round(now - figures.t0);
    this.observer?.marked(figures, what, now - figures.t0);
  }

  /**
   * Sends an INTERRUPT (`send`) timing its flush: the machine processes the event synchronously and its media actor
   * flushes the playout in that same step, so `flushed` sees interrupt call → flush. A flush outside it (a pause, a
   * stage error) or an interrupt the machine ignores records nothing.
   */
  timeInterrupt(send: () => void): void {
    this.interruptAt = performance.now();
    try {
      send();
    } finally {
      this.interruptAt = null;
    }
  }

  /** The playout was flushed; when an interrupt caused it, that interrupt's turn records how long it took. */
  flushed(now = performance.now()): void {
    if (this.interruptAt === null) return;
    const running = this.running;
    if (running) running.interrupt_to_flush_ms = Math.round(now - this.interruptAt);
    this.observer?.interruptFlushed(running, now - this.interruptAt);
    this.interruptAt = null;
  }

  private finish(figures: TurnFigures, outcome: TurnOutcome, now = performance.now()): void {
    if (figures.outcome !== 'running') return;
    figures.outcome = outcome;
    figures.duration_ms = Math.round(now - figures.t0);
    this.observer?.finished(figures, outcome, now - figures.t0);
  }

  snapshot(): {
    turns: TurnMetrics[];
    summary: {
      first_sample_sent_ms_p50: number | null;
      first_sample_sent_ms_p95: number | null;
      llm_first_token_ms_p50: number | null;
      interrupt_to_flush_ms_max: number | null;
    };
  } {
    const turns = this.turns.map(({ t0: _t0, ...rest }) => rest);
    const pick = (key: 'first_sample_sent_ms' | 'llm_first_token_ms' | 'interrupt_to_flush_ms') =>
      turns.map((t) => t[key]).filter((v): v is number => v !== null);
    return {
      turns,
      summary: {
        first_sample_sent_ms_p50: percentile(pick('first_sample_sent_ms'), 50),
        first_sample_sent_ms_p95: percentile(pick('first_sample_sent_ms'), 95),
        llm_first_token_ms_p50: percentile(pick('llm_first_token_ms'), 50),
        interrupt_to_flush_ms_max: pick('interrupt_to_flush_ms').length
          ? Math.max(...pick('interrupt_to_flush_ms'))
          : null,
      },
    };
  }
}

function percentile(values: number[], p: number): number | null {
  if (values.length === 0) return null;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))];
}
