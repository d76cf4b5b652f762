/**
 * A process-wide piscina pool made on first use and let go by `close` (the next use makes a fresh one): the audio
 * decoder, the face detector and the KServe JSON reader. It gets its one 'error' listener when it is made, never
 * per call (a listener per call piled up: MaxListenersExceededWarning after ten calls). That listener is there
 * because a thread that fails between tasks is re-emitted as 'error', which unheard would crash the service; the
 * task it ran, if any, has already failed on its own.
 */
import type { Piscina } from 'piscina';

export class LazyPiscina<Task, Result> {
  private pool: Piscina<Task, Result> | null = null;

  constructor(private readonly create: () => Piscina<Task, Result>) {}

  /** The pool, made now if there is none. */
  get(): Piscina<Task, Result> {
    if (this.pool) return this.pool;
    const pool = this.create();
    pool.on('error', () => undefined);
    this.pool = pool;
    return pool;
  }

  /** Its worker threads (none before first use or after `close`). */
  get threads(): readonly import('node:worker_threads').Worker[] {
    return this.pool?.threads ?? [];
  }

  /** Stops the threads; the next `get` makes a fresh pool. Idempotent. */
  async close(): Promise<void> {
    const current = this.pool;
    this.pool = null;
    await current?.destroy();
  }
}
