/**
 * LLM provider for any server speaking OpenAI's streaming chat-completions protocol: Ollama,
 * llama.cpp server, vLLM, LocalAI, LM Studio, OpenAI itself. Deltas are yielded as they arrive;
 * the caller's AbortSignal (or breaking out of the loop) closes the upstream connection.
 */
import { abortError } from '../../upstream/abort.ts';
import { ProviderNotConfiguredError, UpstreamError, type ProviderStatus } from '../../upstream/errors.ts';
import {
  RequestDeadline,
  authHeaders,
  describeTransportError,
  endpointStatus,
  extractErrorText,
  joinUrl,
  MAX_JSON_REPLY_BYTES,
  readBoundedText,
  upstreamErrorFromResponse,
  type OpenAiEndpointConfig,
} from '../../upstream/http.ts';
import { SseDataDecoder } from '../../upstream/sse.ts';
import { ToolCallAssembler } from '../tool-calls.ts';
import type { ChatMessage, LlmProvider, LlmStreamRequest } from '../types.ts';

const LABEL = 'LLM';
export const LLM_NOT_CONFIGURED_REASON = 'set SERVICE_LLM_BASE_URL';

/**
 * Local servers load the model into memory on the first request (Ollama on CPU: tens of seconds
 * for a 7B model) and then process the whole prompt before the first token, so this is generous.
 */
export const DEFAULT_FIRST_TOKEN_TIMEOUT_MS = 60_000;
/** Even a CPU-only server produces well over one token per 30 s; a longer silence means it hung. */
export const DEFAULT_IDLE_TIMEOUT_MS = 30_000;
/** Sent when neither the request nor the configuration names a model; llama.cpp ignores the field. */
export const FALLBACK_MODEL = 'default';

export interface OpenAiLlmConfig extends OpenAiEndpointConfig {
  /** From sending the request to the first content delta. */
  firstTokenTimeoutMs?: number;
  /** Longest silence between stream chunks once tokens flow (time the consumer holds a delta is excluded). */
  idleTimeoutMs?: number;
  maxTokens?: number;
  temperature?: number;
}

export function createOpenAiLlm(config: OpenAiLlmConfig): LlmProvider {
  return new OpenAiChatProvider(config);
}

interface StreamChunk {
  choices?: Array<{
    delta?: { content?: unknown; tool_calls?: unknown };
    message?: { content?: unknown; tool_calls?: unknown };
    finish_reason?: unknown;
  }>;
  error?: unknown;
}

class OpenAiChatProvider implements LlmProvider {
  readonly id = 'openai';
  private readonly firstTokenTimeoutMs: number;
  private readonly idleTimeoutMs: number;

  constructor(private readonly config: OpenAiLlmConfig) {
    this.firstTokenTimeoutMs = config.firstTokenTimeoutMs ?? DEFAULT_FIRST_TOKEN_TIMEOUT_MS;
    this.idleTimeoutMs = config.idleTimeoutMs ?? DEFAULT_IDLE_TIMEOUT_MS;
  }

  status(): ProviderStatus {
    return endpointStatus(this.config, LLM_NOT_CONFIGURED_REASON);
  }

  async *stream(request: LlmStreamRequest): AsyncGenerator<string> {
    const baseUrl = this.config.baseUrl;
    if (!baseUrl) throw new ProviderNotConfiguredError(`LLM is not configured: ${LLM_NOT_CONFIGURED_REASON}`);
    if (request.signal.aborted) throw abortError(request.signal);

    const deadline = new RequestDeadline(request.signal);
    deadline.arm(this.firstTokenTimeoutMs, 'first token');
    const toolCalls = new ToolCallAssembler(LABEL);
    try {
      const response = await this.post(baseUrl, request, deadline);
      const contentType = response.headers.get('content-type') ?? '';
      if (!contentType.includes('text/event-stream') && contentType.includes('json')) {
        // A server that ignored `stream: true` still answers usefully: one delta with the whole reply.
        yield* this.nonStreamingReply(response, deadline, toolCalls);
      } else {
        yield* this.streamedReply(response, deadline, toolCalls);
      }
    } finally {
      deadline.dispose();
    }
    // Only a reply that completed hands its calls on: a cut one never runs half a call.
    const calls = toolCalls.finish();
    if (calls.length > 0 && request.tools?.length) request.onToolCalls?.(calls);
  }

  private async post(baseUrl: string, request: LlmStreamRequest, deadline: RequestDeadline): Promise<Response> {
    const body: Record<string, unknown> = {
      model: request.model ?? this.config.model ?? FALLBACK_MODEL,
      messages: request.messages.map(wireMessage),
      stream: true,
    };
    if (request.tools?.length) body.tools = request.tools;
    if (this.config.maxTokens !== undefined) body.max_tokens = this.config.maxTokens;
    if (this.config.temperature !== undefined) body.temperature = this.config.temperature;
    try {
      const response = await fetch(joinUrl(baseUrl, 'chat/completions'), {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          accept: 'text/event-stream',
          ...authHeaders(this.config.apiKey),
        },
        body: JSON.stringify(body),
        signal: deadline.signal,
      });
      if (!response.ok) throw await upstreamErrorFromResponse(response, LABEL);
      if (!response.body) throw new UpstreamError(`${LABEL} upstream returned an empty body`);
      return response;
    } catch (error) {
      throw deadline.translate(error, LABEL);
    }
  }

  private async *nonStreamingReply(
    response: Response,
    deadline: RequestDeadline,
    toolCalls: ToolCallAssembler,
  ): AsyncGenerator<string> {
    let parsed: StreamChunk;
    try {
      parsed = JSON.parse(await readBoundedText(response, LABEL, MAX_JSON_REPLY_BYTES)) as StreamChunk;
    } catch (error) {
      throw deadline.translate(error instanceof SyntaxError ? malformed() : error, LABEL);
    }
    throwIfErrorPayload(parsed);
    toolCalls.push(parsed.choices?.[0]?.message?.tool_calls);
    const content = parsed.choices?.[0]?.message?.content;
    if (typeof content === 'string' && content.length > 0) yield content;
  }

  private async *streamedReply(
    response: Response,
    deadline: RequestDeadline,
    toolCalls: ToolCallAssembler,
  ): AsyncGenerator<string> {
    // Raw bytes: the decoder bounds each line and event (an endless line aborts the request at 1 MiB).
    const reader = response.body!.getReader();
    const decoder = new SseDataDecoder({ label: LABEL });
    let sawFirstToken = false;
    let sawFinishReason = false;
    try {
      for (;;) {
        let result: ReadableStreamReadResult<Uint8Array>;
        try {
          result = await reader.read();
        } catch (error) {
          throw deadline.translate(deadline.expiredWaitingFor ? error : midStreamFailure(error), LABEL);
        }
        const payloads = result.done ? decoder.flush() : decoder.push(result.value);
        for (const payload of payloads) {
          if (payload.trim() === '[DONE]') return;
          const chunk = parseChunk(payload);
          throwIfErrorPayload(chunk);
          const choice = chunk.choices?.[0];
          if (choice?.finish_reason) sawFinishReason = true;
          if (choice?.delta?.tool_calls !== undefined) {
            toolCalls.push(choice.delta.tool_calls);
            // A call's fragments are the model answering: from here on the idle deadline applies.
            if (toolCalls.size > 0) sawFirstToken = true;
          }
          const content = choice?.delta?.content;
          if (typeof content === 'string' && content.length > 0) {
            sawFirstToken = true;
            // The consumer may hold a delta while synthesis catches up; that is not upstream idleness.
            deadline.pause();
            yield content;
            if (deadline.signal.aborted) throw deadline.translate(undefined, LABEL);
            deadline.arm(this.idleTimeoutMs, 'stream data');
          }
        }
        if (result.done) {
          if (sawFinishReason) return;
          throw new UpstreamError(`${LABEL} upstream closed the stream before the reply was complete`);
        }
        if (sawFirstToken) deadline.arm(this.idleTimeoutMs, 'stream data');
      }
    } finally {
      reader.cancel().catch(() => {
        // Already errored or aborted: the socket is gone either way.
      });
    }
  }
}

/** A message as chat-completions takes it: an assistant's text is null when it only calls tools (some servers refuse ''). */
function wireMessage(message: ChatMessage): Record<string, unknown> {
  if (message.role === 'tool') return { role: 'tool', tool_call_id: message.tool_call_id, content: message.content };
  if (message.role === 'assistant' && message.tool_calls?.length) {
    return {
      role: 'assistant',
      content: message.content || null,
      tool_calls: message.tool_calls.map((call) => ({
        id: call.id,
        type: 'function',
        function: { name: call.name, arguments: call.arguments },
      })),
    };
  }
  return { role: message.role, content: message.content };
}

function parseChunk(payload: string): StreamChunk {
  try {
    return JSON.parse(payload) as StreamChunk;
  } catch {
    throw malformed();
  }
}

function malformed(): UpstreamError {
  return new UpstreamError(`${LABEL} upstream sent a malformed response (not chat-completions JSON)`);
}

function midStreamFailure(error: unknown): UpstreamError {
  return new UpstreamError(`${LABEL} upstream connection lost mid-stream: ${describeTransportError(error)}`);
}

/** vLLM and llama.cpp report failures after the 200 header as an `error` object inside the stream. */
function throwIfErrorPayload(chunk: StreamChunk): void {
  if (chunk.error === undefined || chunk.error === null) return;
  const text = extractErrorText(JSON.stringify({ error: chunk.error })) || 'unknown error';
  throw new UpstreamError(`${LABEL} upstream reported an error mid-stream: ${text}`);
}
