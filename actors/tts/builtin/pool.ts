/**
 * The supervised pool of built-in engine processes (engine-child.ts). It owns the decisions about them:
 * how many run, which sentence goes where, what a crash costs (the sentence that was in the dead process,
 * nothing else), when a dead engine is restarted, and when a worn engine is replaced. Why processes and
 * not worker threads: docs/architecture.md, "Built-in TTS engines run in child processes".
 */
import { setPriority } from 'node:os';
import type { TtsLogger } from '../types.ts';
import type { EngineAudio } from './engine.ts';
import { EngineChild, EngineError, type EngineExit, type SentenceJob, type SentenceOutcome } from './engine-child.ts';
import { pathFreeMessage } from './protocol.ts';
import type { SentenceTask } from './synthesize-sentence.ts';

/**
 * One engine process by default. The machine has 2 cores: one paces and renders sessions, so a second
 * engine would only compete for the same core; one engine synthesises speech many times faster than it
 * plays, and each process holds ~100 MB of compiled WASM. A second one buys availability during a restart
 * (~1 s), which `processes: 2` offers where cores and memory allow.
 */
export const DEFAULT_ENGINE_PROCESSES = 1;
/**
 * Sentences waiting for an engine. A turn asks for at most two at a time (the next one to play and the one
 * after it), so this holds 16 concurrent turns; beyond that speech would fall behind real time anyway.
 */
export const MAX_QUEUED_SENTENCES = 32;
/**
 * Sentences one process answers before it is replaced: bounds anything the engines leak (a WASM heap never
 * shrinks) for ~1 s of CPU every few hundred sentences. The replacement starts first, so nobody waits for it.
 */
export const SENTENCES_PER_ENGINE_PROCESS = 500;
/** Crashes within this window count towards the restart back-off; an engine that ran longer starts afresh. */
export const CRASH_WINDOW_MS = 60_000;
/** A first crash restarts at once; each further one in the window doubles the wait, starting here... */
export const RESTART_BACKOFF_BASE_MS = 250;
/** ...up to this: a crash loop costs at most one process start (~1 s of CPU) per 10 s. */
export const RESTART_BACKOFF_MAX_MS = 10_000;

/**
 * Previews (`POST /tts/preview`) run in an engine process of their own, never in the live one: a live turn's
 * sentence must not wait behind preview sentences (20 long previews once pushed a live first_audio from ~40 ms
 * to ~2.7 s). One process, because the previews admitted at once are few (src/tts/preview-queue.ts).
 */
export const PREVIEW_ENGINE_PROCESSES = 1;
/**
 * Preview sentences waiting for the preview engine: each running preview asks for at most two at a time
 * (the next one and the one after it), so this holds far more previews than are let run at once.
 */
export const MAX_QUEUED_PREVIEW_SENTENCES = 8;
/**
 * The preview engine's CPU niceness. It shares the cores with the live engine and the session pacing; at 10 it
 * gets ~10% of a contended core against them (it still finishes, only slower) and all of an idle one.
 */
export const PREVIEW_ENGINE_NICENESS = 10;
/** The preview engine holds ~100 MB of compiled WASM: after this long without a preview it is stopped. */
export const PREVIEW_ENGINE_IDLE_MS = 60_000;

const SHUT_DOWN = 'the builtin TTS engines are shut down';

/** Whose sentence it is: a live session's turn, or a preview that must never delay one. */
export type SentencePriority = 'live' | 'preview';

export interface BuiltinEnginePoolOptions {
  processes?: number;
  sentencesPerProcess?: number;
  maxQueued?: number;
  /** CPU niceness of the engine processes (0: the service's own). */
  niceness?: number;
  logger?: TtsLogger;
}

/** What tests and diagnostics may see of one engine process. */
export interface EngineProcessInfo {
  pid: number | undefined;
  ready: boolean;
  busy: boolean;
  sentences: number;
}

/** Wait before the next start, given the crashes in the window including this one. */
export function restartDelayMs(crashesInWindow: number): number {
  if (crashesInWindow <= 1) return 0;
  return Math.min(RESTART_BACKOFF_MAX_MS, RESTART_BACKOFF_BASE_MS * 2 ** (crashesInWindow - 2));
}

export class BuiltinEnginePool {
  logger: TtsLogger | undefined;
  private readonly processCount: number;
  private readonly sentencesPerProcess: number;
  private readonly maxQueued: number;
  private readonly niceness: number;
  private readonly engines = new Set<EngineChild>();
  private readonly queue: SentenceJob[] = [];
  private readonly readyWaiters: Array<{ resolve(): void; reject(error: Error): void }> = [];
  private crashTimes: number[] = [];
  private restartTimer: NodeJS.Timeout | undefined;
  private nextJobId = 1;
  private closed = false;
  /** No engine may outlive the service, even one that exits without closing the pool. */
  private readonly killAllNow = (): void => {
    for (const engine of this.engines) engine.killNow();
  };

  constructor(options: BuiltinEnginePoolOptions = {}) {
    this.processCount = Math.max(1, options.processes ?? DEFAULT_ENGINE_PROCESSES);
    this.sentencesPerProcess = Math.max(1, options.sentencesPerProcess ?? SENTENCES_PER_ENGINE_PROCESS);
    this.maxQueued = Math.max(1, options.maxQueued ?? MAX_QUEUED_SENTENCES);
    this.niceness = options.niceness ?? 0;
    this.logger = options.logger;
    process.on('exit', this.killAllNow);
    this.replenish();
  }

  /**
   * Synthesises one sentence in an engine process. Aborting `signal` rejects at once with its reason: a
   * queued sentence never reaches an engine, a running one is left to finish there and its result dropped.
   */
  synthesize(task: SentenceTask, signal?: AbortSignal): Promise<EngineAudio> {
    if (this.closed) return Promise.reject(new EngineError(SHUT_DOWN));
    if (signal?.aborted) return Promise.reject(signal.reason);
    if (this.queue.length >= this.maxQueued) {
      return Promise.reject(
        new EngineError(`the builtin TTS engine is overloaded: ${this.maxQueued} sentences are already waiting`),
      );
    }
    return new Promise<EngineAudio>((resolve, reject) => {
      let settled = false;
      const onAbort = (): void => {
        const queued = this.queue.indexOf(job);
        if (queued >= 0) this.queue.splice(queued, 1);
        job.settle({ error: signal!.reason });
      };
      const job: SentenceJob = {
        id: this.nextJobId++,
        task,
        settle: (outcome: SentenceOutcome) => {
          if (settled) return;
          settled = true;
          signal?.removeEventListener('abort', onAbort);
          if ('audio' in outcome) resolve(outcome.audio);
          else reject(outcome.error);
        },
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      this.queue.push(job);
      this.replenish();
      this.dispatch();
    });
  }

  /** Resolves once an engine has compiled both engines (start-up warm-up); rejects if it cannot start. */
  warmUp(): Promise<void> {
    if (this.closed) return Promise.reject(new EngineError(SHUT_DOWN));
    if ([...this.engines].some((engine) => engine.ready)) return Promise.resolve();
    this.replenish();
    return new Promise((resolve, reject) => this.readyWaiters.push({ resolve, reject }));
  }

  processes(): EngineProcessInfo[] {
    return [...this.engines]
      .filter((engine) => engine.alive)
      .map((engine) => ({ pid: engine.pid, ready: engine.ready, busy: engine.busy, sentences: engine.sentences }));
  }

  /** Rejects everything waiting, kills every engine process and waits until they are gone. Idempotent. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    clearTimeout(this.restartTimer);
    const error = new EngineError(SHUT_DOWN);
    for (const job of this.queue.splice(0)) job.settle({ error });
    for (const waiter of this.readyWaiters.splice(0)) waiter.reject(error);
    await Promise.all([...this.engines].map((engine) => engine.kill({ expected: true, reason: SHUT_DOWN })));
    process.off('exit', this.killAllNow);
  }

  private isWornOut(engine: EngineChild): boolean {
    return engine.sentences >= this.sentencesPerProcess;
  }

  /** Engines that count towards `processes`: alive, not leaving, not due for replacement. */
  private freshEngineCount(): number {
    return [...this.engines].filter((engine) => !engine.retiring && !this.isWornOut(engine)).length;
  }

  private replenish(): void {
    if (this.closed || this.restartTimer) return;
    while (this.freshEngineCount() < this.processCount) {
      try {
        const engine = new EngineChild({
          ready: (started) => this.onReady(started),
          idle: (idle) => this.onIdle(idle),
          exit: (exited, exit) => this.onExit(exited, exit),
        });
        this.engines.add(engine);
        this.lowerPriority(engine);
      } catch (error) {
        // No process at all (temp dir or fork refused): treated like a crash at start, with back-off.
        this.onStartFailure(`the engine could not be started: ${pathFreeMessage(error)}`);
        return;
      }
    }
  }

  /** A refused niceness (a platform without it) only costs the preference, never the engine. */
  private lowerPriority(engine: EngineChild): void {
    if (this.niceness === 0 || engine.pid === undefined) return;
    try {
      setPriority(engine.pid, this.niceness);
    } catch (error) {
      this.logger?.warn({ pid: engine.pid, err: error }, 'builtin TTS engine priority not lowered');
    }
  }

  private dispatch(): void {
    while (this.queue.length > 0) {
      const engine = this.idleEngine();
      if (!engine) return;
      engine.run(this.queue.shift()!);
    }
  }

  /** A ready, idle engine; a worn-out one only while its replacement is still starting. */
  private idleEngine(): EngineChild | undefined {
    let wornOut: EngineChild | undefined;
    for (const engine of this.engines) {
      if (!engine.ready || engine.busy || engine.retiring) continue;
      if (!this.isWornOut(engine)) return engine;
      wornOut ??= engine;
    }
    return wornOut;
  }

  private onReady(engine: EngineChild): void {
    this.logger?.debug({ pid: engine.pid }, 'builtin TTS engine ready');
    for (const waiter of this.readyWaiters.splice(0)) waiter.resolve();
    // A replacement is up: the worn-out engines beyond the wanted count leave (after their current sentence).
    let excess = [...this.engines].filter((other) => !other.retiring).length - this.processCount;
    for (const other of this.engines) {
      if (excess <= 0) break;
      if (other.retiring || !this.isWornOut(other)) continue;
      this.logger?.info({ pid: other.pid, sentences: other.sentences }, 'builtin TTS engine recycled');
      other.retire();
      excess -= 1;
    }
    this.dispatch();
  }

  private onIdle(engine: EngineChild): void {
    if (this.isWornOut(engine)) this.replenish();
    this.dispatch();
  }

  private onExit(engine: EngineChild, exit: EngineExit): void {
    this.engines.delete(engine);
    if (this.closed) return;
    if (!exit.expected) {
      this.logger?.warn(
        {
          pid: engine.pid,
          exitCode: exit.exitCode,
          signal: exit.signal,
          duringStart: exit.duringStart,
          reason: exit.reason,
        },
        'builtin TTS engine died; restarting it',
      );
      if (exit.duringStart) this.onStartFailure(exit.reason);
      else this.scheduleRestart();
    }
    this.replenish();
    this.dispatch();
  }

  /**
   * An engine that cannot start will likely fail again: whoever waits for one is told now instead of
   * waiting through the back-off; later requests try again.
   */
  private onStartFailure(reason: string): void {
    if (![...this.engines].some((engine) => engine.ready)) {
      const error = new EngineError(reason);
      for (const job of this.queue.splice(0)) job.settle({ error });
      for (const waiter of this.readyWaiters.splice(0)) waiter.reject(error);
    }
    this.scheduleRestart();
  }

  private scheduleRestart(): void {
    const now = Date.now();
    this.crashTimes = [...this.crashTimes.filter((time) => now - time < CRASH_WINDOW_MS), now];
    const delayMs = restartDelayMs(this.crashTimes.length);
    if (delayMs === 0 || this.restartTimer) return;
    this.logger?.warn({ delayMs, crashesInWindow: this.crashTimes.length }, 'builtin TTS engine restart delayed');
    this.restartTimer = setTimeout(() => {
      this.restartTimer = undefined;
      this.replenish();
      this.dispatch();
    }, delayMs);
  }
}

let shared: BuiltinEnginePool | undefined;
let sharedPreview: BuiltinEnginePool | undefined;
let previewSentencesInFlight = 0;
let previewIdleTimer: NodeJS.Timeout | undefined;
let sharedLogger: TtsLogger | undefined;

function sharedPool(): BuiltinEnginePool {
  shared ??= new BuiltinEnginePool({ logger: sharedLogger });
  return shared;
}

function sharedPreviewPool(): BuiltinEnginePool {
  clearTimeout(previewIdleTimer);
  previewIdleTimer = undefined;
  sharedPreview ??= new BuiltinEnginePool({
    processes: PREVIEW_ENGINE_PROCESSES,
    maxQueued: MAX_QUEUED_PREVIEW_SENTENCES,
    niceness: PREVIEW_ENGINE_NICENESS,
    logger: sharedLogger,
  });
  return sharedPreview;
}

/** Stops the preview engine once no preview has used it for PREVIEW_ENGINE_IDLE_MS. */
function previewSentenceSettled(): void {
  previewSentencesInFlight -= 1;
  if (previewSentencesInFlight > 0 || !sharedPreview) return;
  clearTimeout(previewIdleTimer);
  previewIdleTimer = setTimeout(() => {
    previewIdleTimer = undefined;
    const idle = sharedPreview;
    sharedPreview = undefined;
    void idle?.close();
  }, PREVIEW_ENGINE_IDLE_MS);
  previewIdleTimer.unref();
}

/** Where the shared pools log engine starts, crashes and restarts. */
export function useBuiltinEngineLogger(logger: TtsLogger | undefined): void {
  sharedLogger = logger;
  if (shared) shared.logger = logger;
  if (sharedPreview) sharedPreview.logger = logger;
}

/**
 * One sentence through the service's shared engines (started on first use): live sentences in the live pool,
 * preview sentences in the preview engine, so no live sentence ever queues behind a preview.
 */
export function synthesizeSentenceInEngine(
  task: SentenceTask,
  signal?: AbortSignal,
  priority: SentencePriority = 'live',
): Promise<EngineAudio> {
  if (priority === 'live') return sharedPool().synthesize(task, signal);
  previewSentencesInFlight += 1;
  const work = sharedPreviewPool().synthesize(task, signal);
  work.then(previewSentenceSettled, previewSentenceSettled);
  return work;
}

/** Starts the shared live engines; call at start-up so the first request does not wait for the WASM compile. */
export function warmUpBuiltinEngines(): Promise<void> {
  return sharedPool().warmUp();
}

/** The shared live pool's engine processes (health, tests, diagnostics). */
export function builtinEngineProcesses(): EngineProcessInfo[] {
  return shared?.processes() ?? [];
}

/** The preview engine's processes, if one runs (tests, diagnostics). */
export function builtinPreviewEngineProcesses(): EngineProcessInfo[] {
  return sharedPreview?.processes() ?? [];
}

/** Stops every shared engine process (graceful shutdown, tests); the next use starts new ones. Idempotent. */
export async function closeBuiltinEngines(): Promise<void> {
  const closing = [shared, sharedPreview];
  shared = undefined;
  sharedPreview = undefined;
  clearTimeout(previewIdleTimer);
  previewIdleTimer = undefined;
  await Promise.all(closing.map((pool) => pool?.close()));
}
