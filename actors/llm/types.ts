/**
 * The language-model stage interface. Providers stream token deltas so synthesis can start on the
 * first sentence; the caller's AbortSignal (interrupt, session end) stops generation and closes the
 * upstream connection.
 */
import type { ProviderStatus } from '../upstream/errors.ts';

export interface ChatMessage {
  role: 'system' | 'user' | 'assistant';
  content: string;
}

export interface LlmStreamRequest {
  messages: ChatMessage[];
  signal: AbortSignal;
  /** Overrides the provider's configured model for this request. */
  model?: string;
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
