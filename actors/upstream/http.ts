/**
 * The HTTP toolkit every upstream client shares (TTS providers, the OpenAI-compatible LLM and ASR, health
 * probes): URL joining, bearer auth, fetches and body reads bounded in time and size that honour the caller's
 * AbortSignal, and the translation of every upstream failure (non-2xx, network error, timeout, truncated or
 * oversized body) into `UpstreamError` carrying the upstream's own text (→ 502).
 *
 * Two request styles, kept as their callers had them:
 * - `fetchUpstream` + `readBody`/`streamBody`/`readJson` (TTS): a headers timeout, then one deadline for the
 *   whole body; the caller's abort is rethrown as the caller's own reason.
 * - `RequestDeadline` + `readBoundedText`/`upstreamErrorFromResponse` (LLM, ASR): one re-armed timer per phase
 *   (first byte, then each idle gap); the caller's abort becomes an `AbortError` (`abortError`).
 */
import { abortError, abortReason } from './abort.ts';
import { UpstreamError, type ProviderStatus } from './errors.ts';

export type FetchLike = typeof fetch;

/** Time for an upstream to send response headers; covers queueing on busy clouds, not the audio itself. */
export const UPSTREAM_HEADERS_TIMEOUT_MS = 30_000;
/** Time for a whole response body of one sentence; synthesis of a long sentence on a CPU server can be slow. */
export const UPSTREAM_BODY_TIMEOUT_MS = 120_000;
/**
 * Largest response body of one TTS upstream call (one sentence's audio, or a JSON answer carrying it in
 * base64): 32 MiB is over 5 minutes of 48 kHz 16-bit PCM, far beyond any sentence. A larger body is a
 * broken upstream; reading stops there instead of buffering it.
 */
export const MAX_UPSTREAM_BODY_BYTES = 32 * 1024 * 1024;
/**
 * A whole JSON reply (a transcript, a chat reply from a server that ignored `stream: true`): a 30 s
 * transcript is well under 10 KiB and a long chat reply tens of KiB, so 1 MiB is generous; a larger
 * body is a broken or hostile upstream and must not be buffered.
 */
export const MAX_JSON_REPLY_BYTES = 1024 * 1024;
/** Of an error body only the start is read (its text is cut far shorter anyway); the rest is cancelled unread. */
const MAX_ERROR_BODY_BYTES = 64 * 1024;
/** Error bodies can be whole HTML pages: a TTS error keeps the part that fits into a 502 `detail`. */
const MAX_TTS_ERROR_CHARS = 500;
/** The LLM/ASR error text (after extracting the JSON message) is echoed into 502 details; a runaway page must not be. */
const MAX_ERROR_TEXT_CHARS = 1_000;

/** Where an OpenAI-compatible server lives; the LLM and ASR configs add their own timeouts. */
export interface OpenAiEndpointConfig {
  /** Includes the version segment, e.g. `http://127.0.0.1:11434/v1`. Unset → not configured. */
  baseUrl?: string;
  /** Sent as `Authorization: Bearer` only when set. */
  apiKey?: string;
  model?: string;
}

/** `src/config.ts` keeps unset variables as null; the clients treat them as absent. */
export function endpointFromServiceConfig(config: {
  baseUrl: string | null;
  apiKey: string | null;
  model: string;
}): OpenAiEndpointConfig {
  return { baseUrl: config.baseUrl ?? undefined, apiKey: config.apiKey ?? undefined, model: config.model };
}

/** Configured exactly when a base URL is set; `reason` names the variable to set. */
export function endpointStatus(config: OpenAiEndpointConfig, reason: string): ProviderStatus {
  return config.baseUrl ? { configured: true } : { configured: false, reason };
}

export function trimTrailingSlash(url: string): string {
  return url.replace(/\/+$/, '');
}

export function joinUrl(baseUrl: string, path: string): string {
  return `${trimTrailingSlash(baseUrl)}/${path.replace(/^\/+/, '')}`;
}

export function authHeaders(apiKey: string | undefined): Record<string, string> {
  return apiKey ? { authorization: `Bearer ${apiKey}` } : {};
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
export async function fetchUpstream(
  fetchImpl: FetchLike,
  url: string,
  options: BoundedFetchOptions,
): Promise<Response> {
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
    throw new UpstreamError(`${provider}: upstream request failed: ${describeTransportError(error)}`);
  }
  if (!response.ok) {
    const text = (await readErrorStart(response, provider)).trim() || response.statusText || 'no error text';
    throw new UpstreamError(
      `${provider}: upstream returned ${response.status}: ${text.slice(0, MAX_TTS_ERROR_CHARS)}`,
      response.status,
    );
  }
  return response;
}

/**
 * Reads the whole body within a bounded time and size (`MAX_UPSTREAM_BODY_BYTES`). A connection cut
 * before `Content-Length` bytes arrived surfaces as `UpstreamError` (undici reports it as a terminated stream).
 */
export async function readBody(
  response: Response,
  signal: AbortSignal,
  provider: string,
  timeoutMs = UPSTREAM_BODY_TIMEOUT_MS,
): Promise<Buffer> {
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
    throw new UpstreamError(`${provider}: upstream sent invalid JSON: ${body.slice(0, MAX_TTS_ERROR_CHARS)}`);
  }
}

/**
 * One upstream request's deadlines. `arm(ms, what)` (re)starts the single timer for the current
 * phase (waiting for the first byte, then the idle gap between chunks); when it fires, `signal`
 * aborts, which makes undici drop the socket. `dispose()` always aborts too, so an abandoned
 * response body (consumer broke out of the loop) never keeps the upstream connection open.
 */
export class RequestDeadline {
  readonly signal: AbortSignal;
  private readonly internal = new AbortController();
  private timer: NodeJS.Timeout | undefined;
  private expired: string | undefined;

  constructor(private readonly callerSignal: AbortSignal) {
    this.signal = AbortSignal.any([callerSignal, this.internal.signal]);
  }

  arm(ms: number, whatWasAwaited: string): void {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.expired = `${whatWasAwaited} within ${ms} ms`;
      this.internal.abort(new Error(`deadline: ${this.expired}`));
    }, ms);
  }

  /** Stops the clock while the caller, not the upstream, is the one taking time. */
  pause(): void {
    clearTimeout(this.timer);
  }

  /** Which deadline expired, if one did. */
  get expiredWaitingFor(): string | undefined {
    return this.expired;
  }

  dispose(): void {
    clearTimeout(this.timer);
    if (!this.internal.signal.aborted) this.internal.abort(new Error('request finished'));
  }

  /**
   * Maps whatever a fetch/read threw to the stage contract: the caller's abort wins (AbortError),
   * then an expired deadline, then upstream errors already classified, then transport failures.
   */
  translate(error: unknown, label: string): Error {
    if (this.callerSignal.aborted) return abortError(this.callerSignal);
    if (this.expired) return new UpstreamError(`${label} upstream timed out: no ${this.expired}`);
    if (error instanceof UpstreamError) return error;
    return new UpstreamError(`${label} upstream request failed: ${describeTransportError(error)}`);
  }
}

/**
 * A transport failure in words that name no server, the one rule for every upstream: undici wraps the useful part
 * in `cause`, whose message carries the address (`connect ECONNREFUSED 10.0.0.5:8000`, `getaddrinfo ENOTFOUND
 * triton-host`), and these texts reach 502 details, `/models`, job errors and logs. So only the cause's code
 * (`ECONNREFUSED`, `UND_ERR_SOCKET`) is kept beside the outer message, never the cause's own text.
 */
export function describeTransportError(error: unknown): string {
  if (!(error instanceof Error)) return 'transport error';
  const cause = error.cause;
  const code = cause instanceof Error ? (cause as NodeJS.ErrnoException).code : undefined;
  return code ? `${error.message} (${code})` : error.message;
}

/**
 * Reads a response body, at most `maxBytes`: a body declaring more by its Content-Length is refused unread, and
 * beyond the bound the body is cancelled (closing the upstream connection) and either the start is returned
 * (`truncate`) or `oversized()` thrown (an `UpstreamError` unless the caller names its own). A connection cut
 * while reading rethrows the transport's own error, for the caller to classify.
 */
export async function readBoundedBytes(
  response: Response,
  label: string,
  maxBytes: number,
  options: { truncate?: boolean; oversized?: () => Error } = {},
): Promise<Buffer> {
  const oversized =
    options.oversized ?? (() => new UpstreamError(`${label} upstream sent a reply over ${maxBytes} bytes`));
  if (!options.truncate && Number(response.headers.get('content-length')) > maxBytes) {
    await response.body?.cancel().catch(() => undefined);
    throw oversized();
  }
  if (!response.body) return Buffer.alloc(0);
  const reader = response.body.getReader();
  const chunks: Uint8Array[] = [];
  let total = 0;
  let complete = false;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) {
        complete = true;
        break;
      }
      if (total + value.byteLength > maxBytes) {
        if (!options.truncate) throw oversized();
        chunks.push(value.subarray(0, maxBytes - total));
        total = maxBytes;
        break;
      }
      chunks.push(value);
      total += value.byteLength;
    }
  } finally {
    if (!complete) await reader.cancel().catch(() => undefined);
  }
  return Buffer.concat(chunks, total);
}

/** `readBoundedBytes` as UTF-8 text. */
export async function readBoundedText(
  response: Response,
  label: string,
  maxBytes: number,
  options: { truncate?: boolean } = {},
): Promise<string> {
  return (await readBoundedBytes(response, label, maxBytes, options)).toString('utf8');
}

/** The first MAX_ERROR_BODY_BYTES of an error body as text; '' when it cannot be read (the status alone still tells). */
async function readErrorStart(response: Response, label: string): Promise<string> {
  try {
    return await readBoundedText(response, label, MAX_ERROR_BODY_BYTES, { truncate: true });
  } catch {
    return '';
  }
}

/** Builds the 502-bound error from a non-2xx response, keeping the upstream's own explanation. */
export async function upstreamErrorFromResponse(response: Response, label: string): Promise<UpstreamError> {
  const explanation = extractErrorText(await readErrorStart(response, label)) || response.statusText || 'no body';
  return new UpstreamError(`${label} upstream returned ${response.status}: ${explanation}`, response.status);
}

/** OpenAI (`{error:{message}}`), llama.cpp/Ollama (`{error:"..."}`) and FastAPI (`{detail}`) shapes. */
export function extractErrorText(bodyText: string): string {
  const trimmed = bodyText.trim();
  let text = trimmed;
  try {
    const parsed: unknown = JSON.parse(trimmed);
    const fromJson = errorTextFromJson(parsed);
    if (fromJson) text = fromJson;
  } catch {
    // Not JSON: the raw text is the explanation.
  }
  return text.length > MAX_ERROR_TEXT_CHARS ? `${text.slice(0, MAX_ERROR_TEXT_CHARS)}…` : text;
}

function errorTextFromJson(parsed: unknown): string | undefined {
  if (!parsed || typeof parsed !== 'object') return undefined;
  const record = parsed as Record<string, unknown>;
  const error = record.error;
  if (typeof error === 'string') return error;
  if (error && typeof error === 'object') {
    const message = (error as Record<string, unknown>).message;
    if (typeof message === 'string') return message;
  }
  if (typeof record.detail === 'string') return record.detail;
  if (typeof record.message === 'string') return record.message;
  return undefined;
}
