import fs from 'node:fs/promises';
import path from 'node:path';
import { ClockRecorder, NoFramesError, type RecordableMedia } from './clock-recorder.ts';
import { errorForLog } from '../logger.ts';
import { writeFileAtomic } from '../files/atomic-file.ts';
import { CaptionTrack, toWebVtt } from './captions.ts';

export type RecordingState = 'idle' | 'recording' | 'complete';

export interface RecordingStatus {
  state: RecordingState;
  /** Download URL of the artifact; it answers 404 until the state is `complete`. */
  artifact_url: string;
  /** Recorded length: so far while recording, final once complete, 0 when idle. */
  duration_ms: number;
}

export interface RecordingLogger {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
  error(obj: object, msg: string): void;
}

/** Finished recordings are removed this long after they completed (swept periodically). */
export const RECORDING_RETENTION_MS = 24 * 3600 * 1000;
const SWEEP_EVERY_MS = 10 * 60 * 1000;

const ARTIFACT_FILE = 'recording.mp4';
const PARTIAL_FILE = 'recording.partial.mp4';
const META_FILE = 'recording.json';
/** The recording's captions (WebVTT), written before the record like the MP4. */
const CAPTIONS_FILE = 'recording.vtt';
/** The route layer validates session ids as UUIDs; this is a second fence before anything touches the disk. */
const SESSION_ID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export class RecordingConflictError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'RecordingConflictError';
  }
}

interface Active {
  /** Null while `start` prepares the directory: the slot is claimed, nothing is recorded yet. */
  recorder: ClockRecorder | null;
  /** The clock's captions during the recording (null while preparing, like `recorder`). */
  captions: CaptionTrack | null;
  stopping: Promise<RecordingStatus> | null;
  /** The session ended while `start` was still preparing: the start answers 409 instead of recording a closed clock. */
  cancelled: boolean;
}

interface Meta {
  duration_ms: number;
  completed_at: string;
  /** Why the recording ended: `stop`, or the reason the session went away. */
  ended_by: string;
}

/**
 * Recordings of sessions, one at a time per session. Artifacts live under
 * `<dataDir>/recordings/<session_id>/recording.mp4` (names chosen here, never from a request); a sidecar
 * `recording.json` makes a finished recording survive restarts. A new start discards the previous artifact.
 */
export class RecordingRegistry {
  private readonly active = new Map<string, Active>();
  private readonly readyListeners = new Set<
    (sessionId: string, recording: { artifact_url: string; duration_ms: number }) => void
  >();
  private readonly root: string;
  private readonly sweepTimer: NodeJS.Timeout;
  private closed = false;

  constructor(
    dataDir: string,
    private readonly logger?: RecordingLogger,
    private readonly retentionMs = RECORDING_RETENTION_MS,
  ) {
    this.root = path.join(dataDir, 'recordings');
    this.sweepTimer = setInterval(() => void this.sweep(), SWEEP_EVERY_MS);
    this.sweepTimer.unref();
  }

  /** Calls `listener` with each recording that became downloadable (the `recording.ready` webhook); returns the unsubscribe. */
  onReady(listener: (sessionId: string, recording: { artifact_url: string; duration_ms: number }) => void): () => void {
    this.readyListeners.add(listener);
    return () => this.readyListeners.delete(listener);
  }

  artifactUrl(sessionId: string): string {
    return `/sessions/${sessionId}/rt-recording/artifact`;
  }

  isRecording(sessionId: string): boolean {
    return this.active.has(sessionId);
  }

  async status(sessionId: string): Promise<RecordingStatus> {
    const artifact_url = this.artifactUrl(sessionId);
    const active = this.active.get(sessionId);
    if (active) return { state: 'recording', artifact_url, duration_ms: active.recorder?.durationMs ?? 0 };
    const meta = await this.readMeta(sessionId);
    if (meta) return { state: 'complete', artifact_url, duration_ms: meta.duration_ms };
    return { state: 'idle', artifact_url, duration_ms: 0 };
  }

  /**
   * Starts recording `media`'s clock. `whenSessionEnds` is given a callback to run when the session
   * terminates (its close cascade, after the clock stopped), so the file is finalised rather than lost; the
   * callback settles once the file is final (or failed). It is called before the first await, in the same
   * step that claims the slot, and may throw (a session that is ending refuses it): then nothing starts.
   * A session that ends while the start is still preparing cancels it (`RecordingConflictError`).
   */
  async start(
    sessionId: string,
    media: RecordableMedia,
    whenSessionEnds?: (finalise: () => Promise<void>) => void,
  ): Promise<RecordingStatus> {
    if (this.closed) throw new RecordingConflictError('service is shutting down');
    if (this.active.has(sessionId)) throw new RecordingConflictError('already recording; stop it first');
    const dir = this.dirOf(sessionId);
    // Claim the slot and attach to the session before any await: two concurrent starts cannot both pass the
    // check, and a session that ends from here on finalises or cancels this recording.
    const claim: Active = { recorder: null, captions: null, stopping: null, cancelled: false };
    this.active.set(sessionId, claim);
    const release = () => {
      if (this.active.get(sessionId) === claim) this.active.delete(sessionId);
    };
    try {
      whenSessionEnds?.(() => this.endWithSession(sessionId, claim));
      await fs.mkdir(dir, { recursive: true });
      // Checked before the previous artifact goes: a refused start leaves it in place.
      if (claim.cancelled) throw new RecordingConflictError('session is terminated');
      // The record first: a crash in between leaves an artifact without one, which `recover()` removes.
      await fs.rm(path.join(dir, META_FILE), { force: true });
      await Promise.all(
        [ARTIFACT_FILE, PARTIAL_FILE, CAPTIONS_FILE].map((name) => fs.rm(path.join(dir, name), { force: true })),
      );
      if (claim.cancelled) throw new RecordingConflictError('session is terminated');
      // The file starts at the first picture after the recorder attaches: with pictures already flowing it holds all
      // that plays from the start's answer on (a client-rendered session's would miss the renderer's opening).
      const releasePictures = (await media.holdPictures?.()) ?? (() => undefined);
      try {
        if (claim.cancelled) throw new RecordingConflictError('session is terminated');
        claim.recorder = new ClockRecorder(
          media,
          path.join(dir, PARTIAL_FILE),
          () => void this.stop(sessionId, 'clock stopped').catch(() => undefined),
        );
        claim.captions = new CaptionTrack(media.playout);
      } finally {
        releasePictures();
      }
    } catch (error) {
      release();
      throw error;
    }
    this.logger?.info({ sessionId }, 'recording started');
    return { state: 'recording', artifact_url: this.artifactUrl(sessionId), duration_ms: 0 };
  }

  /** The session of `claim` ended: a recording finalises; a start still preparing is cancelled and its slot freed. */
  private endWithSession(sessionId: string, claim: Active): Promise<void> {
    if (this.active.get(sessionId) !== claim) return Promise.resolve();
    if (!claim.recorder) {
      claim.cancelled = true;
      this.active.delete(sessionId);
      return Promise.resolve();
    }
    return this.stop(sessionId, 'session terminated').then(
      () => undefined,
      () => undefined,
    );
  }

  /** Ends the recording and finalises the artifact. Throws `RecordingConflictError` when not recording. */
  async stop(sessionId: string, endedBy = 'stop'): Promise<RecordingStatus> {
    const active = this.active.get(sessionId);
    if (!active || !active.recorder) throw new RecordingConflictError('not recording');
    active.stopping ??= this.finalise(sessionId, active.recorder, active.captions, endedBy);
    return active.stopping;
  }

  /** The supervisor's terminate hook: finalises a recording in progress (no-op otherwise). */
  async finaliseSession(sessionId: string, reason = 'session terminated'): Promise<void> {
    if (!this.active.has(sessionId)) return;
    await this.stop(sessionId, reason).catch(() => undefined);
  }

  /** Absolute path of the finished artifact, or null when there is none. */
  artifactPath(sessionId: string): Promise<string | null> {
    return this.finishedFile(sessionId, ARTIFACT_FILE);
  }

  /** Absolute path of the finished recording's captions (WebVTT), or null when there is no finished recording. */
  captionsPath(sessionId: string): Promise<string | null> {
    return this.finishedFile(sessionId, CAPTIONS_FILE);
  }

  private async finishedFile(sessionId: string, name: string): Promise<string | null> {
    if (this.active.has(sessionId)) return null;
    if (!(await this.readMeta(sessionId))) return null;
    const file = path.join(this.dirOf(sessionId), name);
    try {
      await fs.access(file);
      return file;
    } catch {
      return null;
    }
  }

  /** Finalises every recording in progress (service shutdown). */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    clearInterval(this.sweepTimer);
    await Promise.all([...this.active.keys()].map((id) => this.finaliseSession(id, 'service shutting down')));
  }

  /**
   * Start-up sweep, before any recording can start: a session directory keeps only a finished recording
   * (`recording.json` + `recording.mp4`). A recording the process died in (its `.partial.mp4`), an artifact
   * whose record was never written, a record whose artifact is gone and half-written temporary files are
   * removed. Resolves with how many files and directories went.
   */
  async recover(): Promise<number> {
    let names: string[];
    try {
      names = await fs.readdir(this.root);
    } catch {
      return 0;
    }
    let removed = 0;
    for (const name of names) {
      if (!SESSION_ID_RE.test(name) || this.active.has(name)) continue;
      const dir = path.join(this.root, name);
      const files = await fs.readdir(dir).catch(() => [] as string[]);
      const finished = (await this.readMeta(name)) !== null && files.includes(ARTIFACT_FILE);
      const doomed = finished
        ? files.filter((file) => file !== ARTIFACT_FILE && file !== META_FILE && file !== CAPTIONS_FILE)
        : files;
      await Promise.all(doomed.map((file) => fs.rm(path.join(dir, file), { recursive: true, force: true })));
      removed += doomed.length;
      if (!finished) await fs.rm(dir, { recursive: true, force: true });
    }
    return removed;
  }

  /** Removes finished recordings older than the retention time. */
  async sweep(now = Date.now()): Promise<void> {
    let names: string[];
    try {
      names = await fs.readdir(this.root);
    } catch {
      return;
    }
    for (const name of names) {
      if (!SESSION_ID_RE.test(name) || this.active.has(name)) continue;
      const meta = await this.readMeta(name);
      const dir = path.join(this.root, name);
      if (meta && now - Date.parse(meta.completed_at) < this.retentionMs) continue;
      if (!meta) {
        // A directory without a finished recording is an interrupted one (crash); drop it once it is old.
        const stat = await fs.stat(dir).catch(() => null);
        if (stat && now - stat.mtimeMs < this.retentionMs) continue;
      }
      await fs.rm(dir, { recursive: true, force: true }).catch(() => undefined);
    }
  }

  private async finalise(
    sessionId: string,
    recorder: ClockRecorder,
    captions: CaptionTrack | null,
    endedBy: string,
  ): Promise<RecordingStatus> {
    const dir = this.dirOf(sessionId);
    try {
      const durationMs = await recorder.stop();
      captions?.detach();
      const cues = captions?.recorded(recorder.originMs ?? 0, durationMs) ?? [];
      await writeFileAtomic(path.join(dir, CAPTIONS_FILE), toWebVtt(cues));
      await fs.rename(path.join(dir, PARTIAL_FILE), path.join(dir, ARTIFACT_FILE));
      const meta: Meta = { duration_ms: durationMs, completed_at: new Date().toISOString(), ended_by: endedBy };
      // The record last, in one step: a crash before it leaves an artifact without a record, never a record without its artifact.
      await writeFileAtomic(path.join(dir, META_FILE), JSON.stringify(meta));
      this.logger?.info({ sessionId, durationMs, endedBy }, 'recording complete');
      const ready = { artifact_url: this.artifactUrl(sessionId), duration_ms: durationMs };
      for (const listener of this.readyListeners) listener(sessionId, ready);
      return { state: 'complete', ...ready };
    } catch (error) {
      captions?.detach();
      await recorder.abort().catch(() => undefined);
      this.logger?.error({ sessionId, err: errorForLog(error) }, 'recording failed');
      if (error instanceof NoFramesError) throw error;
      throw new RecordingFailedError((error as Error).message);
    } finally {
      this.active.delete(sessionId);
    }
  }

  private dirOf(sessionId: string): string {
    if (!SESSION_ID_RE.test(sessionId)) throw new Error('session id is not a UUID');
    return path.join(this.root, sessionId.toLowerCase());
  }

  private async readMeta(sessionId: string): Promise<Meta | null> {
    try {
      const meta = JSON.parse(await fs.readFile(path.join(this.dirOf(sessionId), META_FILE), 'utf8')) as Meta;
      return typeof meta.duration_ms === 'number' && typeof meta.completed_at === 'string' ? meta : null;
    } catch {
      return null;
    }
  }
}

/**
 * A finished recording in another node's data directory (cluster mode: the recordings of a lost node,
 * read from shared storage); null when there is none. Read only: that directory's sweeps are its node's.
 */
export async function finishedRecording(
  dataDir: string,
  sessionId: string,
): Promise<{ file: string; size: number; durationMs: number } | null> {
  if (!SESSION_ID_RE.test(sessionId)) return null;
  const dir = path.join(dataDir, 'recordings', sessionId.toLowerCase());
  try {
    const meta = JSON.parse(await fs.readFile(path.join(dir, META_FILE), 'utf8')) as Meta;
    if (typeof meta.duration_ms !== 'number') return null;
    const file = path.join(dir, ARTIFACT_FILE);
    const stat = await fs.stat(file);
    return { file, size: stat.size, durationMs: meta.duration_ms };
  } catch {
    return null;
  }
}

export class RecordingFailedError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'RecordingFailedError';
  }
}
