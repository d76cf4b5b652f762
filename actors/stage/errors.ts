import { VoiceNotFoundError } from '../tts/types.ts';
import { ProviderNotConfiguredError, UpstreamError } from '../upstream/errors.ts';

/**
 * Classification of stage errors: what the session does about a failure (spec 6.1 rule 5).
 *
 * - Recoverable: the turn ends, clients get `error` then `status idle`, the session goes on. Every failure
 *   of one request is recoverable (an upstream refusing, a voice not found, a provider not configured), and
 *   so is one renderer crash: the media reopens the renderer (`src/sessions/media.ts`).
 * - Fatal: the session cannot produce media any more; clients get `error` then `session.terminated` and
 *   the session ends. Raised as `UnrecoverableStageError` (e.g. the renderer failing again and again).
 *
 * In-stream codes (SSE `error`, WebSocket `error`) are listed in docs/events.md.
 */

/** A failure with its own code that ends the current turn but not the session. */
export class RecoverableStageError extends Error {
  constructor(
    readonly code: string,
    message: string,
    options?: ErrorOptions,
  ) {
    super(message, options);
    this.name = 'RecoverableStageError';
  }
}

/** The session cannot go on: `error`, then `session.terminated`. */
export class UnrecoverableStageError extends Error {
  constructor(
    readonly code: string,
    message: string,
    options?: ErrorOptions,
  ) {
    super(message, options);
    this.name = 'UnrecoverableStageError';
  }
}

export interface StageErrorReport {
  code: string;
  message: string;
  fatal: boolean;
}

export function stageErrorOf(stage: string, error: unknown): StageErrorReport {
  const message = error instanceof Error ? error.message : String(error);
  if (error instanceof UnrecoverableStageError) return { code: error.code, message, fatal: true };
  if (error instanceof RecoverableStageError) return { code: error.code, message, fatal: false };
  if (error instanceof UpstreamError) return { code: `${stage}_upstream_error`, message, fatal: false };
  if (error instanceof ProviderNotConfiguredError) return { code: `${stage}_not_configured`, message, fatal: false };
  if (error instanceof VoiceNotFoundError) return { code: 'voice_not_found', message, fatal: false };
  return { code: `${stage}_failed`, message, fatal: false };
}
