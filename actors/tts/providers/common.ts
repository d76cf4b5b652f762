/** Small pieces every HTTP provider adapter shares: config variable names, the "not configured" rule, sentences. */
import { splitSentences } from '../sentences.ts';
import { ProviderNotConfiguredError, type ProviderStatus } from '../../upstream/errors.ts';
import type { FetchLike } from '../../upstream/http.ts';
import type { ListedVoice, TtsLogger, TtsProviderId, TtsRequest } from '../types.ts';

/** Per-provider configuration injected by the registry (never read from the environment here). */
export interface ProviderConfig {
  baseUrl?: string;
  apiKey?: string;
  /** Directory where local cloning engines find reference WAVs. */
  voiceDir?: string;
  fetch?: FetchLike;
  logger?: TtsLogger;
}

/** `SERVICE_TTS_CLOUD_A_API_KEY` and friends: the id upper-cased. */
export function envVarName(id: TtsProviderId, suffix: 'BASE_URL' | 'API_KEY'): string {
  return `SERVICE_TTS_${id.toUpperCase()}_${suffix}`;
}

/** Reference material of a cloned voice that an engine needs at synthesis time. */
export interface ClonedVoiceReference {
  /** Absolute path of the 24 kHz reference WAV (local cloning engines). */
  referencePath?: string;
  /** `data:audio/wav;base64,...` (clouds that take the sample with every request). */
  referenceDataUri?: string;
  /** Model the voice was cloned for; clouds bind a cloned voice to it. */
  targetModel?: string;
}

/** Finds a cloned voice of this provider by its voice_id (backed by the voice catalog). */
export type VoiceLookup = (provider: TtsProviderId, voiceId: string) => Promise<ClonedVoiceReference | null>;

export interface CloningProviderConfig extends ProviderConfig {
  voiceLookup?: VoiceLookup;
}

/**
 * The model to synthesise with when the request names none: a voice cloned on a cloud only works
 * with the model it was enrolled for, which the catalog remembers. Undefined → provider default.
 */
export async function clonedVoiceModel(
  config: CloningProviderConfig,
  id: TtsProviderId,
  request: TtsRequest,
): Promise<string | undefined> {
  if (request.model) return request.model;
  if (!request.voice || !config.voiceLookup) return undefined;
  return (await config.voiceLookup(id, request.voice))?.targetModel;
}

/** Status from the variables a provider needs; the reason names exactly what to set. */
export function statusFromRequired(
  id: TtsProviderId,
  required: Array<{ value: string | undefined; suffix: 'BASE_URL' | 'API_KEY' }>,
): ProviderStatus {
  const missing = required.filter((item) => !item.value).map((item) => envVarName(id, item.suffix));
  if (missing.length === 0) return { configured: true };
  return { configured: false, reason: `set ${missing.join(' and ')}` };
}

export function assertConfigured(id: TtsProviderId, status: ProviderStatus): void {
  if (!status.configured)
    throw new ProviderNotConfiguredError(`TTS provider ${id} is not configured: ${status.reason}`);
}

/** A voice list's gender field (`Female`, `FEMALE`, `female`, ...) in the service's spelling; null when absent or unspecified. */
export function genderOf(value: unknown): ListedVoice['gender'] {
  const lower = typeof value === 'string' ? value.trim().toLowerCase() : '';
  return lower === 'female' || lower === 'male' || lower === 'neutral' ? lower : null;
}

/** Sentences to synthesise one by one; an empty text yields none rather than an upstream call. */
export function sentencesOf(text: string): string[] {
  return splitSentences(text).filter((sentence) => sentence.trim().length > 0);
}

/** Random lower-case alphanumerics for generated voice names and prefixes. */
export function randomAlphanumeric(length: number): string {
  const alphabet = 'abcdefghijklmnopqrstuvwxyz0123456789';
  let out = '';
  const bytes = crypto.getRandomValues(new Uint8Array(length));
  for (const byte of bytes) out += alphabet[byte % alphabet.length];
  return out;
}
