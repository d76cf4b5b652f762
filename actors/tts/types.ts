/**
 * The shared streaming text-to-speech stage interface. Every provider (one file each under
 * `actors/tts/providers/<id>.ts`) implements `TtsProvider`; the session pipeline, `/tts/preview`
 * and the offline renderer only ever talk to this interface.
 */
import type { ProviderStatus } from '../upstream/errors.ts';
import type { PhoneTiming } from '../mouth/visemes.ts';

export type { PhoneTiming };

/** Provider identifiers exactly as the interface specification names them. */
export const TTS_PROVIDER_IDS = [
  'builtin',
  'cloud_a',
  'cloud_b',
  'cloud_c',
  'cloud_d',
  'cloud_e',
  'cloud_f',
  'local_clone_a',
  'local_clone_b',
  'compat_http',
] as const;
export type TtsProviderId = (typeof TTS_PROVIDER_IDS)[number];

export function isTtsProviderId(value: unknown): value is TtsProviderId {
  return typeof value === 'string' && (TTS_PROVIDER_IDS as readonly string[]).includes(value);
}

/** What speaks: voice null is the provider's default voice, model null the provider's default model. */
export interface TtsSelection {
  provider: TtsProviderId;
  voice: string | null;
  model: string | null;
}

/** The logger a provider (and the built-in engine's pool) reports to; pino satisfies it. */
export interface TtsLogger {
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
  error(obj: object, msg?: string): void;
  debug(obj: object, msg?: string): void;
}

export interface TtsChunk {
  /** 16-bit signed mono PCM. */
  pcm: Int16Array;
  sampleRate: number;
  /** Phone timings covering this chunk, when the engine gives them; otherwise the mouth is derived from audio. */
  phones?: PhoneTiming[];
  /** Index of the sentence this chunk belongs to (sentences of one request count from 0). */
  sentenceIndex?: number;
}

export interface TtsRequest {
  text: string;
  /** Provider-specific voice; null/undefined means the provider default. */
  voice?: string | null;
  /** Provider-specific model identifier. */
  model?: string | null;
  /** Sample rate the caller wants; providers resample when their engine differs. */
  sampleRate: number;
  signal: AbortSignal;
  /**
   * `preview`: a one-off preview that must never delay a live turn; providers with local engines run it apart
   * from live sentences (builtin: its own, lower-priority engine process). Default `live`.
   */
  priority?: 'live' | 'preview';
}

export interface CloneRequest {
  /** 24 kHz mono 16-bit WAV bytes of the sample. */
  wav24k: Buffer;
  targetModel: string;
  displayLabel: string;
  prefix?: string | null;
  preferredName?: string | null;
  /** Public URL of the stored sample, for providers that fetch it (cloud_b). */
  sampleUrl?: string;
  signal: AbortSignal;
}

export interface CloneResult {
  voiceId: string;
  message: string;
}

/** A stock voice as the provider's own voice-list endpoint describes it. */
export interface ListedVoice {
  /** What to pass as `voice`. */
  id: string;
  /** Display name (the id when the provider gives none). */
  name: string;
  /** BCP-47 tag as the provider gives it (`en-US`, `en`); null when unknown. */
  language: string | null;
  gender: 'female' | 'male' | 'neutral' | null;
}

export interface TtsProvider {
  readonly id: TtsProviderId;
  /** The voice used when a request names none; null or absent: the provider has no stock voice. */
  readonly defaultVoice?: string | null;
  status(): ProviderStatus;
  /**
   * Present only where the provider's protocol has a voice-list endpoint. Lists stock voices that
   * `validateVoice` accepts; throws `UpstreamError` like synthesis, and the caller's abort as-is.
   */
  listVoices?(signal: AbortSignal): Promise<ListedVoice[]>;
  /** Throws `VoiceNotFoundError` for a voice the provider cannot use (becomes 400). */
  validateVoice?(voice: string | null | undefined): void;
  /** Streams audio sentence by sentence; honours `signal` between and inside chunks. */
  synthesize(request: TtsRequest): AsyncIterable<TtsChunk>;
  /** Present only on providers that support cloning. */
  clone?(request: CloneRequest): Promise<CloneResult>;
  /**
   * Cloning providers only: the model a clone is made for when neither the request nor the persona names
   * one; null: there is no sensible default and the client must choose.
   */
  readonly defaultCloneModel?: string | null;
}

/** Thrown for an unknown voice of a known provider: a client error (400). */
export class VoiceNotFoundError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'VoiceNotFoundError';
  }
}
