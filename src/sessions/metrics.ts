import type { SessionEventRecord } from './event-hub.ts';

/** Turns kept per session: enough to see a trend, bounded so a long session does not grow. */
export const METRICS_MAX_TURNS = 50;

export interface TurnMetrics {
  turn_id: string;
  mode: string;
  started_at: string;
  /** Request accepted → first token from the language model (chat only). */
  llm_first_token_ms: number | null;
  /** Request accepted → first synthesised (or uploaded) audio queued for playout. */
  first_audio_queued_ms: number | null;
  /** Request accepted → first sample of the turn handed to WebRTC: the service's share of time to first sound. */
  first_sample_sent_ms: number | null;
  /** Request accepted → back to idle, or null while running. */
  duration_ms: number | null;
  outcome: 'running' | 'completed' | 'interrupted' | 'error';
  /** Interrupt call → playout flushed (the next 10 ms audio chunk is silence). */
  interrupt_to_flush_ms: number | null;
}

interface OpenTurn extends TurnMetrics {
  t0: number;
}

/**
 * Per-session latency bookkeeping, so a deployment can see its own figures (`GET /sessions/{id}/metrics`)
 * rather than trusting a benchmark: each turn's time to first token, first audio and first sample sent,
 * and how fast interrupts silenced the output.
 */
export class SessionMetrics {
  private readonly turns: OpenTurn[] = [];
  private current: OpenTurn | null = null;
  private interruptAt: number | null = null;

  beginTurn(turnId: string, mode: string, now = performance.now()): void {
    this.finish('interrupted', now);
    const turn: OpenTurn = {
      t0: now,
      turn_id: turnId,
      mode,
      started_at: new Date().toISOString(),
      llm_first_token_ms: null,
      first_audio_queued_ms: null,
      first_sample_sent_ms: null,
      duration_ms: null,
      outcome: 'running',
      interrupt_to_flush_ms: null,
    };
    this.current = turn;
    this.turns.push(turn);
    if (this.turns.length > METRICS_MAX_TURNS) this.turns.shift();
  }

  mark(turnId: string, what: 'llm_first_token_ms' | 'first_audio_queued_ms' | 'first_sample_sent_ms', now = performance.now()): void {
    const turn = this.turns.findLast((t) => t.turn_id === turnId);
    if (turn && turn[what] === null) turn[what] = Math.round(now - turn.t0);
  }

  interruptRequested(now = performance.now()): void {
    this.interruptAt = now;
  }

  /** Follows the session's own events: status changes end turns; a flush after an interrupt is timed. */
  observe(event: SessionEventRecord, now = performance.now()): void {
    if (event.type === 'error') this.finish('error', now);
    if (event.type !== 'status') return;
    if (event.data.stage === 'interrupted') {
      if (this.current && this.interruptAt !== null) this.current.interrupt_to_flush_ms = Math.round(now - this.interruptAt);
      this.finish('interrupted', now);
    }
    if (event.data.stage === 'idle') this.finish('completed', now);
    this.interruptAt = null;
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
        interrupt_to_flush_ms_max: pick('interrupt_to_flush_ms').length ? Math.max(...pick('interrupt_to_flush_ms')) : null,
      },
    };
  }

  private finish(outcome: TurnMetrics['outcome'], now: number): void {
    const turn = this.current;
    if (!turn || turn.outcome !== 'running') return;
    turn.outcome = outcome;
    turn.duration_ms = Math.round(now - turn.t0);
    this.current = null;
  }
}

function percentile(values: number[], p: number): number | null {
  if (values.length === 0) return null;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))];
}
