export interface AsyncQueueOptions<T> {
  /** Size of one item in the unit `capacity` counts (samples for audio); 1 per item by default. */
  weigh?: (item: T) => number;
  /** Most weight held at once; `push` refuses an item that would exceed it. Unbounded by default. */
  capacity?: number;
}

/**
 * A small async queue: producers `push`, one consumer iterates until `end()` or `fail()`. With a
 * `capacity` it is bounded: `push` refuses what does not fit and the producer decides what to drop.
 */
export class AsyncQueue<T> implements AsyncIterable<T> {
  private readonly items: T[] = [];
  private readonly weigh: (item: T) => number;
  private readonly capacity: number;
  private held = 0;
  private waiter: (() => void) | null = null;
  private ended = false;
  private error: unknown = null;

  constructor(options: AsyncQueueOptions<T> = {}) {
    this.weigh = options.weigh ?? (() => 1);
    this.capacity = options.capacity ?? Infinity;
  }

  /** Queues `item`; false (and nothing queued) once ended or when it would exceed the capacity. */
  push(item: T): boolean {
    if (this.ended) return false;
    const weight = this.weigh(item);
    if (this.held + weight > this.capacity) return false;
    this.items.push(item);
    this.held += weight;
    this.wake();
    return true;
  }

  end(): void {
    this.ended = true;
    this.wake();
  }

  fail(error: unknown): void {
    this.error = error;
    this.ended = true;
    this.wake();
  }

  /** Drops every item not taken by the consumer yet (an interrupt makes them stale). */
  clear(): void {
    this.items.length = 0;
    this.held = 0;
  }

  get size(): number {
    return this.items.length;
  }

  /** Total weight of the queued items (their count without `weigh`). */
  get weight(): number {
    return this.held;
  }

  private wake(): void {
    const waiter = this.waiter;
    this.waiter = null;
    waiter?.();
  }

  async *[Symbol.asyncIterator](): AsyncIterator<T> {
    for (;;) {
      if (this.items.length > 0) {
        const item = this.items.shift()!;
        this.held -= this.weigh(item);
        yield item;
        continue;
      }
      if (this.error) throw this.error;
      if (this.ended) return;
      await new Promise<void>((resolve) => (this.waiter = resolve));
    }
  }
}

export interface Deferred<T> {
  promise: Promise<T>;
  resolve(value: T): void;
  reject(error: unknown): void;
}

export function deferred<T>(): Deferred<T> {
  let resolve!: (value: T) => void;
  let reject!: (error: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  promise.catch(() => undefined);
  return { promise, resolve, reject };
}
