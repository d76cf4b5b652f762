/**
 * What every upstream-backed stage (TTS providers, the language model, speech recognition, the remote
 * lipsync model) reports the same way: whether it is configured, and the two failures the HTTP layer maps
 * (`src/plugins/app/errors.ts`): not configured → 400/503 naming the variable, upstream failed → 502.
 */

export interface ProviderStatus {
  configured: boolean;
  /** Human reason when not configured (which variable to set). */
  reason?: string;
}

/** Thrown when the upstream provider fails or rejects (becomes 502 with the upstream text). */
export class UpstreamError extends Error {
  constructor(
    message: string,
    readonly upstreamStatus?: number,
  ) {
    super(message);
    this.name = 'UpstreamError';
  }
}

/** Thrown when a provider is used without its configuration (becomes 400/503 with the variable to set). */
export class ProviderNotConfiguredError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ProviderNotConfiguredError';
  }
}
