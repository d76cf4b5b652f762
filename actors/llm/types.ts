/**
 * The language-model stage interface. Providers stream token deltas so synthesis can start on the
 * first sentence; the caller's AbortSignal (interrupt, session end) stops generation and closes the
 * upstream connection. With `tools`, the model may answer a round with tool calls instead of (or after) text:
 * OpenAI's tool-calling protocol (`docs/integration.md`, "Tool calling").
 */
import type { ProviderStatus } from '../upstream/errors.ts';
import type { ExpressionName } from '../expression.ts';

/**
 * An expression tag of the reply (`[smile]`, `expression-tags.ts`) going with one reply segment (LLM.SEGMENT): shown
 * from the moment that segment's audio starts to play, since the tag belongs to the sentence it was written in.
 */
export interface SegmentExpression {
  name: ExpressionName;
  intensity: number;
}

/** A tool call the model asked for, assembled from its streamed deltas; `arguments` is the model's raw JSON text. */
export interface LlmToolCall {
  id: string;
  name: string;
  arguments: string;
}

export type ChatMessage =
  | { role: 'system' | 'user'; content: string }
  /** `tool_calls`: the calls this assistant message made (its text, possibly empty, came before them). */
  | { role: 'assistant'; content: string; tool_calls?: LlmToolCall[] }
  /** One tool's output, answering the assistant's call `tool_call_id`. */
  | { role: 'tool'; content: string; tool_call_id: string };

/** An OpenAI function definition as the model sees it (`tools` of a chat-completions request). */
export interface LlmToolDefinition {
  type: 'function';
  function: { name: string; description?: string; parameters: Record<string, unknown>; strict?: boolean };
}

export interface LlmStreamRequest {
  messages: ChatMessage[];
  signal: AbortSignal;
  /** Overrides the provider's configured model for this request. */
  model?: string;
  /** Functions the model may call; absent or empty: none are offered. */
  tools?: LlmToolDefinition[];
  /**
   * Called once, when the stream ends, with the tool calls the model made in it (in index order), if any. A
   * provider that cannot assemble calls (no tools offered) never calls it.
   */
  onToolCalls?: (calls: LlmToolCall[]) => void;
}

export interface LlmProvider {
  readonly id: string;
  status(): ProviderStatus;
  /**
   * Yields text deltas in order. Throws `ProviderNotConfiguredError` when unconfigured,
   * `UpstreamError` on upstream failure or timeout, and an `AbortError` when `signal` aborts.
   * Breaking out of the iteration also closes the upstream connection.
   */
  stream(request: LlmStreamRequest): AsyncIterable<string>;
}

/** One call the model made, as the session runs it: `arguments` is the model's JSON, parsed (always an object). */
export interface ToolInvocation {
  turnId: string;
  callId: string;
  name: string;
  arguments: Record<string, unknown>;
}

/**
 * The port through which the llm actor runs tools: the session implements it (`src/sessions/tools.ts`: a webhook
 * tool is an HTTP request, a client tool an SSE `tool_call` answered on `POST /sessions/{id}/tool_results`), so
 * the actor knows nothing of either.
 */
export interface ToolRunner {
  /** The session's tools as the model sees them now; a turn takes them when it starts. */
  definitions(): LlmToolDefinition[];
  /**
   * Runs one call and resolves with its output for the model (JSON text); a failure or timeout resolves with
   * `{"error": "…"}` so the model can tell the user. Rejects only when `signal` aborts (the turn was cut).
   */
  run(call: ToolInvocation, signal: AbortSignal): Promise<string>;
  /** Said once per turn when a round's tools are still running after `TOOL_FILLER_DELAY_MS`; null: nothing is said. */
  readonly fillerText: string | null;
}
