/**
 * One inference pool for all ONNX work: piscina worker threads (one per core) running onnxruntime-node,
 * and a micro-batcher in front of them. Callers submit single items (`infer(modelKey, item, signal)`);
 * items for the same model and shape that arrive within `BATCH_WINDOW_MS` of each other, or while every
 * worker is busy, go into one `run` with the batch dimension N (up to the model's `maxBatch`), and the
 * result is cut back into one answer per item. A failed batch — a model error or a worker that dies —
 * rejects only the items in it; the workers keep their loaded models for the next batch.
 */
import { availableParallelism } from 'node:os';
import { Piscina } from 'piscina';
import { INFERENCE_MODELS, type ModelDefinition } from './models.ts';
import { concatAlongAxis, shapeSignature, splitAlongAxis, type TensorMap } from './tensors.ts';
import { abortReason, untilAborted } from '../upstream/abort.ts';
import { PoolLoad, type PoolLoadSnapshot } from '../pool-load.ts';
import type { InferenceTask, InferenceTaskResult, InferenceWorkerData, ModelDescription, ScanSpec } from './worker.ts';

export type { ModelDescription } from './worker.ts';

/** One worker per core: each runs one batch at a time on one onnxruntime thread, so cores are never oversubscribed. */
export const DEFAULT_INFERENCE_THREADS = availableParallelism();
/**
 * How long the first item of a batch waits for company. Concurrent streams' 32 ms audio frames arrive within
 * a millisecond or two of each other; 3 ms adds < 10 % to a frame's budget and turns N runs into one.
 */
export const BATCH_WINDOW_MS = 3;
/**
 * Items waiting for a worker, across all models. Beyond this the pool is saturated and more waiting only
 * adds latency nobody can use (512 VAD frames ≈ 16 s of one stream's audio); callers get
 * `InferenceQueueFullError` and should shed load.
 */
export const MAX_PENDING_ITEMS = 512;
/** onnxruntime intra-op threads per session: parallelism comes from the workers, not from inside a run. */
export const ONNX_INTRA_OP_THREADS = 1;

export class InferenceQueueFullError extends Error {
  constructor() {
    super('inference queue is full');
    this.name = 'InferenceQueueFullError';
  }
}

export class InferencePoolClosedError extends Error {
  constructor() {
    super('inference pool is closed');
    this.name = 'InferencePoolClosedError';
  }
}

export interface InferencePoolOptions {
  threads?: number;
  models?: Readonly<Record<string, ModelDefinition>>;
  batchWindowMs?: number;
  maxPendingItems?: number;
}

export interface InferenceStats {
  /** Items answered (successfully or not) by a batch. */
  items: number;
  batches: number;
  failedBatches: number;
  /** Largest number of items in one batch so far. */
  largestBatch: number;
  /** Total time inside onnxruntime `run` over all successful batches. */
  runMs: number;
}

/** One stream's consecutive steps of a recurrent model (`InferencePool.scan`). */
export interface ScanRequest {
  /** Inputs that change every step, one row per step along axis 0. */
  steps: TensorMap;
  /** The recurrent inputs' values before the first step. */
  carried: TensorMap;
  /** Output name → the input it becomes at the next step. */
  carry: Readonly<Record<string, string>>;
}

/**
 * Steps in one scan task, at most: 64 VAD frames are 2 s of audio, the most a stream may be behind
 * (`MAX_VAD_BACKLOG_MS`), and one such task keeps a worker ~30 ms on a loaded core, so batches of other
 * streams wait no longer than that.
 */
export const MAX_SCAN_STEPS = 64;

interface PendingItem {
  modelKey: string;
  inputs: TensorMap;
  rows: number;
  enqueuedAt: number;
  /** Present for a scan: it runs alone, never stacked with other items. */
  scan?: ScanSpec;
  resolve(outputs: TensorMap): void;
  reject(error: unknown): void;
  /** Set once the caller has its answer (result, error or abort); later outcomes are dropped. */
  settled: boolean;
  detach(): void;
}

const inferenceAborted = (signal: AbortSignal): unknown => abortReason(signal, 'inference aborted');

export class InferencePool {
  private readonly piscina: Piscina;
  private readonly threads: number;
  /** The built-in models plus any registered at run time (`register`). */
  private readonly models: Record<string, ModelDefinition>;
  private readonly batchWindowMs: number;
  private readonly maxPendingItems: number;
  /** Waiting items by model + input shapes (only equal shapes stack), in arrival order within each group. */
  private readonly groups = new Map<string, PendingItem[]>();
  private pendingCount = 0;
  private inFlight = 0;
  private timer: NodeJS.Timeout | undefined;
  private closing: Promise<void> | undefined;
  private readonly load: PoolLoad;
  private readonly counters: InferenceStats = { items: 0, batches: 0, failedBatches: 0, largestBatch: 0, runMs: 0 };
  /** Gives each scan a batching group of its own. */
  private scans = 0;

  constructor(options: InferencePoolOptions = {}) {
    this.threads = Math.max(1, options.threads ?? DEFAULT_INFERENCE_THREADS);
    this.models = { ...(options.models ?? INFERENCE_MODELS) };
    this.batchWindowMs = options.batchWindowMs ?? BATCH_WINDOW_MS;
    this.maxPendingItems = options.maxPendingItems ?? MAX_PENDING_ITEMS;
    this.load = new PoolLoad(this.threads);
    const workerData: InferenceWorkerData = { intraOpThreads: ONNX_INTRA_OP_THREADS };
    this.piscina = new Piscina({
      filename: new URL('./worker-bootstrap.mjs', import.meta.url).href,
      minThreads: this.threads,
      maxThreads: this.threads,
      // The batcher holds items back until a worker is free, so piscina's own queue stays empty.
      concurrentTasksPerWorker: 1,
      workerData,
    });
  }

  get threadCount(): number {
    return this.threads;
  }

  /** Worker threads currently alive (for tests and diagnostics). */
  get workers(): readonly import('node:worker_threads').Worker[] {
    return this.piscina.threads;
  }

  /** Busy threads, items waiting to be batched and busy time (`avatar_pool_*` metrics). */
  get loadSnapshot(): PoolLoadSnapshot {
    return this.load.snapshot(this.pendingCount);
  }

  get stats(): Readonly<InferenceStats> {
    return { ...this.counters };
  }

  /**
   * Runs one item: each of the model's inputs with its own batch axis of size ≥ 1 (usually 1). Resolves with
   * the model's outputs for this item only. Rejects with the signal's reason on abort (a batch already
   * running finishes for the others in it), `InferenceQueueFullError` when saturated.
   */
  infer(modelKey: string, item: TensorMap, signal?: AbortSignal): Promise<TensorMap> {
    const model = this.models[modelKey];
    if (!model) return Promise.reject(new Error(`unknown inference model ${modelKey}`));
    let groupKey: string;
    let rows: number;
    try {
      ({ groupKey, rows } = describeItem(modelKey, model, item));
    } catch (error) {
      return Promise.reject(error);
    }
    return this.enqueue(modelKey, item, groupKey, rows, undefined, signal);
  }

  /**
   * Runs a recurrent model over `steps` consecutive steps of one stream in one worker task (at most
   * `MAX_SCAN_STEPS`): each step's carry outputs feed the next step. Resolves with the other outputs, one row per
   * step along axis 0, and under the carried inputs' names their values after the last step. It waits in the
   * same queue as batches, alone in its group. Rejects like `infer`.
   */
  scan(modelKey: string, request: ScanRequest, signal?: AbortSignal): Promise<TensorMap> {
    const model = this.models[modelKey];
    if (!model) return Promise.reject(new Error(`unknown inference model ${modelKey}`));
    const stepInputs = Object.keys(request.steps);
    const steps = request.steps[stepInputs[0]]?.dims[0] ?? 0;
    if (!(steps >= 1 && steps <= MAX_SCAN_STEPS) || stepInputs.some((name) => request.steps[name].dims[0] !== steps)) {
      return Promise.reject(
        new RangeError(
          `${modelKey}: a scan takes 1 to ${MAX_SCAN_STEPS} steps, one row each along axis 0 of every step input`,
        ),
      );
    }
    const spec: ScanSpec = { steps, stepInputs, carry: request.carry };
    // Rows = maxBatch: the group is ready at once, there is nobody to wait for.
    return this.enqueue(
      modelKey,
      { ...request.steps, ...request.carried },
      `scan#${++this.scans}`,
      model.maxBatch,
      spec,
      signal,
    );
  }

  private enqueue(
    modelKey: string,
    item: TensorMap,
    groupKey: string,
    rows: number,
    scan: ScanSpec | undefined,
    signal: AbortSignal | undefined,
  ): Promise<TensorMap> {
    if (this.closing) return Promise.reject(new InferencePoolClosedError());
    if (signal?.aborted) return Promise.reject(inferenceAborted(signal));
    if (this.pendingCount >= this.maxPendingItems) return Promise.reject(new InferenceQueueFullError());
    return new Promise<TensorMap>((resolve, reject) => {
      const onAbort = (): void => {
        if (pending.settled) return;
        pending.settled = true;
        this.removePending(groupKey, pending);
        reject(inferenceAborted(signal!));
      };
      const pending: PendingItem = {
        modelKey,
        inputs: item,
        rows,
        scan,
        enqueuedAt: performance.now(),
        settled: false,
        resolve,
        reject,
        detach: () => signal?.removeEventListener('abort', onAbort),
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      const group = this.groups.get(groupKey) ?? [];
      group.push(pending);
      this.groups.set(groupKey, group);
      this.pendingCount++;
      this.pump();
    });
  }

  /**
   * Adds a model known only at run time (a user's lip-sync file from configuration). A key stays bound to its
   * first definition: workers cache sessions by key and file.
   */
  register(modelKey: string, definition: ModelDefinition): void {
    const known = this.models[modelKey];
    if (known && known.file !== definition.file)
      throw new Error(`inference model ${modelKey} is already registered with another file`);
    this.models[modelKey] = definition;
  }

  /**
   * Loads the model in one worker and returns its declared inputs and outputs (onnxruntime's session metadata),
   * so a caller can check a signature before the first batch. Rejects when the file cannot be loaded.
   */
  async describe(modelKey: string, signal?: AbortSignal): Promise<ModelDescription> {
    const model = this.models[modelKey];
    if (!model) throw new Error(`unknown inference model ${modelKey}`);
    if (this.closing) throw new InferencePoolClosedError();
    const task: InferenceTask = {
      op: 'describe',
      modelKey,
      file: model.file,
      executionProviders: model.executionProviders ?? ['cpu'],
      inputs: {},
      outputNames: [],
    };
    const result = this.piscina.run(task) as Promise<InferenceTaskResult>;
    const { description } = await (signal ? untilAborted(result, signal, inferenceAborted) : result);
    if (!description) throw new Error('inference worker returned no model description');
    return description;
  }

  /**
   * Loads a model on every worker ahead of the first real batch (session creation costs tens of ms). Best
   * effort: one load task per thread, sent together so each idle worker takes one.
   */
  async warmUp(modelKey: string, signal?: AbortSignal): Promise<void> {
    const model = this.models[modelKey];
    if (!model) throw new Error(`unknown inference model ${modelKey}`);
    if (this.closing) throw new InferencePoolClosedError();
    const task: InferenceTask = {
      op: 'load',
      modelKey,
      file: model.file,
      executionProviders: model.executionProviders ?? ['cpu'],
      inputs: {},
      outputNames: [],
    };
    // The signal is not handed to piscina: aborting a task there kills its worker and every model it loaded.
    const loads = Promise.all(Array.from({ length: this.threads }, () => this.piscina.run(task)));
    await (signal ? untilAborted(loads, signal, inferenceAborted) : loads);
  }

  /** Rejects waiting items, stops the workers (a batch in flight rejects its items); safe to call twice. */
  close(): Promise<void> {
    if (this.closing) return this.closing;
    clearTimeout(this.timer);
    this.timer = undefined;
    for (const group of this.groups.values()) {
      for (const pending of group) this.settle(pending, () => pending.reject(new InferencePoolClosedError()));
    }
    this.groups.clear();
    this.pendingCount = 0;
    this.closing = this.piscina.destroy();
    return this.closing;
  }

  private removePending(groupKey: string, pending: PendingItem): void {
    const group = this.groups.get(groupKey);
    const index = group?.indexOf(pending) ?? -1;
    if (!group || index < 0) return;
    group.splice(index, 1);
    this.pendingCount--;
    if (group.length === 0) this.groups.delete(groupKey);
  }

  private settle(pending: PendingItem, answer: () => void): void {
    if (pending.settled) return;
    pending.settled = true;
    pending.detach();
    answer();
  }

  /** Sends every ready group to a free worker; a group is ready when full or when its oldest item has waited the window. */
  private pump(): void {
    if (this.closing) return;
    const now = performance.now();
    while (this.inFlight < this.threads) {
      const groupKey = this.nextReadyGroup(now);
      if (groupKey === undefined) break;
      this.dispatch(this.takeBatch(groupKey));
    }
    this.scheduleWindow(now);
  }

  private nextReadyGroup(now: number): string | undefined {
    let chosen: string | undefined;
    let oldest = Infinity;
    for (const [groupKey, group] of this.groups) {
      const head = group[0];
      const rows = group.reduce((sum, pending) => sum + pending.rows, 0);
      const ready = rows >= this.models[head.modelKey].maxBatch || now - head.enqueuedAt >= this.batchWindowMs;
      if (ready && head.enqueuedAt < oldest) {
        oldest = head.enqueuedAt;
        chosen = groupKey;
      }
    }
    return chosen;
  }

  private takeBatch(groupKey: string): PendingItem[] {
    const group = this.groups.get(groupKey)!;
    const maxBatch = this.models[group[0].modelKey].maxBatch;
    let rows = 0;
    let count = 0;
    // At least one item, even one with more rows than maxBatch on its own.
    while (count < group.length && (count === 0 || rows + group[count].rows <= maxBatch)) rows += group[count++].rows;
    const batch = group.splice(0, count);
    this.pendingCount -= batch.length;
    if (group.length === 0) this.groups.delete(groupKey);
    return batch;
  }

  /** Wakes the pump when the oldest waiting item's window closes, if a worker is free to take it. */
  private scheduleWindow(now: number): void {
    if (this.timer || this.pendingCount === 0 || this.inFlight >= this.threads) return;
    let earliest = Infinity;
    for (const group of this.groups.values()) earliest = Math.min(earliest, group[0].enqueuedAt);
    this.timer = setTimeout(
      () => {
        this.timer = undefined;
        this.pump();
      },
      Math.max(0, earliest + this.batchWindowMs - now),
    );
  }

  private dispatch(batch: PendingItem[]): void {
    const modelKey = batch[0].modelKey;
    const model = this.models[modelKey];
    const scan = batch[0].scan;
    const inputs: TensorMap = { ...model.constants };
    for (const [name, { batchAxis }] of Object.entries(model.inputs)) {
      inputs[name] = scan
        ? batch[0].inputs[name]
        : concatAlongAxis(
            batch.map((pending) => pending.inputs[name]),
            batchAxis,
          );
    }
    const task: InferenceTask = {
      op: scan ? 'scan' : 'run',
      modelKey,
      file: model.file,
      executionProviders: model.executionProviders ?? ['cpu'],
      inputs,
      outputNames: Object.keys(model.outputs),
      scan,
    };
    // Only the freshly stacked buffers move to the worker; callers' arrays and shared constants stay put.
    const transferList = scan ? [] : Object.keys(model.inputs).map((name) => inputs[name].data.buffer as ArrayBuffer);
    this.inFlight++;
    const done = this.load.begin();
    this.counters.batches++;
    this.counters.items += batch.length;
    this.counters.largestBatch = Math.max(this.counters.largestBatch, batch.length);
    (this.piscina.run(task, { transferList }) as Promise<InferenceTaskResult>)
      .then(
        (result) => {
          this.counters.runMs += result.runMs;
          if (scan) return this.settle(batch[0], () => batch[0].resolve(result.outputs));
          const perItem = batch.map((): TensorMap => ({}));
          for (const [name, { batchAxis }] of Object.entries(model.outputs)) {
            const pieces = splitAlongAxis(
              result.outputs[name],
              batchAxis,
              batch.map((pending) => pending.rows),
            );
            pieces.forEach((piece, index) => (perItem[index][name] = piece));
          }
          batch.forEach((pending, index) => this.settle(pending, () => pending.resolve(perItem[index])));
        },
        (error: unknown) => {
          this.counters.failedBatches++;
          for (const pending of batch) this.settle(pending, () => pending.reject(error));
        },
      )
      .finally(() => {
        done();
        this.inFlight--;
        this.pump();
      });
  }
}

/** Checks an item against its model and returns the batching group it belongs to and its row count. */
function describeItem(modelKey: string, model: ModelDefinition, item: TensorMap): { groupKey: string; rows: number } {
  const signatures: string[] = [modelKey];
  let rows: number | undefined;
  for (const [name, { batchAxis }] of Object.entries(model.inputs)) {
    const input = item[name];
    if (!input) throw new RangeError(`${modelKey}: missing input ${name}`);
    const inputRows = input.dims[batchAxis];
    if (!(inputRows >= 1) || (rows !== undefined && inputRows !== rows)) {
      throw new RangeError(
        `${modelKey}: input ${name} has ${inputRows} rows on axis ${batchAxis}, expected ${rows ?? '≥ 1'}`,
      );
    }
    rows = inputRows;
    signatures.push(`${name}:${shapeSignature(input, batchAxis)}`);
  }
  return { groupKey: signatures.join('|'), rows: rows ?? 1 };
}
