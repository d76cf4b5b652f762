/**
 * Plumbing shared by the OpenAI-compatible LLM and ASR clients: URL joining, bearer auth,
 * per-phase deadlines layered on the caller's AbortSignal, and translating fetch failures into
 * the stage errors the HTTP layer maps (`UpstreamError` → 502, caller abort → AbortError).
 */
import { UpstreamError, type ProviderStatus } from '../tts/types.ts';

/** Upstream error bodies are echoed into 502 details; a runaway HTML page must not be. */
const MAX_ERROR_TEXT_CHARS = 1_000;
/** Of an error body only the start is kept (its text is cut to MAX_ERROR_TEXT_CHARS anyway); the rest is not read. */
const MAX_ERROR_BODY_BYTES = 64 * 1024;
/**
 * A whole JSON reply (a transcript, a chat reply from a server that ignored `stream: true`): a 30 s
 * transcript is well under 10 KiB and a long chat reply tens of KiB, so 1 MiB is generous; a larger
 * body is a broken or hostile upstream and must not be buffered.
 */
export const MAX_JSON_REPLY_BYTES = 1024 * 1024;

/** Where an OpenAI-compatible server lives; the LLM and ASR configs add their own timeouts. */
export interface OpenAiEndpointConfig {
  /** Includes the version segment, e.g. `http://127.0.0.1:11434/v1`. Unset → not configured. */
  baseUrl?: string;
  /** Sent as `Authorization: Bearer` only when set. */
  apiKey?: string;
  model?: string;
}

/** `src/config.ts` keeps unset variables as null; the clients treat them as absent. */
export function endpointFromServiceConfig(config: { baseUrl: string | null; apiKey: string | null; model: string }): OpenAiEndpointConfig {
  return { baseUrl: config.baseUrl ?? undefined, apiKey: config.apiKey ?? undefined, model: config.model };
}

/** Configured exactly when a base URL is set; `reason` names the variable to set. */
export function endpointStatus(config: OpenAiEndpointConfig, reason: string): ProviderStatus {
  return config.baseUrl ? { configured: true } : { configured: false, reason };
}

export function joinUrl(baseUrl: string, path: string): string {
  return `${baseUrl.replace(/\/+$/, '')}/${path.replace(/^\/+/, '')}`;
}

export function authHeaders(apiKey: string | undefined): Record<string, string> {
  return apiKey ? { authorization: `Bearer ${apiKey}` } : {};
}

export function abortError(signal: AbortSignal): Error {
  const error = new Error('The operation was aborted', { cause: signal.reason });
  error.name = 'AbortError';
  return error;
}

export function isAbortError(error: unknown): boolean {
  return error instanceof Error && error.name === 'AbortError';
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

/** undici wraps the useful part (`ECONNREFUSED`, `other side closed`) in `cause`. */
export function describeTransportError(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  const cause = error.cause;
  if (cause instanceof Error) {
    const code = (cause as NodeJS.ErrnoException).code;
    return `${error.message} (${code ? `${code}: ` : ''}${cause.message})`;
  }
  return error.message;
}

/**
 * Reads a response body as UTF-8 text, at most `maxBytes`: beyond it the body is cancelled (closing the
 * upstream connection) and either the start is returned (`truncate`) or an `UpstreamError` thrown.
 */
export async function readBoundedText(
  response: Response,
  label: string,
  maxBytes: number,
  options: { truncate?: boolean } = {},
): Promise<string> {
  if (!response.body) return '';
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
        if (!options.truncate) throw new UpstreamError(`${label} upstream sent a reply over ${maxBytes} bytes`);
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
  return Buffer.concat(chunks, total).toString('utf8');
}

/** Builds the 502-bound error from a non-2xx response, keeping the upstream's own explanation. */
export async function upstreamErrorFromResponse(response: Response, label: string): Promise<UpstreamError> {
  let bodyText = '';
  try {
    bodyText = await readBoundedText(response, label, MAX_ERROR_BODY_BYTES, { truncate: true });
  } catch {
    // The status alone is still worth reporting when the body cannot be read.
  }
  const explanation = extractErrorText(bodyText) || response.statusText || 'no body';
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
