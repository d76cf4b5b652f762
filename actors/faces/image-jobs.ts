/**
 * Runs portrait image work in child processes (`image-process.ts`), one process per upload, a bounded number
 * at a time. Why a process and not a worker thread: sharp's work runs on libuv's thread pool, which worker
 * threads share with the service (file reads, LevelDB, other sharp calls), and a process exit waits for work
 * still running on it. A child has its own pool, and SIGKILL ends it at once: at each step's deadline, when the
 * caller aborts (the client left, or shutdown closed its connection) and in `closeImageJobs`.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { ImageReply, ImageRequest } from './image-protocol.ts';

const IMAGE_PROCESS_ENTRY = fileURLToPath(new URL('./image-process.mjs', import.meta.url));

/** Uploads decoded at once: one image process keeps one core busy at most and leaves the other to live sessions. */
export const MAX_RUNNING_IMAGE_JOBS = 1;
/**
 * Uploads waiting for the running one. Each holds its upload (≤ 10 MB) in memory while it waits, and each
 * waits at most a job's deadline per job ahead of it; past this, new uploads are refused (503 + Retry-After).
 */
export const MAX_WAITING_IMAGE_JOBS = 4;
/**
 * Deadline of each step in the image process (start-up + decode, then crop + encode). The header bounds make
 * the worst legal image (50 MP) take a few seconds even on a loaded 2-core host; a step this late is an
 * image built to be slow, and the process is killed.
 */
export const IMAGE_STEP_DEADLINE_MS = 30_000;
/** Retry-After of a full queue: about one upload's processing time. */
export const IMAGE_JOBS_RETRY_AFTER_S = 10;

/** No room for another upload now (→ 503 + Retry-After). */
export class ImageJobsBusyError extends Error {
  override name = 'ImageJobsBusyError';
}

/** The image process gave up on this upload: it was too slow, or died on it (the upload's fault → 400). */
export class ImageJobFailedError extends Error {
  override name = 'ImageJobFailedError';
}

/** One upload's image process: send a request, get its one reply. */
export interface ImageProcess {
  request(message: ImageRequest): Promise<ImageReply>;
}

interface Waiter {
  /** Hands over the slot of an upload that finished (the running count stays the same). */
  start(): void;
  refuse(error: Error): void;
}

let running = 0;
const waiting: Waiter[] = [];
/** Each live image process with the controller that stops its job (closeImageJobs). */
const liveProcesses = new Map<ChildProcess, AbortController>();

/**
 * Runs `work` with a fresh image process once a slot is free; the process is killed when the job settles.
 * Throws `ImageJobsBusyError` at once when `MAX_WAITING_IMAGE_JOBS` uploads already wait. When `signal` aborts
 * (waiting or running) the job rejects at once with its reason; `closeImageJobs` rejects it with
 * `ImageJobsBusyError`. Each request to the process rejects with `ImageJobFailedError` past `stepDeadlineMs`
 * or when the process dies.
 */
export async function withImageProcess<T>(
  work: (process: ImageProcess) => Promise<T>,
  opts: { signal?: AbortSignal; stepDeadlineMs?: number } = {},
): Promise<T> {
  await takeSlot(opts.signal);
  const stopped = new AbortController();
  const signal = opts.signal ? AbortSignal.any([opts.signal, stopped.signal]) : stopped.signal;
  const child = fork(IMAGE_PROCESS_ENTRY, [], {
    // None of the service's own flags (a test's --import hooks, inspector ports): the entry registers tsx itself.
    execArgv: [],
    serialization: 'advanced',
    // stderr stays the service's: a fatal libvips or V8 report is the one diagnostic a crash leaves.
    stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
  });
  liveProcesses.set(child, stopped);
  // 'error' without 'exit' happens when the fork itself fails (no pid); the pending request then rejects.
  child.on('error', () => undefined);
  const deadlineMs = opts.stepDeadlineMs ?? IMAGE_STEP_DEADLINE_MS;
  try {
    // Whatever `work` is waiting on (a request, the face detector), an abort settles the job at once.
    return await untilAborted(work({ request: (message) => requestOf(child, message, deadlineMs, signal) }), signal);
  } finally {
    child.kill('SIGKILL');
    liveProcesses.delete(child);
    releaseSlot();
  }
}

/** Kills every image process now (their uploads fail) and refuses the waiting ones (503); later uploads start afresh. Idempotent. */
export function closeImageJobs(): void {
  for (const [child, stopped] of liveProcesses) {
    stopped.abort(new ImageJobsBusyError('service is shutting down'));
    child.kill('SIGKILL');
  }
  for (const waiter of waiting.splice(0)) waiter.refuse(new ImageJobsBusyError('service is shutting down'));
}

/** The pids of the image processes alive now; for tests and diagnostics. */
export function imageProcessPids(): number[] {
  return [...liveProcesses.keys()].flatMap((child) => (child.pid === undefined ? [] : [child.pid]));
}

async function takeSlot(signal?: AbortSignal): Promise<void> {
  signal?.throwIfAborted();
  if (running < MAX_RUNNING_IMAGE_JOBS) {
    running++;
    return;
  }
  if (waiting.length >= MAX_WAITING_IMAGE_JOBS) throw new ImageJobsBusyError('too many images are being processed; retry shortly');
  await new Promise<void>((resolve, reject) => {
    const waiter: Waiter = {
      start: () => {
        signal?.removeEventListener('abort', onAbort);
        resolve();
      },
      refuse: (error) => {
        signal?.removeEventListener('abort', onAbort);
        reject(error);
      },
    };
    const onAbort = () => {
      waiting.splice(waiting.indexOf(waiter), 1);
      reject(signal!.reason);
    };
    waiting.push(waiter);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

function releaseSlot(): void {
  const next = waiting.shift();
  if (next) next.start();
  else running--;
}

function untilAborted<T>(work: Promise<T>, signal: AbortSignal): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    if (signal.aborted) return onAbort();
    signal.addEventListener('abort', onAbort, { once: true });
    work.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
  });
}

function requestOf(child: ChildProcess, message: ImageRequest, deadlineMs: number, signal: AbortSignal): Promise<ImageReply> {
  return new Promise<ImageReply>((resolve, reject) => {
    const settle = (outcome: () => void) => {
      clearTimeout(timer);
      child.off('message', onMessage);
      child.off('exit', onExit);
      signal.removeEventListener('abort', onAbort);
      outcome();
    };
    const onMessage = (reply: ImageReply) => settle(() => resolve(reply));
    const onExit = () => settle(() => reject(new ImageJobFailedError('image could not be decoded')));
    const onAbort = () => settle(() => reject(signal.reason));
    const timer = setTimeout(
      () => settle(() => reject(new ImageJobFailedError(`image took longer than ${deadlineMs / 1000} s to process`))),
      deadlineMs,
    );
    if (signal.aborted) return onAbort();
    if (child.exitCode !== null || child.signalCode !== null) return onExit();
    child.on('message', onMessage);
    child.once('exit', onExit);
    signal.addEventListener('abort', onAbort, { once: true });
    // A failed send means the process is gone; its 'exit' rejects this request.
    child.send(message, undefined, {}, () => undefined);
  });
}
