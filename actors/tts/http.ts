/**
 * Shared HTTP plumbing for the TTS provider adapters: bounded fetches that honour the caller's
 * AbortSignal, and the mapping of every upstream failure (non-2xx, network error, timeout,
 * truncated body) onto `UpstreamError` carrying the upstream's own text.
 */
import { UpstreamError } from './types.ts';

export type FetchLike = typeof fetch;

export interface TtsLogger {
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
  error(obj: object, msg?: string): void;
  debug(obj: object, msg?: string): void;
}

/** Per-provider configuration injected by the registry (never read from the environment here). */
export interface ProviderConfig {
  baseUrl?: string;
  apiKey?: string;
  /** Directory where local cloning engines find reference WAVs. */
  voiceDir?: string;
  fetch?: FetchLike;
  logger?: TtsLogger;
}

/** Time for an upstream to send response headers; covers queueing on busy clouds, not the audio itself. */
export const UPSTREAM_HEADERS_TIMEOUT_MS = 30_000;
/** Time for a whole response body of one sentence; synthesis of a long sentence on a CPU server can be slow. */
export const UPSTREAM_BODY_TIMEOUT_MS = 120_000;
/** Upstream error bodies can be whole HTML pages; keep the part that fits into a 502 `detail`. */
const MAX_UPSTREAM_ERROR_CHARS = 500;
/** Of an error body only this much is read (its text is cut to MAX_UPSTREAM_ERROR_CHARS anyway). */
const MAX_UPSTREAM_ERROR_BYTES = 64 * 1024;
/**
 * Largest response body of one upstream call (one sentence's audio, or a JSON answer carrying it in
 * base64): 32 MiB is over 5 minutes of 48 kHz 16-bit PCM, far beyond any sentence. A larger body is a
 * broken upstream; reading stops there instead of buffering it.
 */
export const MAX_UPSTREAM_BODY_BYTES = 32 * 1024 * 1024;

export function trimTrailingSlash(url: string): string {
  return url.replace(/\/+$/, '');
}

function abortReason(signal: AbortSignal): unknown {
  return signal.reason ?? new DOMException('aborted', 'AbortError');
}

export function isAbortError(error: unknown): boolean {
  return error instanceof Error && (error.name === 'AbortError' || error.name === 'TimeoutError');
}

export interface BoundedFetchOptions extends RequestInit {
  /** The caller's signal: aborting it cancels the request and rethrows the caller's reason. */
  signal: AbortSignal;
  /** Which provider is asking, for error texts. */
  provider: string;
  headersTimeoutMs?: number;
}

/**
 * fetch with a headers timeout. The caller's abort propagates as-is (so the pipeline sees its own
 * reason), a timeout becomes `UpstreamError`, a non-2xx becomes `UpstreamError` with the upstream text.
 */
export async function fetchUpstream(fetchImpl: FetchLike, url: string, options: BoundedFetchOptions): Promise<Response> {
  const { signal, provider, headersTimeoutMs = UPSTREAM_HEADERS_TIMEOUT_MS, ...init } = options;
  signal.throwIfAborted();
  const timeout = AbortSignal.timeout(headersTimeoutMs);
  const combined = AbortSignal.any([signal, timeout]);
  let response: Response;
  try {
    response = await fetchImpl(url, { ...init, signal: combined });
  } catch (error) {
    if (signal.aborted) throw abortReason(signal);
    if (timeout.aborted) throw new UpstreamError(`${provider}: upstream did not answer within ${headersTimeoutMs} ms`);
    throw new UpstreamError(`${provider}: upstream request failed: ${(error as Error).message}`);
  }
  if (!response.ok) {
    const text = await readErrorText(response);
    throw new UpstreamError(`${provider}: upstream returned ${response.status}: ${text}`, response.status);
  }
  return response;
}

async function readErrorText(response: Response): Promise<string> {
  try {
    const text = (await readErrorStart(response)).trim();
    return (text || response.statusText || 'no error text').slice(0, MAX_UPSTREAM_ERROR_CHARS);
  } catch {
    return response.statusText || 'no error text';
  }
}

/** The first MAX_UPSTREAM_ERROR_BYTES of an error body; the rest is cancelled unread. */
async function readErrorStart(response: Response): Promise<string> {
  if (!response.body) return '';
  const reader = response.body.getReader();
  const chunks: Uint8Array[] = [];
  let total = 0;
  try {
    while (total < MAX_UPSTREAM_ERROR_BYTES) {
      const step = await reader.read();
      if (step.done) break;
      chunks.push(step.value);
      total += step.value.byteLength;
    }
  } finally {
    void reader.cancel().catch(() => {});
  }
  return Buffer.concat(chunks).subarray(0, MAX_UPSTREAM_ERROR_BYTES).toString('utf8');
}

/**
 * Reads the whole body within a bounded time and size (`MAX_UPSTREAM_BODY_BYTES`). A connection cut
 * before `Content-Length` bytes arrived surfaces as `UpstreamError` (undici reports it as a terminated stream).
 */
export async function readBody(response: Response, signal: AbortSignal, provider: string, timeoutMs = UPSTREAM_BODY_TIMEOUT_MS): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of streamBody(response, signal, provider, timeoutMs)) chunks.push(chunk);
  return Buffer.concat(chunks);
}

/** Yields body chunks as they arrive, bounded in total time and size, honouring `signal`. */
export async function* streamBody(
  response: Response,
  signal: AbortSignal,
  provider: string,
  timeoutMs = UPSTREAM_BODY_TIMEOUT_MS,
  maxBytes = MAX_UPSTREAM_BODY_BYTES,
): AsyncGenerator<Buffer> {
  if (!response.body) return;
  const reader = response.body.getReader();
  const deadline = Date.now() + timeoutMs;
  let received = 0;
  let timer: NodeJS.Timeout | undefined;
  const onAbort = () => void reader.cancel().catch(() => {});
  signal.addEventListener('abort', onAbort, { once: true });
  let finished = false;
  try {
    while (true) {
      const remaining = deadline - Date.now();
      const timedOut = new Promise<'timeout'>((resolve) => {
        timer = setTimeout(() => resolve('timeout'), Math.max(0, remaining));
      });
      let step: ReadableStreamReadResult<Uint8Array> | 'timeout';
      try {
        step = await Promise.race([reader.read(), timedOut]);
      } catch (error) {
        if (signal.aborted) throw abortReason(signal);
        throw new UpstreamError(`${provider}: upstream response was cut off: ${(error as Error).message}`);
      } finally {
        clearTimeout(timer);
      }
      if (signal.aborted) throw abortReason(signal);
      if (step === 'timeout') {
        void reader.cancel().catch(() => {});
        throw new UpstreamError(`${provider}: upstream response did not finish within ${timeoutMs} ms`);
      }
      if (step.done) {
        finished = true;
        return;
      }
      received += step.value.byteLength;
      // The finally below cancels the body, which closes the upstream connection.
      if (received > maxBytes) throw new UpstreamError(`${provider}: upstream response is over ${maxBytes} bytes`);
      if (step.value.byteLength > 0) yield Buffer.from(step.value.buffer, step.value.byteOffset, step.value.byteLength);
    }
  } finally {
    signal.removeEventListener('abort', onAbort);
    // A consumer that stopped early (or an error) must not leave the upstream connection streaming.
    if (!finished) void reader.cancel().catch(() => {});
  }
}

/** Parses a JSON body or raises `UpstreamError` quoting what came instead. */
export async function readJson<T>(response: Response, signal: AbortSignal, provider: string): Promise<T> {
  const body = (await readBody(response, signal, provider)).toString('utf8');
  try {
    return JSON.parse(body) as T;
  } catch {
    throw new UpstreamError(`${provider}: upstream sent invalid JSON: ${body.slice(0, MAX_UPSTREAM_ERROR_CHARS)}`);
  }
}
