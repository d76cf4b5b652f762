/**
 * The speech-recognition stage interface: one utterance of mono 16-bit PCM in, its text out.
 * Long recordings are split at pauses first (`actors/audio/vad.ts` `splitForAsr`).
 */
import type { ProviderStatus } from '../upstream/errors.ts';

export interface TranscribeRequest {
  pcm: Int16Array;
  sampleRate: number;
  /** ISO-639-1 hint (`en`, `de`); omitted lets the server detect the language. */
  language?: string;
  signal: AbortSignal;
}

export interface TranscribeResult {
  text: string;
}

export interface AsrProvider {
  readonly id: string;
  status(): ProviderStatus;
  /**
   * Throws `ProviderNotConfiguredError` when unconfigured, `UpstreamError` on upstream failure or
   * timeout, and an `AbortError` when `signal` aborts.
   */
  transcribe(request: TranscribeRequest): Promise<TranscribeResult>;
}
