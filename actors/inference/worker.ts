/**
 * Piscina inference worker: one onnxruntime `InferenceSession` per model per worker thread, created on the
 * first batch for that model and kept for the worker's life; each task is one batched `run`. Results go
 * back as transferred buffers.
 */
import { performance } from 'node:perf_hooks';
import { workerData } from 'node:worker_threads';
import * as ort from 'onnxruntime-node';
import { move, transferableSymbol, valueSymbol } from 'piscina';
import type { ExecutionProviderName } from './models.ts';
import { concatAlongAxis, type TensorArray, type TensorData, type TensorMap, type TensorType } from './tensors.ts';

export interface InferenceWorkerData {
  /** onnxruntime intra-op threads per session; the pool already runs one worker per core. */
  intraOpThreads: number;
}

export interface InferenceTask {
  /**
   * `load` only creates the session (warm-up); `describe` also returns its declared tensors; `run` runs one batch;
   * `scan` runs a recurrent model over consecutive steps of one stream (`scan` below).
   */
  op: 'load' | 'describe' | 'run' | 'scan';
  modelKey: string;
  file: string;
  executionProviders: readonly ExecutionProviderName[];
  /** Batched inputs plus the model's constants. */
  inputs: TensorMap;
  outputNames: readonly string[];
  /** For `scan`: how many steps, which inputs hold one row per step (axis 0), and which output feeds which input. */
  scan?: ScanSpec;
}

export interface ScanSpec {
  steps: number;
  stepInputs: readonly string[];
  /** Output name → the input it becomes at the next step (Silero: `stateN` → `state`). */
  carry: Readonly<Record<string, string>>;
}

export interface InferenceTaskResult {
  outputs: TensorMap;
  /** Time inside `session.run`, excluding messaging and batching. */
  runMs: number;
  /** Only for `describe`. */
  description?: ModelDescription;
}

/** A model's declared inputs and outputs, as onnxruntime reads them from the file. */
export interface ModelDescription {
  inputs: ort.InferenceSession.ValueMetadata[];
  outputs: ort.InferenceSession.ValueMetadata[];
}

const { intraOpThreads } = workerData as InferenceWorkerData;
const sessions = new Map<string, Promise<ort.InferenceSession>>();

function sessionFor(task: InferenceTask): Promise<ort.InferenceSession> {
  const cacheKey = `${task.modelKey}|${task.file}|${task.executionProviders.join(',')}`;
  let session = sessions.get(cacheKey);
  if (!session) {
    session = ort.InferenceSession.create(task.file, {
      executionProviders: [...task.executionProviders],
      intraOpNumThreads: intraOpThreads,
      interOpNumThreads: 1,
      executionMode: 'sequential',
      graphOptimizationLevel: 'all',
    });
    // A failed load (missing file, unavailable provider) must not poison later batches.
    session.catch(() => sessions.delete(cacheKey));
    sessions.set(cacheKey, session);
  }
  return session;
}

function toPlain(value: ort.Tensor): TensorData {
  const type = value.type as TensorType;
  // Copied into a buffer of our own: the transfer list may only hold plain, detachable ArrayBuffers.
  const data = (value.data as TensorArray).slice();
  return { type, data, dims: [...value.dims] };
}

export default async function runInferenceTask(task: InferenceTask) {
  const session = await sessionFor(task);
  if (task.op === 'load') return { outputs: {}, runMs: 0 } satisfies InferenceTaskResult;
  if (task.op === 'describe') {
    // Plain copies: the metadata objects are clonable, but only own enumerable data crosses the thread boundary.
    const plain = (list: readonly ort.InferenceSession.ValueMetadata[]) =>
      JSON.parse(JSON.stringify(list)) as ort.InferenceSession.ValueMetadata[];
    return {
      outputs: {},
      runMs: 0,
      description: { inputs: plain(session.inputMetadata), outputs: plain(session.outputMetadata) },
    } satisfies InferenceTaskResult;
  }
  const result =
    task.op === 'scan' && task.scan ? await runScan(session, task, task.scan) : await runOnce(session, task);
  return move({
    [transferableSymbol]: Object.values(result.outputs).map((output) => output.data.buffer),
    [valueSymbol]: result,
  });
}

async function runOnce(session: ort.InferenceSession, task: InferenceTask): Promise<InferenceTaskResult> {
  const feeds: Record<string, ort.Tensor> = {};
  for (const [name, input] of Object.entries(task.inputs))
    feeds[name] = new ort.Tensor(input.type, input.data, input.dims);
  const started = performance.now();
  const results = await session.run(feeds, [...task.outputNames]);
  const runMs = performance.now() - started;
  const outputs: TensorMap = {};
  for (const name of task.outputNames) outputs[name] = toPlain(results[name]);
  return { outputs, runMs };
}

/**
 * One stream's consecutive steps in one task: step k feeds row k of each step input and the carried inputs, and
 * its carry outputs become the next step's inputs. The answer holds each other output stacked along axis 0 (one
 * row per step) and, under the carried inputs' names, their values after the last step. A stream behind real time
 * catches up in one message instead of one per 32 ms frame, whose thread hops dominate on a slow host.
 */
async function runScan(
  session: ort.InferenceSession,
  task: InferenceTask,
  scan: ScanSpec,
): Promise<InferenceTaskResult> {
  const feeds: Record<string, ort.Tensor> = {};
  for (const [name, input] of Object.entries(task.inputs)) {
    if (!scan.stepInputs.includes(name)) feeds[name] = new ort.Tensor(input.type, input.data, input.dims);
  }
  const perStep = new Map<string, TensorData[]>();
  let runMs = 0;
  for (let step = 0; step < scan.steps; step++) {
    for (const name of scan.stepInputs) {
      const input = task.inputs[name];
      const row = input.data.length / input.dims[0];
      feeds[name] = new ort.Tensor(input.type, input.data.subarray(step * row, (step + 1) * row) as TensorArray, [
        1,
        ...input.dims.slice(1),
      ]);
    }
    const started = performance.now();
    const results = await session.run(feeds, [...task.outputNames]);
    runMs += performance.now() - started;
    for (const name of task.outputNames) {
      const carriedInto = scan.carry[name];
      if (carriedInto !== undefined) feeds[carriedInto] = results[name];
      else perStep.set(name, [...(perStep.get(name) ?? []), toPlain(results[name])]);
    }
  }
  const outputs: TensorMap = {};
  for (const [name, rows] of perStep) outputs[name] = concatAlongAxis(rows, 0);
  for (const input of Object.values(scan.carry)) outputs[input] = toPlain(feeds[input]);
  return { outputs, runMs };
}
