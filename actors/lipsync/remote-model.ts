/**
 * `lipsync_c`: a Wav2Lip-family model served by an inference engine speaking KServe v2 / Triton
 * (`SERVICE_LIPSYNC_C_URL`, `SERVICE_LIPSYNC_C_MODEL`), through `kserve-client.ts`.
 *
 * - Status (`/models`): readiness + server and model metadata (`connect()`), cached for `STATUS_CACHE_MS` and
 *   shared by concurrent askers; `connected` only when the model is ready and has the Wav2Lip signature.
 * - `open(avatar)`: connects afresh (a backend down at session creation throws `UpstreamError` → 502), prepares the
 *   face, and returns a `NeuralLipsyncRenderer` with the CPU `lipsync` renderer as fallback.
 * - Frames: each session has its own client; frames asked for in one tick go as one batched request
 *   (`BatchingKserveInference`), and up to `KSERVE_DEFAULT_MAX_IN_FLIGHT` requests are on the wire at once, so
 *   the round trip hides behind the clock's render-ahead.
 */
import { UpstreamError } from '../upstream/errors.ts';
import type { AvatarSource } from '../render/types.ts';
import {
  KSERVE_DEFAULT_MAX_IN_FLIGHT,
  KserveError,
  KserveLipsyncClient,
  type KserveConnection,
} from './kserve-client.ts';
import { prepareKserveJsonReader } from './kserve-json-pool.ts';
import type { LipsyncSignature } from './model-signature.ts';
import {
  BackendOverloadedError,
  NeuralLipsyncRenderer,
  type FallbackRenderer,
  type LipsyncInference,
} from './neural-renderer.ts';
import { MEL_SILENCE, MEL_WINDOW_COLUMNS } from './mel.ts';
import { PreparedFaceCache } from './prepared-faces.ts';
import { RenderPoolStages } from './neural-stages.ts';
import type { RenderPool } from '../render/pool.ts';

/** `/models` polls reuse a readiness check this long (a poller must not become one upstream request each time). */
export const STATUS_CACHE_MS = 5_000;
/**
 * One live inference, queue wait included. A frame later than this is long past its presentation time, and a
 * stalled server must hand the turn to the fallback quickly rather than freeze the face for the client's 10 s.
 */
export const LIVE_INFER_TIMEOUT_MS = 1_500;
/**
 * One inference of an offline MP4 job, queue wait included: no presentation deadline, only a bound on how long a
 * stalled server holds the job before its frames go to the fallback (a job asks for ~48 frames ahead, 6 requests).
 */
export const OFFLINE_INFER_TIMEOUT_MS = 10_000;
/**
 * The warm-up inference at open may take this long; past it the session opens anyway (the first frames then meet
 * the server cold, and real failures are reported by them). A cold server's first run (model load, JIT, our own
 * JSON text of the face) is the slowest request of a session, and must not land on the first spoken frames.
 */
export const WARM_UP_TIMEOUT_MS = 3_000;
/** Frames in one request at most: a burst of the clock's render-ahead is 4; more would come only from catching up. */
export const REMOTE_MAX_BATCH = 8;

export type RemoteModelStatus =
  | { state: 'not_configured'; reason: string }
  | { state: 'connected'; reason: string }
  | { state: 'error'; reason: string };

export interface RemoteLipsyncModelOptions {
  /** Null when SERVICE_LIPSYNC_C_URL is not set. */
  baseUrl: string | null;
  model: string;
  /** Opens the CPU renderer that takes over when the server fails mid-session. */
  fallback?: (avatar: AvatarSource, signal?: AbortSignal) => Promise<FallbackRenderer>;
  statusCacheMs?: number;
  inferTimeoutMs?: number;
  /** Runs the mel windows and the paste-back in these workers (`neural-stages.ts`); without it, in the main thread. */
  offload?: RenderPool;
}

export class RemoteLipsyncModel {
  private current: RemoteModelStatus;
  private checkedAt = -Infinity;
  private inFlight: Promise<RemoteModelStatus> | undefined;
  private readonly faces = new PreparedFaceCache();

  constructor(private readonly options: RemoteLipsyncModelOptions) {
    this.current = options.baseUrl
      ? { state: 'error', reason: 'not checked yet' }
      : {
          state: 'not_configured',
          reason:
            'set SERVICE_LIPSYNC_C_URL (and SERVICE_LIPSYNC_C_MODEL) to a KServe v2 / Triton server to enable lipsync_c',
        };
  }

  get configured(): boolean {
    return this.options.baseUrl !== null;
  }

  /** The last check's outcome (see `refresh`). */
  get status(): RemoteModelStatus {
    return this.current;
  }

  /** Re-checks readiness and metadata unless a check is younger than `STATUS_CACHE_MS`; never throws. */
  refresh(signal?: AbortSignal): Promise<RemoteModelStatus> {
    if (!this.options.baseUrl) return Promise.resolve(this.current);
    if (performance.now() - this.checkedAt < (this.options.statusCacheMs ?? STATUS_CACHE_MS))
      return Promise.resolve(this.current);
    this.inFlight ??= (async () => {
      const client = this.client();
      try {
        const connection = await client.connect(signal ?? AbortSignal.timeout(10_000));
        this.current = statusOf(connection);
      } catch {
        this.current = { state: 'error', reason: 'the readiness check was aborted' };
      } finally {
        client.close();
        this.checkedAt = performance.now();
        this.inFlight = undefined;
      }
      return this.current;
    })();
    return this.inFlight;
  }

  /**
   * A renderer for one session or offline job; throws `UpstreamError` when the server is not usable now.
   * `inferTimeoutMs` overrides the live deadline (offline jobs: `OFFLINE_INFER_TIMEOUT_MS`); `warmUp: false` skips the
   * warm-up inference (offline jobs have no first frame due at a wall-clock time); `maxFramesWaiting` overrides the
   * live backlog bound (offline jobs: `OFFLINE_MAX_FRAMES_WAITING`).
   */
  async open(
    avatar: AvatarSource,
    signal?: AbortSignal,
    options: { inferTimeoutMs?: number; warmUp?: boolean; maxFramesWaiting?: number } = {},
  ): Promise<NeuralLipsyncRenderer> {
    if (!this.options.baseUrl) throw new Error('lipsync_c is not configured');
    const client = this.client(options.inferTimeoutMs);
    let connection: KserveConnection;
    try {
      connection = await client.connect(signal ?? AbortSignal.timeout(10_000));
    } catch (error) {
      client.close();
      throw error;
    }
    this.current = statusOf(connection);
    this.checkedAt = performance.now();
    if (!connection.connected) {
      client.close();
      throw new UpstreamError(`lipsync_c inference server: ${connection.reason}`);
    }
    // JSON answers are read in a worker thread; it starts now, beside the face preparation and the warm-up.
    if (connection.encoding === 'json') void prepareKserveJsonReader();
    try {
      const face = await this.faces.get(avatar, connection.signature.size);
      const stages = this.options.offload
        ? await RenderPoolStages.open(this.options.offload, avatar, connection.signature.size, signal)
        : undefined;
      const fallback = this.options.fallback;
      const backend = new BatchingKserveInference(client, connection.signature, options.maxFramesWaiting);
      if (options.warmUp !== false) await warmUp(client, connection.signature, face.faceInput, signal);
      const renderer = new NeuralLipsyncRenderer({
        face,
        fps: avatar.manifest.fps,
        backend,
        fallback: fallback ? () => fallback(avatar) : undefined,
        stages,
      });
      renderer.prepareFallback();
      return renderer;
    } catch (error) {
      client.close();
      throw error;
    }
  }

  private client(inferTimeoutMs?: number): KserveLipsyncClient {
    return new KserveLipsyncClient({
      baseUrl: this.options.baseUrl!,
      model: this.options.model,
      inferTimeoutMs: inferTimeoutMs ?? this.options.inferTimeoutMs ?? LIVE_INFER_TIMEOUT_MS,
    });
  }
}

function statusOf(connection: KserveConnection): RemoteModelStatus {
  if (connection.connected) {
    return {
      state: 'connected',
      reason: `KServe v2 model with face size ${connection.signature.size}, ${connection.encoding} tensors`,
    };
  }
  const why =
    connection.problem === 'unreachable'
      ? 'the inference server is unreachable'
      : connection.problem === 'not_ready'
        ? 'the inference server or the model is not ready'
        : connection.problem === 'metadata'
          ? 'the model metadata could not be read'
          : 'the served model does not have the Wav2Lip signature';
  return { state: 'error', reason: `${why}: ${connection.reason}` };
}

/** One inference of the avatar's face on silence, before the session's first frame; its outcome is not the session's. */
async function warmUp(
  client: KserveLipsyncClient,
  signature: LipsyncSignature,
  face: Float32Array,
  signal?: AbortSignal,
): Promise<void> {
  const count = signature.fixedBatch ?? 1;
  const mel = new Float32Array(count * 80 * MEL_WINDOW_COLUMNS).fill(MEL_SILENCE);
  // Straight to the client with its own deadline: the live per-request deadline (1.5 s) would cut a cold start short.
  await client
    .infer(
      { count, mel, face: Array.from({ length: count }, () => face) },
      signal ?? new AbortController().signal,
      WARM_UP_TIMEOUT_MS,
    )
    .catch(() => undefined);
  if (signal?.aborted) throw signal.reason;
}

interface Waiting {
  mel: Float32Array;
  face: Float32Array;
  resolve(output: Float32Array): void;
  reject(error: unknown): void;
  signal: AbortSignal;
}

/**
 * Frames waiting for a request slot at most: two full requests (640 ms of video at 25 fps). A frame asked for
 * beyond that would be shown later still, so it is rendered on the fallback instead (that frame only: the backlog
 * also fills when a loaded host reads its answers late, while the server itself keeps up).
 */
export const MAX_FRAMES_WAITING = 2 * REMOTE_MAX_BATCH;
/**
 * Requests timed out in a row, with no answer between them, that mean the server is stalled rather than slow to be
 * read: more than the `KSERVE_DEFAULT_MAX_IN_FLIGHT` requests that time out together when the host itself is
 * loaded, so the next one, sent after them, must time out too. Fewer cost their frames only (overload); this many
 * hand the turn to the fallback (~2 × the deadline after the server stopped answering).
 */
export const MAX_TIMEOUTS_IN_A_ROW = KSERVE_DEFAULT_MAX_IN_FLIGHT + 1;
/**
 * The same bound for an offline job, which asks for 3 batches of 16 frames at once and has no presentation time:
 * all of them may wait (each request is still bounded by `OFFLINE_INFER_TIMEOUT_MS`).
 */
export const OFFLINE_MAX_FRAMES_WAITING = 64;

/**
 * Frames asked for in the same tick travel as one request, at most `KSERVE_DEFAULT_MAX_IN_FLIGHT` requests at once.
 * Frames asked for while every slot is busy wait here and leave together in the next free request, so a slow
 * server (loaded, far away, cold) gets fewer, larger batches instead of a queue of single frames that overflows.
 * Overload costs single frames (`BackendOverloadedError`): a frame past `MAX_FRAMES_WAITING`, and the frames of a
 * request that timed out while fewer than `MAX_TIMEOUTS_IN_A_ROW` did. Every other failure is the server's.
 */
export class BatchingKserveInference implements LipsyncInference {
  readonly size: number;
  private queue: Waiting[] = [];
  private scheduled = false;
  private sending = 0;
  private timeoutsInARow = 0;

  constructor(
    private readonly client: KserveLipsyncClient,
    private readonly signature: LipsyncSignature,
    private readonly maxFramesWaiting = MAX_FRAMES_WAITING,
    private readonly maxInFlight = KSERVE_DEFAULT_MAX_IN_FLIGHT,
  ) {
    this.size = signature.size;
  }

  infer(mel: Float32Array, face: Float32Array, signal: AbortSignal): Promise<Float32Array> {
    if (signal.aborted) return Promise.reject(signal.reason);
    if (this.queue.length >= this.maxFramesWaiting) {
      return Promise.reject(
        new BackendOverloadedError(
          `inference backlog full (${this.maxInFlight} requests in flight, ${this.maxFramesWaiting} frames waiting)`,
        ),
      );
    }
    return new Promise((resolve, reject) => {
      this.queue.push({ mel, face, resolve, reject, signal });
      if (!this.scheduled) {
        this.scheduled = true;
        setImmediate(() => this.flush());
      }
    });
  }

  async recover(signal: AbortSignal): Promise<boolean> {
    const connection = await this.client.connect(signal);
    return connection.connected && connection.signature.size === this.size;
  }

  close(): void {
    this.client.close();
    for (const waiting of this.queue.splice(0)) waiting.reject(new Error('renderer closed'));
  }

  private flush(): void {
    this.scheduled = false;
    for (const waiting of this.queue) if (waiting.signal.aborted) waiting.reject(waiting.signal.reason);
    this.queue = this.queue.filter((waiting) => !waiting.signal.aborted);
    const per = this.signature.fixedBatch ?? REMOTE_MAX_BATCH;
    while (this.sending < this.maxInFlight && this.queue.length > 0) {
      // A request follows one AbortSignal (the first item's), so it carries only frames of that signal: one caller's
      // abort must not fail another caller's frames.
      const signal = this.queue[0].signal;
      const items: Waiting[] = [];
      const rest: Waiting[] = [];
      for (const waiting of this.queue) (items.length < per && waiting.signal === signal ? items : rest).push(waiting);
      this.queue = rest;
      this.sending++;
      void this.send(items).finally(() => {
        this.sending--;
        this.flush();
      });
    }
  }

  private async send(items: Waiting[]): Promise<void> {
    const { size, fixedBatch } = this.signature;
    // A model exported with a fixed batch gets exactly that many rows; missing ones repeat the last item.
    const count = fixedBatch ?? items.length;
    const melSize = 80 * 16;
    const mel = new Float32Array(count * melSize);
    // Rows, not one copied tensor: every item of a session carries the same prepared face, whose JSON text the client keeps.
    const face: Float32Array[] = [];
    for (let row = 0; row < count; row++) {
      const item = items[Math.min(row, items.length - 1)];
      mel.set(item.mel, row * melSize);
      face.push(item.face);
    }
    // Every item carries the same signal (`flush` groups them by it).
    const signal = items[0].signal;
    try {
      const output = await this.client.infer({ count, mel, face }, signal);
      this.timeoutsInARow = 0;
      const outSize = 3 * size * size;
      items.forEach((item, row) => item.resolve(output.slice(row * outSize, (row + 1) * outSize)));
    } catch (error) {
      const reason = this.overloadOrFailure(error, signal);
      for (const item of items) item.reject(reason);
    }
  }

  /**
   * A timeout is overload until `MAX_TIMEOUTS_IN_A_ROW` of them say the server is stalled; a full JSON answer reader
   * (`kserve-json-pool.ts`) is this host's overload; the rest is failure.
   */
  private overloadOrFailure(error: unknown, signal: AbortSignal): unknown {
    if (!signal.aborted && error instanceof KserveError && error.kind === 'busy')
      return new BackendOverloadedError(error.message, { cause: error });
    if (signal.aborted || !(error instanceof KserveError) || error.kind !== 'timeout') return error;
    if (++this.timeoutsInARow >= MAX_TIMEOUTS_IN_A_ROW) return error;
    return new BackendOverloadedError(error.message, { cause: error });
  }
}
