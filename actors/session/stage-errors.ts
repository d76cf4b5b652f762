import { ProviderNotConfiguredError, UpstreamError, VoiceNotFoundError } from '../tts/types.ts';

/**
 * In-stream error codes (SSE `error` and WebSocket `error` messages). Documented in docs/events.md.
 * Stage failures are recoverable: the turn ends and the pipeline returns to idle.
 */
export function stageErrorOf(stage: string, error: unknown): { code: string; message: string; fatal: boolean } {
  const message = error instanceof Error ? error.message : String(error);
  if (error instanceof UpstreamError) return { code: `${stage}_upstream_error`, message, fatal: false };
  if (error instanceof ProviderNotConfiguredError) return { code: `${stage}_not_configured`, message, fatal: false };
  if (error instanceof VoiceNotFoundError) return { code: 'voice_not_found', message, fatal: false };
  return { code: `${stage}_failed`, message, fatal: false };
}
