import fs from 'node:fs/promises';
import path from 'node:path';
import { Queue, WaitingError, Worker, type Job } from 'bullmq';
import type { Redis } from 'ioredis';
import type { FrameRenderer } from '../../actors/media/playout.ts';
import type { TtsProvider } from '../../actors/tts/types.ts';
import type { StoredJob } from '../store/jobs.ts';
import { resolveSegments, type PreparedSegment } from '../recording/offline-input.ts';
import { renderOfflineMp4 } from '../recording/offline-render.ts';
import { writeBundleCaptions } from '../recording/captions.ts';
import {
  BUNDLE_CONCURRENCY,
  BUNDLE_MAX_QUEUED,
  BUNDLE_RETENTION_MS,
  QueueFullError,
  type OfflineJobSpec,
} from '../recording/offline-jobs.ts';
import { errorForLog } from '../logger.ts';
import { BULL_PREFIX } from './scripts.ts';

export const OFFLINE_QUEUE_NAME = 'offline';
/**
 * A job's lock lives at least this long (and at least the node TTL): a node silent for longer has its job
 * taken by another (BullMQ's stalled-job check, every half lock). Shorter would let a busy event loop
 * lose a job it is still rendering.
 */
export const OFFLINE_LOCK_MIN_MS = 10_000;
/** A job may be found stalled (its node died) this many times before it fails for good. */
export const OFFLINE_MAX_STALLS = 3;
/** Progress is written to the queue at most this often (one HSET each); a poll is at most this stale. */
const PROGRESS_EVERY_MS = 500;
/** `whenSettled` polls the queue this often (it only holds a session's consumer slot while a job runs). */
const SETTLED_POLL_MS = 1_000;
const SWEEP_EVERY_MS = 10 * 60 * 1000;
const TTS_SHARE = 0.1;
const RENDER_SHARE = 0.89;
const JOB_ID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
const ARTIFACT_NAME = /^([0-9a-f-]{36})\.(?:mp4|vtt)$/;
/** The reason a job moved back to the queue when its node shut down (another node continues it). */
const SHUTTING_DOWN = 'node shutting down';

/** Segments as JSON (the job data lives in Redis): audio PCM as base64. */
type WireSegment =
  | { kind: 'text'; text: string; pauseAfterMs: number }
  | { kind: 'audio'; pcmBase64: string; pauseAfterMs: number };
interface JobData extends Omit<OfflineJobSpec, 'segments'> {
  segments: WireSegment[];
  createdAt: string;
}
interface JobResult {
  durationMs: number;
}

export interface ClusterOfflineDeps {
  connection: Redis;
  nodeId: string;
  /** The shared data directory: artifacts are `<dataDir>/bundles/<job_id>.mp4` on every node. */
  dataDir: string;
  sampleRate: number;
  lockMs: number;
  openRenderer(
    avatarId: string,
    model: string,
    signal: AbortSignal,
  ): Promise<FrameRenderer & { close(): void | Promise<void> }>;
  tts(providerId: string): TtsProvider;
  /** Live nodes right now; the queue holds BUNDLE_MAX_QUEUED waiting jobs per node. */
  liveNodes(): Promise<number>;
  logger?: {
    info(obj: object, msg: string): void;
    warn(obj: object, msg: string): void;
    error(obj: object, msg: string): void;
  };
  retentionMs?: number;
  /** A job finished for good, complete or failed, on this node's worker (the `bundle.*` webhooks). */
  onSettled?: (job: StoredJob) => void;
}

function toWire(segments: PreparedSegment[]): WireSegment[] {
  return segments.map((segment) =>
    segment.kind === 'text'
      ? segment
      : {
          kind: 'audio',
          pauseAfterMs: segment.pauseAfterMs,
          pcmBase64: Buffer.from(segment.pcm.buffer, segment.pcm.byteOffset, segment.pcm.byteLength).toString('base64'),
        },
  );
}

function fromWire(segments: WireSegment[]): PreparedSegment[] {
  return segments.map((segment) => {
    if (segment.kind === 'text') return segment;
    const bytes = Buffer.from(segment.pcmBase64, 'base64');
    const copy = bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength);
    return { kind: 'audio', pauseAfterMs: segment.pauseAfterMs, pcm: new Int16Array(copy) };
  });
}

/**
 * Offline bundle jobs of cluster mode, on BullMQ: a job waits in one queue every node's worker takes from
 * (one job at a time per node, none while the node's sessions fill it), its status and progress live in
 * the job, and a node that dies mid-job loses its lock, so BullMQ's stalled-job check gives the job to
 * another node, which renders it again from the job's input. Progress shown to clients never decreases:
 * a worker starts from the progress the job already had and only writes larger values. The MP4 is
 * rendered to a node-named partial file and renamed into the shared bundles directory before the job
 * completes, so any node serves the download. Same interface as the one-node `OfflineJobQueue`.
 */
export class ClusterOfflineQueue {
  private readonly queue: Queue<JobData, JobResult>;
  private worker: Worker<JobData, JobResult> | null = null;
  private readonly dir: string;
  private readonly retentionMs: number;
  private readonly running = new Set<AbortController>();
  private sweepTimer: NodeJS.Timeout | null = null;
  private paused = false;
  private closed = false;

  constructor(private readonly deps: ClusterOfflineDeps) {
    this.dir = path.join(deps.dataDir, 'bundles');
    this.retentionMs = deps.retentionMs ?? BUNDLE_RETENTION_MS;
    this.queue = new Queue<JobData, JobResult>(OFFLINE_QUEUE_NAME, {
      connection: deps.connection,
      prefix: BULL_PREFIX,
    });
  }

  /** Removes this node's partial renders a crash left, starts the worker and the artifact sweeper. */
  async recover(): Promise<{ interruptedJobs: number; filesRemoved: number }> {
    await fs.mkdir(this.dir, { recursive: true });
    let filesRemoved = 0;
    const mine = `.${this.deps.nodeId}.partial.mp4`;
    for (const name of await fs.readdir(this.dir)) {
      if (!name.endsWith(mine)) continue;
      await fs.rm(path.join(this.dir, name), { force: true });
      filesRemoved++;
    }
    this.worker = new Worker<JobData, JobResult>(OFFLINE_QUEUE_NAME, (job, token) => this.process(job, token), {
      connection: this.deps.connection,
      prefix: BULL_PREFIX,
      name: this.deps.nodeId,
      concurrency: BUNDLE_CONCURRENCY,
      lockDuration: this.deps.lockMs,
      stalledInterval: Math.max(1_000, Math.floor(this.deps.lockMs / 2)),
      maxStalledCount: OFFLINE_MAX_STALLS,
    });
    this.worker.on('error', (error) => this.deps.logger?.warn({ err: errorForLog(error) }, 'offline worker error'));
    // Reported by the node whose worker finished it, once: a retried attempt is not settled yet.
    const settled = (jobId: string | undefined) => {
      if (!jobId || !this.deps.onSettled) return;
      void this.get(jobId)
        .then((job) => {
          if (job && (job.status === 'complete' || job.status === 'failed')) this.deps.onSettled?.(job);
        })
        .catch(() => undefined);
    };
    this.worker.on('completed', (job) => settled(job.id));
    this.worker.on('failed', (job) => settled(job?.id));
    this.sweepTimer = setInterval(() => void this.sweep(), SWEEP_EVERY_MS);
    this.sweepTimer.unref();
    return { interruptedJobs: 0, filesRemoved };
  }

  async submit(spec: OfflineJobSpec): Promise<StoredJob> {
    if (this.closed) throw new QueueFullError(0);
    const max = BUNDLE_MAX_QUEUED * Math.max(1, await this.deps.liveNodes());
    if ((await this.queue.getWaitingCount()) >= max) throw new QueueFullError(max);
    const createdAt = new Date().toISOString();
    const { segments, ...rest } = spec;
    const jobId = crypto.randomUUID();
    const retentionS = Math.ceil(this.retentionMs / 1000);
    await this.queue.add(
      'bundle',
      { ...rest, segments: toWire(segments), createdAt },
      { jobId, attempts: 1, removeOnComplete: { age: retentionS }, removeOnFail: { age: retentionS } },
    );
    this.deps.logger?.info({ jobId, sessionId: spec.sessionId }, 'offline bundle queued');
    return {
      job_id: jobId,
      session_id: spec.sessionId,
      status: 'pending',
      progress: 0,
      error: null,
      created_at: createdAt,
      updated_at: createdAt,
    };
  }

  async get(jobId: string): Promise<StoredJob | undefined> {
    if (!JOB_ID_RE.test(jobId)) return undefined;
    const job = await this.queue.getJob(jobId);
    if (!job) return undefined;
    const state = await job.getState();
    if (state === 'unknown') return undefined;
    const progress = typeof job.progress === 'number' ? Math.min(0.99, job.progress) : 0;
    const base = {
      job_id: jobId,
      session_id: job.data.sessionId,
      created_at: job.data.createdAt,
      updated_at: new Date(job.finishedOn ?? job.processedOn ?? job.timestamp).toISOString(),
      ...(job.processedOn ? { started_at: new Date(job.processedOn).toISOString() } : {}),
    };
    if (state === 'completed') {
      const finished = new Date(job.finishedOn ?? Date.now());
      return {
        ...base,
        status: 'complete',
        progress: 1,
        error: null,
        finished_at: finished.toISOString(),
        expires_at: new Date(finished.getTime() + this.retentionMs).toISOString(),
        duration_ms: job.returnvalue?.durationMs,
      };
    }
    if (state === 'failed') return { ...base, status: 'failed', progress, error: job.failedReason || 'failed' };
    // A job back in the queue after its node died has run before: it stays `running` to the client.
    const started = state === 'active' || job.attemptsStarted > 0 || Boolean(job.processedOn);
    return { ...base, status: started ? 'running' : 'pending', progress, error: null };
  }

  artifactPath(jobId: string): string {
    if (!JOB_ID_RE.test(jobId)) throw new Error('job id is not a UUID4');
    return path.join(this.dir, `${jobId}.mp4`);
  }

  /** The job's captions (WebVTT) beside its MP4 in the shared bundles directory. */
  captionsPath(jobId: string): string {
    if (!JOB_ID_RE.test(jobId)) throw new Error('job id is not a UUID4');
    return path.join(this.dir, `${jobId}.vtt`);
  }

  /** Resolves once the job is complete, failed or gone (polling the queue; ends at close). */
  async whenSettled(jobId: string): Promise<void> {
    while (!this.closed) {
      const job = await this.get(jobId).catch(() => undefined);
      if (!job || job.status === 'complete' || job.status === 'failed') return;
      await new Promise((resolve) => setTimeout(resolve, SETTLED_POLL_MS).unref());
    }
  }

  /** Stops taking jobs while the node's sessions use its render capacity; resumes when they leave room. */
  setAccepting(accepting: boolean): void {
    if (!this.worker || this.closed || accepting === !this.paused) return;
    this.paused = !accepting;
    if (this.paused) void this.worker.pause(true);
    else this.worker.resume();
  }

  /** Removes artifacts whose job BullMQ has removed (its retention passed). */
  async sweep(): Promise<void> {
    try {
      for (const name of await fs.readdir(this.dir)) {
        const artifact = ARTIFACT_NAME.exec(name);
        if (!artifact) continue;
        if (await this.queue.getJob(artifact[1])) continue;
        await fs.rm(path.join(this.dir, name), { force: true });
      }
    } catch (error) {
      this.deps.logger?.warn({ err: errorForLog(error) }, 'offline bundle sweep failed');
    }
  }

  /** Running jobs go back to the queue (another node continues them); then the worker and queue close. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.sweepTimer) clearInterval(this.sweepTimer);
    for (const abort of this.running) abort.abort(new Error(SHUTTING_DOWN));
    await this.worker?.close().catch(() => undefined);
    await this.queue.close().catch(() => undefined);
  }

  private partialPath(jobId: string): string {
    return path.join(this.dir, `${jobId}.${this.deps.nodeId}.partial.mp4`);
  }

  private async process(job: Job<JobData, JobResult>, token?: string): Promise<JobResult> {
    const jobId = job.id!;
    const abort = new AbortController();
    this.running.add(abort);
    const signal = abort.signal;
    const log = this.deps.logger;
    // What clients were last shown: this run only ever writes more.
    let shown = typeof job.progress === 'number' ? job.progress : 0;
    let lastWrite = 0;
    const progress = (fraction: number) => {
      const value = Math.min(0.99, Math.round(fraction * 1000) / 1000);
      if (value <= shown) return;
      const now = performance.now();
      if (now - lastWrite < PROGRESS_EVERY_MS) return;
      lastWrite = now;
      shown = value;
      job.updateProgress(value).catch(() => undefined);
    };
    const started = performance.now();
    let renderer: (FrameRenderer & { close(): void | Promise<void> }) | null = null;
    const partial = this.partialPath(jobId);
    try {
      log?.info({ jobId, attempt: job.attemptsStarted }, 'offline bundle running');
      const spec = job.data;
      const pieces = await resolveSegments(fromWire(spec.segments), {
        tts: this.deps.tts(spec.ttsProvider),
        voice: spec.voice,
        ttsModel: spec.ttsModel,
        sampleRate: this.deps.sampleRate,
        signal,
        onProgress: (fraction) => progress(fraction * TTS_SHARE),
      });
      renderer = await this.deps.openRenderer(spec.avatarId, spec.model, signal);
      const durationMs = await renderOfflineMp4({
        renderer,
        sampleRate: this.deps.sampleRate,
        pieces,
        outPath: partial,
        signal,
        onProgress: (fraction) => progress(TTS_SHARE + fraction * RENDER_SHARE),
      });
      await writeBundleCaptions(this.captionsPath(jobId), pieces, this.deps.sampleRate);
      await fs.rename(partial, this.artifactPath(jobId));
      log?.info({ jobId, durationMs, wallMs: Math.round(performance.now() - started) }, 'offline bundle complete');
      return { durationMs };
    } catch (error) {
      await fs.rm(partial, { force: true }).catch(() => undefined);
      await fs.rm(this.captionsPath(jobId), { force: true }).catch(() => undefined);
      if (signal.aborted && this.closed && token) {
        // Shutting down: the job goes back to the queue for another node instead of failing.
        await job.moveToWait(token);
        throw new WaitingError();
      }
      const message = errorForLog(error);
      log?.warn({ jobId, err: message }, 'offline bundle failed');
      throw new Error(message);
    } finally {
      this.running.delete(abort);
      await renderer?.close();
    }
  }
}
