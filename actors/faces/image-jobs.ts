/**
 * Runs portrait image work in a child process (`image-process.ts`), a bounded number of uploads at a time.
 * Why a process and not a worker thread: sharp's work runs on libuv's thread pool, which worker threads share
 * with the service (file reads, LevelDB, other sharp calls), and a process exit waits for work still running
 * on it. A child has its own pool, and SIGKILL ends it at once: at each step's deadline, when the caller aborts
 * (the client left, or shutdown closed its connection) and in `closeImageJobs`. A process whose upload went
 * well is kept for the next one (start-up costs ~0.5 s of CPU) until it has been idle for a while.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { ImageReply, ImageRequest } from './image-protocol.ts';
import { Admission, Overloaded } from '../admission.ts';
import { untilAborted } from '../upstream/abort.ts';

const IMAGE_PROCESS_ENTRY = fileURLToPath(new URL('./image-process.mjs', import.meta.url));

/** Uploads decoded at once: one image process keeps one core busy at most and leaves the other to live sessions. */
export const MAX_RUNNING_IMAGE_JOBS = 1;
/**
 * Uploads waiting for the running one. Each holds its upload (≤ 10 MB a photo, ≤ 50 MB a clip) in memory while it
 * waits, and each waits at most a job's deadlines per job ahead of it; past this, new uploads are refused (503 +
 * Retry-After), before their body is read when they come through `admitImageJob`.
 */
export const MAX_WAITING_IMAGE_JOBS = 4;
/**
 * Deadline of each step in the image process (decode; crop + encode). The header bounds make the worst legal
 * image (50 MP) take a few seconds even on a loaded 2-core host; a step this late is an image built to be slow,
 * and the process is killed.
 */
export const IMAGE_STEP_DEADLINE_MS = 30_000;
/** Start-up of an image process (node, tsx, sharp: ~0.5 s of CPU); one not ready after this is stuck. */
export const IMAGE_PROCESS_START_TIMEOUT_MS = 30_000;
/** An idle image process is kept this long for the next upload, then ends (it holds ~50 MB doing nothing). */
export const IMAGE_PROCESS_IDLE_MS = 60_000;
/** Retry-After of a full queue: about one upload's processing time. */
export const IMAGE_JOBS_RETRY_AFTER_S = 10;

/** No room for another upload now, or the service is closing (→ 503 + Retry-After: `IMAGE_JOBS_RETRY_AFTER_S`). */
export class ImageJobsBusyError extends Overloaded {
  constructor(detail: string) {
    super(detail, IMAGE_JOBS_RETRY_AFTER_S);
  }
}

/** The image process gave up on this upload: it was too slow, or died on it (the upload's fault → 400). */
export class ImageJobFailedError extends Error {
  override name = 'ImageJobFailedError';
}

/** One upload's view of its image process: send a request, get its one reply. */
export interface ImageProcess {
  request(message: ImageRequest): Promise<ImageReply>;
}

/** The slots uploads are processed in, and the line waiting for them. */
const slots = new Admission({
  maxRunning: MAX_RUNNING_IMAGE_JOBS,
  maxWaiting: MAX_WAITING_IMAGE_JOBS,
  refusal: () => new ImageJobsBusyError('too many images are being processed; retry shortly'),
});
/** Creations admitted before their upload was read and not yet answered (`admitImageJob`): every place a job can take. */
const places = new Admission({
  maxRunning: MAX_RUNNING_IMAGE_JOBS + MAX_WAITING_IMAGE_JOBS,
  maxWaiting: 0,
  refusal: () => new ImageJobsBusyError('too many avatars are being created; retry shortly'),
});
/** Each image process running an upload, with the controller that stops the upload (closeImageJobs). */
const busyProcesses = new Map<ChildProcess, AbortController>();
/** Jobs running in a slot without an image process (clips), stopped by closeImageJobs. */
const slotJobs = new Set<AbortController>();
/** The process kept after a successful upload, ready for the next one. */
let idle: { child: ChildProcess; timer: NodeJS.Timeout } | undefined;

/**
 * Admits one avatar creation before its upload is read: at most `MAX_RUNNING_IMAGE_JOBS + MAX_WAITING_IMAGE_JOBS`
 * at once, the places a job can take. Counting only jobs that had reached a slot, every upload still streaming
 * in was buffered whole (up to 50 MB a clip) before the excess ones were refused; admitted first, the uploads
 * held in memory are bounded by those places, and one that would be refused is refused unread. Throws
 * `ImageJobsBusyError` when every place is taken; returns the release (idempotent), for when the request is
 * answered or its client has gone.
 */
export function admitImageJob(): () => void {
  return places.take();
}

/** Creations admitted and not yet released; for tests and diagnostics. */
export function admittedImageJobs(): number {
  return places.load.running;
}

/**
 * Runs `work` with an image process once a slot is free. Throws `ImageJobsBusyError` at once when
 * `MAX_WAITING_IMAGE_JOBS` uploads already wait. When `signal` aborts (waiting or running) the job rejects at
 * once with its reason; `closeImageJobs` rejects it with `ImageJobsBusyError`. Each request to the process
 * rejects with `ImageJobFailedError` past `stepDeadlineMs` or when the process dies. The process is killed
 * unless `work` succeeds.
 */
export async function withImageProcess<T>(
  work: (process: ImageProcess) => Promise<T>,
  opts: { signal?: AbortSignal; stepDeadlineMs?: number } = {},
): Promise<T> {
  const releaseSlot = await slots.acquire(opts.signal);
  const stopped = new AbortController();
  const signal = opts.signal ? AbortSignal.any([opts.signal, stopped.signal]) : stopped.signal;
  const { child, ready } = takeProcess();
  busyProcesses.set(child, stopped);
  const stepDeadlineMs = opts.stepDeadlineMs ?? IMAGE_STEP_DEADLINE_MS;
  let succeeded = false;
  try {
    const request = async (message: ImageRequest) => {
      await ready;
      return requestOf(child, message, stepDeadlineMs, signal);
    };
    // Whatever `work` is waiting on (a request, the face detector), an abort settles the job at once.
    const result = await untilAborted(work({ request }), signal);
    succeeded = true;
    return result;
  } finally {
    busyProcesses.delete(child);
    if (succeeded && alive(child)) keepIdle(child);
    else child.kill('SIGKILL');
    releaseSlot();
  }
}

/**
 * Runs `work` in one of the same `MAX_RUNNING_IMAGE_JOBS` slots (and queue) as the portraits, without an image
 * process: a clip upload, whose decoding runs in ffmpeg's own process. Busy and abort rules as `withImageProcess`.
 */
export async function withImageJobSlot<T>(
  work: (signal: AbortSignal) => Promise<T>,
  opts: { signal?: AbortSignal } = {},
): Promise<T> {
  const releaseSlot = await slots.acquire(opts.signal);
  const stopped = new AbortController();
  const signal = opts.signal ? AbortSignal.any([opts.signal, stopped.signal]) : stopped.signal;
  slotJobs.add(stopped);
  try {
    return await untilAborted(work(signal), signal);
  } finally {
    slotJobs.delete(stopped);
    releaseSlot();
  }
}

/** Kills every image process now (their uploads fail) and refuses the waiting ones (503); later uploads start afresh. Idempotent. */
export function closeImageJobs(): void {
  for (const [child, stopped] of busyProcesses) {
    stopped.abort(new ImageJobsBusyError('service is shutting down'));
    child.kill('SIGKILL');
  }
  for (const stopped of slotJobs) stopped.abort(new ImageJobsBusyError('service is shutting down'));
  slots.refuseWaiting(new ImageJobsBusyError('service is shutting down'));
  endIdle();
}

/** The pids of the image processes alive now (running an upload or idle); for tests and diagnostics. */
export function imageProcessPids(): number[] {
  const children = [...busyProcesses.keys(), ...(idle ? [idle.child] : [])];
  return children.flatMap((child) => (child.pid === undefined || !alive(child) ? [] : [child.pid]));
}

/** The idle process if there is one, else a new one; `ready` resolves once it can take requests. */
function takeProcess(): { child: ChildProcess; ready: Promise<void> } {
  if (idle && alive(idle.child)) {
    const { child } = idle;
    endIdle({ keep: true });
    holdServiceOpen(child, true);
    return { child, ready: Promise.resolve() };
  }
  endIdle();
  const child = fork(IMAGE_PROCESS_ENTRY, [], {
    // None of the service's own flags (a test's --import hooks, inspector ports): the entry registers tsx itself.
    execArgv: [],
    serialization: 'advanced',
    // stderr stays the service's: a fatal libvips or V8 report is the one diagnostic a crash leaves.
    stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
  });
  // 'error' without 'exit' happens when the fork itself fails (no pid); the pending request then rejects.
  child.on('error', () => undefined);
  const late = () => new ImageJobsBusyError('image processing could not start in time; retry shortly');
  const ready = replyOf(child, IMAGE_PROCESS_START_TIMEOUT_MS, late).then((reply) => {
    if (reply.type !== 'ready') throw new Error(`image process said ${reply.type} before ready`);
  });
  // Nobody may be waiting yet (the job was aborted first): the rejection is then only the process's end.
  ready.catch(() => undefined);
  return { child, ready };
}

function keepIdle(child: ChildProcess): void {
  endIdle();
  holdServiceOpen(child, false);
  const timer = setTimeout(() => endIdle(), IMAGE_PROCESS_IDLE_MS);
  timer.unref();
  idle = { child, timer };
}

function endIdle(opts: { keep?: boolean } = {}): void {
  if (!idle) return;
  clearTimeout(idle.timer);
  if (!opts.keep) idle.child.kill('SIGKILL');
  idle = undefined;
}

/** An idle process must not keep the service's event loop alive (scripts, tests); a busy one must. */
function holdServiceOpen(child: ChildProcess, hold: boolean): void {
  if (hold) {
    child.ref();
    child.channel?.ref();
  } else {
    child.unref();
    child.channel?.unref();
  }
}

function alive(child: ChildProcess): boolean {
  return child.exitCode === null && child.signalCode === null && child.connected;
}

function requestOf(
  child: ChildProcess,
  message: ImageRequest,
  deadlineMs: number,
  signal: AbortSignal,
): Promise<ImageReply> {
  signal.throwIfAborted();
  const late = () => new ImageJobFailedError(`image took longer than ${deadlineMs / 1000} s to process`);
  const reply = replyOf(child, deadlineMs, late, signal);
  // A failed send means the process is gone; its 'exit' rejects the reply.
  child.send(message, undefined, {}, () => undefined);
  return reply;
}

/** The process's next message, or a rejection: `late()` past `deadlineMs`, `ImageJobFailedError` when it exits, the reason on abort. */
function replyOf(
  child: ChildProcess,
  deadlineMs: number,
  late: () => Error,
  signal?: AbortSignal,
): Promise<ImageReply> {
  return new Promise<ImageReply>((resolve, reject) => {
    const settle = (outcome: () => void) => {
      clearTimeout(timer);
      child.off('message', onMessage);
      child.off('exit', onExit);
      signal?.removeEventListener('abort', onAbort);
      outcome();
    };
    const onMessage = (reply: ImageReply) => settle(() => resolve(reply));
    const onExit = () => settle(() => reject(new ImageJobFailedError('image could not be decoded')));
    const onAbort = () => settle(() => reject(signal!.reason));
    const timer = setTimeout(() => settle(() => reject(late())), deadlineMs);
    if (child.exitCode !== null || child.signalCode !== null) return onExit();
    child.on('message', onMessage);
    child.once('exit', onExit);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}
