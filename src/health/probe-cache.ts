/**
 * Remote dependency probes for `GET /health`, bounded and cached. A poller asking every second must not
 * turn into one upstream request per second, and ten concurrent `/health` requests must not become ten
 * probes: a result is kept for `PROBE_CACHE_MS`, and requests arriving while a probe runs wait for that
 * same probe. Every probe is cut off at `PROBE_TIMEOUT_MS`, even one that ignores its signal.
 */
import { untilAborted } from '../../actors/upstream/abort.ts';

/**
 * How long a probe result is reused. Long enough that frequent health polling costs an upstream at most
 * one `GET /models` per 15 s; short enough that a server that came back (or went away) shows within 15 s.
 */
export const PROBE_CACHE_MS = 15_000;
/**
 * Longest wait for one probe. A reachable local server answers `GET /models` in milliseconds; 3 s keeps
 * `/health` itself inside the 5 s a load balancer or container health check typically allows.
 */
export const PROBE_TIMEOUT_MS = 3_000;

export type DependencyStatus = 'ok' | 'not_configured' | 'error';

/** What a probe found; the cache adds when it found it and how long it took. */
export interface ProbeOutcome {
  status: DependencyStatus;
  /** Why the dependency is not `ok`: which variable to set, or what failed. Never a key, URL or filesystem path. */
  reason?: string;
  /** Extra facts about a dependency that is `ok` (the model list, the number of engine processes). */
  detail?: string;
}

export interface DependencyHealth extends ProbeOutcome {
  /** ISO 8601 time of the check this entry reports. */
  checked_at: string;
  /** How long the remote probe took (remote probes only). */
  latency_ms?: number;
}

export type Probe = (signal: AbortSignal) => Promise<ProbeOutcome>;

interface CacheEntry {
  result?: DependencyHealth;
  expiresAt: number;
  inFlight?: Promise<DependencyHealth>;
}

export interface ProbeCacheOptions {
  cacheMs?: number;
  timeoutMs?: number;
  now?: () => number;
}

/**
 * One entry per dependency name. The names are a fixed set (llm, asr, the TTS providers), so the map
 * never grows beyond it.
 */
export class ProbeCache {
  private readonly entries = new Map<string, CacheEntry>();
  private readonly closing = new AbortController();
  private readonly cacheMs: number;
  private readonly timeoutMs: number;
  private readonly now: () => number;

  constructor(options: ProbeCacheOptions = {}) {
    this.cacheMs = options.cacheMs ?? PROBE_CACHE_MS;
    this.timeoutMs = options.timeoutMs ?? PROBE_TIMEOUT_MS;
    this.now = options.now ?? Date.now;
  }

  /** The cached result for `name` while fresh; otherwise the result of the probe already running, or of a new one. */
  check(name: string, probe: Probe): Promise<DependencyHealth> {
    const entry = this.entries.get(name) ?? { expiresAt: 0 };
    this.entries.set(name, entry);
    if (entry.result && this.now() < entry.expiresAt) return Promise.resolve(entry.result);
    if (entry.inFlight) return entry.inFlight;
    const running = this.run(probe).then((result) => {
      entry.result = result;
      entry.expiresAt = this.now() + this.cacheMs;
      entry.inFlight = undefined;
      return result;
    });
    entry.inFlight = running;
    return running;
  }

  /** Runs `probe` now, under the same time bound, without caching: for cheap in-process checks. */
  checkFresh(probe: Probe): Promise<DependencyHealth> {
    return this.run(probe);
  }

  /** Aborts running probes (service shutdown); later checks answer at once with an error. */
  close(): void {
    this.closing.abort(new Error('the service is shutting down'));
  }

  private async run(probe: Probe): Promise<DependencyHealth> {
    const startedAt = performance.now();
    const timeout = AbortSignal.timeout(this.timeoutMs);
    const signal = AbortSignal.any([this.closing.signal, timeout]);
    let outcome: ProbeOutcome;
    try {
      outcome = await untilAborted(probe(signal), signal);
    } catch (error) {
      if (timeout.aborted) outcome = { status: 'error', reason: `no answer within ${this.timeoutMs} ms` };
      else if (this.closing.signal.aborted) outcome = { status: 'error', reason: 'the service is shutting down' };
      else outcome = { status: 'error', reason: `probe failed: ${(error as Error).name}` };
    }
    return { ...outcome, checked_at: new Date().toISOString(), latency_ms: Math.round(performance.now() - startedAt) };
  }
}
