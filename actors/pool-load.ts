/** What a worker pool reports to the service metrics (`avatar_pool_*` in `GET /metrics`). */
export interface PoolLoadSnapshot {
  /** Worker threads the pool runs. */
  threads: number;
  /** Threads running a task now. */
  busy: number;
  /** Work waiting for a free thread. */
  queued: number;
  /** Thread-seconds spent busy since the pool started: its rate over threads is the utilisation. */
  busySeconds: number;
  /** Tasks finished (successfully or not) since the pool started. */
  completed: number;
}

/**
 * Busy-thread bookkeeping of a pool: `begin()` when a task goes to a worker, the returned `end` when it settles.
 * Busy time is integrated exactly at each change (no sampling), so `rate(avatar_pool_busy_seconds_total)` over
 * any scrape interval is the pool's real utilisation, not the instant a scrape happened to see.
 */
export class PoolLoad {
  private running = 0;
  private busyMs = 0;
  private since = performance.now();
  private finished = 0;

  constructor(private readonly threads: number) {}

  begin(): () => void {
    this.advance();
    this.running++;
    let ended = false;
    return () => {
      if (ended) return;
      ended = true;
      this.advance();
      this.running--;
      this.finished++;
    };
  }

  /** `queued`: what the pool holds back for a free thread (its own queue; it knows how it counts). */
  snapshot(queued: number): PoolLoadSnapshot {
    this.advance();
    return {
      threads: this.threads,
      busy: Math.min(this.running, this.threads),
      queued: queued + Math.max(0, this.running - this.threads),
      busySeconds: this.busyMs / 1000,
      completed: this.finished,
    };
  }

  private advance(): void {
    const now = performance.now();
    this.busyMs += (now - this.since) * Math.min(this.running, this.threads);
    this.since = now;
  }
}
