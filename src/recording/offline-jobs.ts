import { randomUUID } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import type { FrameRenderer } from '../../actors/media/playout.ts';
import type { TtsProvider } from '../../actors/tts/types.ts';
import type { JobStore, StoredJob } from '../store/jobs.ts';
import { resolveSegments, type PreparedSegment } from './offline-input.ts';
import { renderOfflineMp4 } from './offline-render.ts';
import { writeBundleCaptions } from './captions.ts';
import { errorForLog } from '../logger.ts';
import { Admission, Overloaded, type Release } from '../../actors/admission.ts';

/** Finished jobs (complete or failed) and their MP4 are removed this long after finishing. */
export const BUNDLE_RETENTION_MS = 24 * 3600 * 1000;
/** Jobs rendered at once per service: rendering already uses every pool worker, a second job would only halve both. */
export const BUNDLE_CONCURRENCY = 1;
/** Jobs waiting beyond the running ones; more is refused with 503 rather than queued for hours. */
export const BUNDLE_MAX_QUEUED = 16;
/** Retry-After of a full queue: a job renders for tens of seconds, so a place frees within about this. */
export const BUNDLE_QUEUE_RETRY_AFTER_S = 30;
const SWEEP_EVERY_MS = 10 * 60 * 1000;
/**
 * Progress is persisted at most this often. Clients are shown only persisted state, so this is also how
 * stale a poll can be; a LevelDB put every half second is nothing next to rendering.
 */
const PERSIST_PROGRESS_EVERY_MS = 500;
/** The `error` of a job that a restart (crash or shutdown) cut off: its input is not persisted, so it cannot resume. */
export const INTERRUPTED_BY_RESTART = 'interrupted by restart';
/** The finished artifacts of a job (the MP4, its WebVTT captions); anything else in the bundles directory is a leftover after a restart. */
const ARTIFACT_NAME = /^(.+)\.(?:mp4|vtt)$/;
/** Share of progress for speech synthesis; the rest is frames (docs/recording.md). */
export const TTS_SHARE = 0.1;
export const RENDER_SHARE = 0.89;
const JOB_ID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

export interface OfflineJobSpec {
  sessionId: string;
  avatarId: string;
  model: string;
  ttsProvider: string;
  voice: string | null;
  ttsModel: string | null;
  segments: PreparedSegment[];
}

export interface OfflineJobsDeps {
  dataDir: string;
  store: JobStore;
  sampleRate: number;
  /** Opens a renderer of its own for the job (not the session's: the job outlives it and must not steal its frames). */
  openRenderer(
    avatarId: string,
    model: string,
    signal: AbortSignal,
  ): Promise<FrameRenderer & { close(): void | Promise<void> }>;
  tts(providerId: string): TtsProvider;
  logger?: {
    info(obj: object, msg: string): void;
    warn(obj: object, msg: string): void;
    error(obj: object, msg: string): void;
  };
  retentionMs?: number;
  concurrency?: number;
  maxQueued?: number;
  /**
   * A job finished, complete or failed (also one a restart failed), once its record is stored (the
   * `bundle.completed` / `bundle.failed` webhooks).
   */
  onSettled?: (job: StoredJob) => void;
}

/** What the routes and the service use of an offline queue: this one, or BullMQ's in cluster mode (src/cluster/offline-queue.ts). */
export type OfflineJobs = Pick<
  OfflineJobQueue,
  'submit' | 'get' | 'artifactPath' | 'captionsPath' | 'whenSettled' | 'recover' | 'close' | 'sweep'
>;

/** The queue is full or closing (→ 503 + Retry-After: `BUNDLE_QUEUE_RETRY_AFTER_S`). */
export class QueueFullError extends Overloaded {
  constructor(max: number) {
    super(`offline bundle queue is full (${max} waiting); retry later`, BUNDLE_QUEUE_RETRY_AFTER_S);
  }
}

interface Live {
  /** The job as it runs, ahead of the store. */
  job: StoredJob;
  /**
   * The job as last persisted: what clients are shown. Never ahead of the store, so a restart (which
   * continues from the store) can never show a poller an earlier status or a smaller progress.
   */
  visible: StoredJob;
  spec: OfflineJobSpec;
  abort: AbortController;
  lastPersist: number;
  /** Puts of this job's record in issue order, so a late progress write cannot overwrite the final state. */
  persisting: Promise<void>;
}

/**
 * The offline bundle job queue: jobs persist in LevelDB, run `concurrency` at a time in submission order,
 * render to `<dataDir>/bundles/<job_id>.mp4` (names chosen here), and expire `retentionMs` after finishing.
 * After a restart, a job that had not finished is marked `failed` with `interrupted by restart` (its input
 * is not persisted, so it cannot be resumed), keeping the progress it had persisted, which is the most any
 * client was shown; finished jobs stay downloadable. The MP4 is renamed into place before the `complete`
 * record is written, so the start-up sweep removes every file that no `complete` record points to.
 */
export class OfflineJobQueue {
  private readonly live = new Map<string, Live>();
  /** The jobs rendering (`concurrency`) and the line of those waiting to (`maxQueued`), in submission order. */
  private readonly slots: Admission;
  private readonly dir: string;
  private readonly retentionMs: number;
  private sweepTimer: NodeJS.Timeout | null = null;
  private closed = false;
  private readonly settledWaiters = new Map<string, Array<() => void>>();

  constructor(private readonly deps: OfflineJobsDeps) {
    this.dir = path.join(deps.dataDir, 'bundles');
    this.retentionMs = deps.retentionMs ?? BUNDLE_RETENTION_MS;
    const maxQueued = deps.maxQueued ?? BUNDLE_MAX_QUEUED;
    this.slots = new Admission({
      maxRunning: deps.concurrency ?? BUNDLE_CONCURRENCY,
      maxWaiting: maxQueued,
      refusal: () => new QueueFullError(maxQueued),
    });
  }

  /**
   * Start-up: fails jobs a previous process left unfinished (reported through `onSettled` like any failure),
   * removes every file in the bundles directory that is not the MP4 of a `complete` job (partial renders, an MP4
   * renamed just before a crash), sweeps expired jobs and starts the sweeper.
   */
  async recover(now = new Date()): Promise<{ interruptedJobs: number; filesRemoved: number }> {
    await fs.mkdir(this.dir, { recursive: true });
    const complete = new Set<string>();
    let interruptedJobs = 0;
    for (const job of await this.deps.store.all()) {
      if (job.status === 'pending' || job.status === 'running') {
        const failed = this.finished(job, 'failed', INTERRUPTED_BY_RESTART, now);
        await this.deps.store.put(failed);
        interruptedJobs++;
        // Settled now, as a job failing at run time is (its `bundle.failed`): the process that ran it died first.
        this.deps.onSettled?.(failed);
      } else if (job.status === 'complete') {
        complete.add(job.job_id);
      }
    }
    let filesRemoved = 0;
    for (const name of await fs.readdir(this.dir)) {
      const artifact = ARTIFACT_NAME.exec(name);
      if (artifact && complete.has(artifact[1])) continue;
      await fs.rm(path.join(this.dir, name), { recursive: true, force: true });
      filesRemoved++;
    }
    await this.sweep(now.getTime());
    this.sweepTimer = setInterval(() => void this.sweep(), SWEEP_EVERY_MS);
    this.sweepTimer.unref();
    return { interruptedJobs, filesRemoved };
  }

  async submit(spec: OfflineJobSpec): Promise<StoredJob> {
    if (this.closed) throw new QueueFullError(0);
    const abort = new AbortController();
    // A place in line is taken before the job is stored, so a full queue refuses before writing anything.
    const slot = this.slots.acquire(abort.signal);
    const now = new Date().toISOString();
    const job: StoredJob = {
      job_id: randomUUID(),
      session_id: spec.sessionId,
      status: 'pending',
      progress: 0,
      error: null,
      created_at: now,
      updated_at: now,
    };
    try {
      await this.deps.store.put(job);
    } catch (error) {
      abort.abort(error);
      void slot.then(
        (release) => release(),
        () => undefined,
      );
      throw error;
    }
    const live: Live = { job, visible: job, spec, abort, lastPersist: 0, persisting: Promise.resolve() };
    this.live.set(job.job_id, live);
    this.deps.logger?.info({ jobId: job.job_id, sessionId: spec.sessionId }, 'offline bundle queued');
    // A job aborted while waiting (close) leaves the line; close settles it as failed.
    slot.then(
      (release) => this.runInSlot(live, release),
      () => undefined,
    );
    return { ...job };
  }

  /** The job as the client sees it: its last persisted state (see `Live.visible`). */
  async get(jobId: string): Promise<StoredJob | undefined> {
    if (!JOB_ID_RE.test(jobId)) return undefined;
    const live = this.live.get(jobId);
    if (live) return { ...live.visible };
    return this.deps.store.get(jobId);
  }

  /** Absolute path of a complete job's MP4; the name comes from the validated job id only. */
  artifactPath(jobId: string): string {
    if (!JOB_ID_RE.test(jobId)) throw new Error('job id is not a UUID4');
    return path.join(this.dir, `${jobId}.mp4`);
  }

  /** Absolute path of a complete job's captions (WebVTT, beside its MP4); the name comes from the validated job id only. */
  captionsPath(jobId: string): string {
    if (!JOB_ID_RE.test(jobId)) throw new Error('job id is not a UUID4');
    return path.join(this.dir, `${jobId}.vtt`);
  }

  /** Resolves once the job is complete or failed (for tests and benches). */
  whenSettled(jobId: string): Promise<void> {
    if (!this.live.has(jobId)) return Promise.resolve();
    return new Promise((resolve) => {
      const list = this.settledWaiters.get(jobId) ?? [];
      list.push(resolve);
      this.settledWaiters.set(jobId, list);
    });
  }

  /** Removes finished jobs (record and MP4) past their expiry. */
  async sweep(now = Date.now()): Promise<void> {
    try {
      for (const job of await this.deps.store.all()) {
        if (this.live.has(job.job_id) || !job.expires_at || Date.parse(job.expires_at) > now) continue;
        await fs.rm(this.artifactPath(job.job_id), { force: true });
        await fs.rm(this.captionsPath(job.job_id), { force: true });
        await this.deps.store.delete(job.job_id);
      }
    } catch (error) {
      this.deps.logger?.warn({ err: errorForLog(error) }, 'offline bundle sweep failed');
    }
  }

  /** Aborts running jobs and fails queued ones, persisting both as failed: interrupted by the restart to come. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.sweepTimer) clearInterval(this.sweepTimer);
    const settling = [...this.live.keys()].map((id) => this.whenSettled(id));
    for (const live of this.live.values()) live.abort.abort(new Error(INTERRUPTED_BY_RESTART));
    // Queued jobs never start; fail them here. Running ones fail through their abort.
    for (const live of [...this.live.values()]) {
      if (live.job.status === 'pending') await this.settle(live, 'failed', INTERRUPTED_BY_RESTART);
    }
    await Promise.all(settling);
  }

  private partialPath(jobId: string): string {
    return path.join(this.dir, `${jobId}.partial.mp4`);
  }

  private finished(job: StoredJob, status: 'complete' | 'failed', error: string | null, now = new Date()): StoredJob {
    return {
      ...job,
      status,
      error,
      progress: status === 'complete' ? 1 : job.progress,
      updated_at: now.toISOString(),
      finished_at: now.toISOString(),
      expires_at: new Date(now.getTime() + this.retentionMs).toISOString(),
    };
  }

  private runInSlot(live: Live, release: Release): void {
    if (this.closed || !this.live.has(live.job.job_id)) {
      release();
      return;
    }
    this.run(live)
      // run() settles the job itself; only releasing its renderer can still throw here.
      .catch((error: unknown) => this.deps.logger?.warn({ err: errorForLog(error) }, 'offline renderer release failed'))
      .finally(release);
  }

  private async run(live: Live): Promise<void> {
    const { spec, abort } = live;
    const signal = abort.signal;
    const log = this.deps.logger;
    const started = performance.now();
    live.job = {
      ...live.job,
      status: 'running',
      started_at: new Date().toISOString(),
      updated_at: new Date().toISOString(),
    };
    let renderer: (FrameRenderer & { close(): void | Promise<void> }) | null = null;
    try {
      await this.persist(live, live.job);
      const pieces = await resolveSegments(spec.segments, {
        tts: this.deps.tts(spec.ttsProvider),
        voice: spec.voice,
        ttsModel: spec.ttsModel,
        sampleRate: this.deps.sampleRate,
        signal,
        onProgress: (fraction) => this.progress(live, fraction * TTS_SHARE),
      });
      renderer = await this.deps.openRenderer(spec.avatarId, spec.model, signal);
      const partial = this.partialPath(live.job.job_id);
      const durationMs = await renderOfflineMp4({
        renderer,
        sampleRate: this.deps.sampleRate,
        pieces,
        outPath: partial,
        signal,
        onProgress: (fraction) => this.progress(live, TTS_SHARE + fraction * RENDER_SHARE),
      });
      // The captions beside the MP4, from the same pieces by the live clock's rule; written first, so the rename
      // that makes the MP4 an artifact finds them there.
      await writeBundleCaptions(this.captionsPath(live.job.job_id), pieces, this.deps.sampleRate);
      await fs.rename(partial, this.artifactPath(live.job.job_id));
      live.job.duration_ms = durationMs;
      const wallMs = performance.now() - started;
      log?.info({ jobId: live.job.job_id, durationMs, wallMs: Math.round(wallMs) }, 'offline bundle complete');
      // lipsync_c: frames the inference server could not render went to the CPU lipsync renderer (docs/recording.md).
      const fallbackFrames = fallbackFramesOf(renderer);
      if (fallbackFrames > 0)
        log?.warn(
          { jobId: live.job.job_id, fallbackFrames },
          'offline bundle partly rendered on the fallback renderer',
        );
      await this.settle(live, 'complete', null);
    } catch (error) {
      // The error text is shown to clients (`error`, download 409): the path-free form, as in the logs.
      const message = signal.aborted ? String((signal.reason as Error)?.message ?? 'aborted') : errorForLog(error);
      log?.warn({ jobId: live.job.job_id, err: message }, 'offline bundle failed');
      await fs.rm(this.partialPath(live.job.job_id), { force: true }).catch(() => undefined);
      await fs.rm(this.captionsPath(live.job.job_id), { force: true }).catch(() => undefined);
      await this.settle(live, 'failed', message);
    } finally {
      await renderer?.close();
    }
  }

  private progress(live: Live, fraction: number): void {
    // Only ever grows, whatever the phases report.
    const value = Math.min(0.99, Math.max(live.job.progress, Math.round(fraction * 1000) / 1000));
    if (value === live.job.progress) return;
    live.job = { ...live.job, progress: value, updated_at: new Date().toISOString() };
    const now = performance.now();
    if (now - live.lastPersist >= PERSIST_PROGRESS_EVERY_MS) {
      live.lastPersist = now;
      // A progress write that fails only leaves clients one step behind; the final state is persisted by settle().
      this.persist(live, live.job).catch(() => undefined);
    }
  }

  /** Writes `snapshot` after every earlier write of the job and shows it to clients once it is stored. */
  private persist(live: Live, snapshot: StoredJob): Promise<void> {
    const written = live.persisting.then(async () => {
      await this.deps.store.put(snapshot);
      live.visible = snapshot;
    });
    live.persisting = written.catch(() => undefined);
    return written;
  }

  private async settle(live: Live, status: 'complete' | 'failed', error: string | null): Promise<void> {
    if (!this.live.has(live.job.job_id)) return;
    live.job = this.finished(live.job, status, error);
    try {
      await this.persist(live, live.job);
    } catch (storeError) {
      this.deps.logger?.error(
        { jobId: live.job.job_id, err: errorForLog(storeError) },
        'offline bundle state not persisted',
      );
    }
    this.live.delete(live.job.job_id);
    this.deps.onSettled?.(live.job);
    for (const wake of this.settledWaiters.get(live.job.job_id) ?? []) wake();
    this.settledWaiters.delete(live.job.job_id);
  }
}

/** Frames a renderer with a fallback (the neural lip-sync one) rendered on it; 0 for every other renderer. */
function fallbackFramesOf(renderer: FrameRenderer): number {
  const counts = (renderer as { counts?: { fallback?: unknown } }).counts;
  return typeof counts?.fallback === 'number' ? counts.fallback : 0;
}
