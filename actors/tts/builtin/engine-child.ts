/**
 * One built-in engine process, seen from the service: forks it with the V8 flags the engines need, hands
 * it one sentence at a time and turns its death (crash, kill, timeout) into a rejection of the sentence
 * it was running, nothing more. What to do about it (queue, restarts, recycling) is decided in pool.ts.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { EngineAudio } from './engine.ts';
import type { EngineMessage, SentenceMessage } from './protocol.ts';
import type { SentenceTask } from './synthesize-sentence.ts';

const ENGINE_ENTRY = fileURLToPath(new URL('./engine-process.mjs', import.meta.url));

/**
 * Flags of every engine process, whatever flags the service itself runs with. --no-turbo-fast-api-calls:
 * flite's WASI calls corrupt V8's heap through the fast-API path (nodejs/node#46777, #53087). WASI also
 * warns that it is experimental each time an engine starts, which is noise in the service's stderr.
 */
export const ENGINE_EXEC_ARGV: readonly string[] = [
  '--no-turbo-fast-api-calls',
  '--disable-warning=ExperimentalWarning',
];

/**
 * Compiling flite (21 MB of WASM) and loading eSpeak's data: 6.4 s on one idle core of the development VM, over
 * 30 s on a host at half speed while Chromium and a session share it. An engine not up after 90 s is stuck.
 */
export const ENGINE_START_TIMEOUT_MS = 90_000;
/**
 * The slowest sentence measured (200 characters of digits, spelled out: ~2 s of CPU) with a wide margin
 * for a loaded machine (on one core shared with other work a 200-letter word took over 30 s); an engine this
 * late is stuck, not slow, and is killed.
 */
export const SENTENCE_TIMEOUT_MS = 60_000;
/** A retired engine exits as soon as its channel closes (milliseconds); one still there after this is stuck. */
export const ENGINE_EXIT_GRACE_MS = 5_000;

/** A built-in engine failure; the message is written for clients (no paths) and ends up in a 502 `detail`. */
export class EngineError extends Error {
  override name = 'EngineError';
}

export type SentenceOutcome = { audio: EngineAudio } | { error: Error };

export interface SentenceJob {
  readonly id: number;
  readonly task: SentenceTask;
  /** Hands the outcome to whoever waits; a job whose caller already gave up ignores it. */
  settle(outcome: SentenceOutcome): void;
}

export interface EngineExit {
  /** True when the pool asked for it (retired or closed), false for a crash, a kill from outside or a timeout. */
  expected: boolean;
  /** Died before compiling its engines: the next start will likely fail the same way. */
  duringStart: boolean;
  exitCode: number | null;
  signal: NodeJS.Signals | null;
  /** Why, in words fit for a client (no paths). */
  reason: string;
}

export interface EngineChildEvents {
  ready(engine: EngineChild): void;
  /** A sentence finished (either way); the engine takes the next one. */
  idle(engine: EngineChild): void;
  exit(engine: EngineChild, exit: EngineExit): void;
}

export class EngineChild {
  readonly pid: number | undefined;
  /** Sentences answered so far; the pool recycles the process after a fixed number. */
  sentences = 0;
  /** Set by the pool: takes no new sentence and is ended once idle. */
  retiring = false;
  /** Resolves once the process is gone and its work dir removed. */
  readonly exited: Promise<void>;
  private state: 'starting' | 'ready' | 'exited' = 'starting';
  private running: SentenceJob | undefined;
  private timer: NodeJS.Timeout | undefined;
  /** Set when this side ends the process, so its exit is reported with our reason instead of as a crash. */
  private endedBy: { expected: boolean; reason: string } | undefined;
  private readonly child: ChildProcess;
  private readonly workDir: string;
  private markExited!: () => void;

  constructor(private readonly events: EngineChildEvents) {
    this.exited = new Promise((resolve) => (this.markExited = resolve));
    this.workDir = mkdtempSync(path.join(tmpdir(), 'builtin-tts-flite-'));
    this.child = fork(ENGINE_ENTRY, [this.workDir], {
      execArgv: [...ENGINE_EXEC_ARGV],
      serialization: 'advanced',
      // stderr stays the service's: a V8 fatal error report is the one diagnostic a crash leaves.
      stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
    });
    this.pid = this.child.pid;
    this.child.on('message', (message: EngineMessage) => this.onMessage(message));
    this.child.once('exit', (exitCode, signal) => this.onExit(exitCode, signal));
    // 'error' without 'exit' happens when the fork itself fails (no pid, e.g. EAGAIN).
    this.child.once('error', () => this.onExit(null, null));
    this.timer = setTimeout(
      () => this.kill({ expected: false, reason: 'the engine did not start in time' }),
      ENGINE_START_TIMEOUT_MS,
    );
  }

  get ready(): boolean {
    return this.state === 'ready';
  }

  get alive(): boolean {
    return this.state !== 'exited';
  }

  get busy(): boolean {
    return this.running !== undefined;
  }

  /** Sends one sentence; only called on a ready, idle engine. */
  run(job: SentenceJob): void {
    this.running = job;
    this.holdServiceOpen(true);
    this.timer = setTimeout(
      () => this.kill({ expected: false, reason: 'the engine took too long on one sentence' }),
      SENTENCE_TIMEOUT_MS,
    );
    const message: SentenceMessage = { type: 'sentence', id: job.id, task: job.task };
    // A failed send means the channel is closing; the 'exit' that follows rejects the job.
    this.child.send(message, undefined, {}, () => undefined);
  }

  /** Lets the process finish its sentence (if any) and exit; used for recycling. */
  retire(): void {
    this.retiring = true;
    if (!this.busy) this.end({ expected: true, reason: 'the engine was retired' });
  }

  /** Ends the process now (SIGKILL: a stuck WASM loop answers nothing else) and waits until it is gone. */
  async kill(why: { expected: boolean; reason: string }): Promise<void> {
    if (this.alive) {
      this.endedBy ??= why;
      // Whoever awaits this must see the exit: an unreferenced child would let the event loop run dry first.
      this.holdServiceOpen(true);
      this.child.kill('SIGKILL');
    }
    await this.exited;
  }

  /** Last resort at service exit: no waiting, no events, just no orphan and no temp dir left. */
  killNow(): void {
    if (this.alive) this.child.kill('SIGKILL');
    rmSync(this.workDir, { recursive: true, force: true });
  }

  private end(why: { expected: boolean; reason: string }): void {
    this.endedBy ??= why;
    // Closing the channel is the engine's signal to exit; SIGKILL follows if it does not.
    if (this.child.connected) this.child.disconnect();
    this.timer = setTimeout(() => this.child.kill('SIGKILL'), ENGINE_EXIT_GRACE_MS).unref();
  }

  private onMessage(message: EngineMessage): void {
    if (!this.alive) return;
    if (message.type === 'ready') {
      clearTimeout(this.timer);
      this.state = 'ready';
      this.holdServiceOpen(false);
      this.events.ready(this);
    } else if (message.type === 'start-failed') {
      this.endedBy ??= { expected: false, reason: `the engine failed to start: ${message.message}` };
    } else if (this.running && this.running.id === message.id) {
      clearTimeout(this.timer);
      const job = this.running;
      this.running = undefined;
      this.sentences += 1;
      this.holdServiceOpen(false);
      job.settle(message.type === 'result' ? { audio: message.audio } : { error: new EngineError(message.message) });
      if (this.retiring) this.end({ expected: true, reason: 'the engine was retired' });
      else this.events.idle(this);
    }
  }

  private onExit(exitCode: number | null, signal: NodeJS.Signals | null): void {
    if (!this.alive) return;
    const duringStart = this.state === 'starting';
    this.state = 'exited';
    clearTimeout(this.timer);
    rmSync(this.workDir, { recursive: true, force: true });
    const how = signal ? `was killed (${signal})` : `exited (code ${exitCode})`;
    const why = this.endedBy ?? { expected: false, reason: `the engine process ${how}` };
    const job = this.running;
    this.running = undefined;
    job?.settle({ error: new EngineError(`${why.reason} while synthesising this sentence`) });
    this.markExited();
    this.events.exit(this, { expected: why.expected, duringStart, exitCode, signal, reason: why.reason });
  }

  /** An idle engine must not keep the service's event loop alive (scripts, tests); a busy or starting one must. */
  private holdServiceOpen(hold: boolean): void {
    if (hold) {
      this.child.ref();
      this.child.channel?.ref();
    } else {
      this.child.unref();
      this.child.channel?.unref();
    }
  }
}
