/**
 * `POST /voices/clone` at library level (spec 4.10): validate, convert the sample to 24 kHz mono WAV,
 * hand it to the provider the way that provider takes samples, and only after the provider accepted
 * write the catalog entry. Anything created on the way (upload, reference WAV) is removed on failure;
 * what a crash leaves on the way has no catalog record and is removed at start-up (`sweep.ts`,
 * `VoiceUploads.recover`).
 */
import { rm } from 'node:fs/promises';
import path from 'node:path';
import type { TtsRegistry } from '../../actors/tts/registry.ts';
import { CLOUD_B_PREFIX_PATTERN } from '../../actors/tts/providers/cloud_b.ts';
import { CLOUD_A_PREFERRED_NAME_PATTERN } from '../../actors/tts/providers/cloud_a.ts';
import type { VoiceLookup } from '../../actors/tts/providers/common.ts';
import { referencePathFor, removeReference } from '../../actors/tts/providers/local-voices.ts';
import type { TtsProviderId } from '../../actors/tts/types.ts';
import { ProviderNotConfiguredError } from '../../actors/upstream/errors.ts';
import type { VoiceCatalogStore as VoiceCatalog, NewVoiceEntry } from './catalog.ts';
import { AudioConversionError, convertTo24kMonoWav } from './convert.ts';
import type { VoiceUploads } from './uploads.ts';

export const CLONE_PROVIDERS = ['cloud_a', 'cloud_b', 'local_clone_a', 'local_clone_b', 'cloud_d'] as const;
export type CloneProviderId = (typeof CLONE_PROVIDERS)[number];
export const MIN_CLONE_AUDIO_BYTES = 256;
export const MAX_CLONE_AUDIO_BYTES = 12 * 1024 * 1024;

/** A request the client must fix (400). */
export class CloneValidationError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'CloneValidationError';
  }
}

export interface CloneResponse {
  ok: boolean;
  entry_id: number;
  voice_id: string;
  display_label: string;
  provider: string;
  target_model: string;
  message: string;
}

export interface CloneVoiceInput {
  provider: string;
  targetModel: string;
  displayLabel: string;
  audio: Buffer;
  prefix?: string | null;
  preferredName?: string | null;
  registry: TtsRegistry;
  catalog: VoiceCatalog;
  uploads: VoiceUploads;
  voiceDir: string;
  /** Base of the address cloud_b fetches the sample from (`SERVICE_PUBLIC_BASE_URL`). */
  publicBaseUrl?: string;
  signal: AbortSignal;
}

function isCloneProvider(value: string): value is CloneProviderId {
  return (CLONE_PROVIDERS as readonly string[]).includes(value);
}

function validate(input: CloneVoiceInput): CloneProviderId {
  const { provider } = input;
  if (!isCloneProvider(provider))
    throw new CloneValidationError(
      `provider "${provider}" does not support cloning; use one of ${CLONE_PROVIDERS.join(', ')}`,
    );
  if (!input.targetModel?.trim()) throw new CloneValidationError('target_model is required');
  if (!input.displayLabel?.trim()) throw new CloneValidationError('display_label is required');
  if (!input.audio || input.audio.length === 0) throw new CloneValidationError('audio is missing');
  if (input.audio.length < MIN_CLONE_AUDIO_BYTES)
    throw new CloneValidationError(`audio is too short (minimum ${MIN_CLONE_AUDIO_BYTES} bytes)`);
  if (input.audio.length > MAX_CLONE_AUDIO_BYTES) throw new CloneValidationError('audio is over 12 MB');
  if (input.prefix && provider !== 'cloud_b') throw new CloneValidationError('prefix applies to cloud_b only');
  if (input.prefix && !CLOUD_B_PREFIX_PATTERN.test(input.prefix))
    throw new CloneValidationError('prefix must be 1-9 lower-case letters or digits');
  if (input.preferredName && provider !== 'cloud_a')
    throw new CloneValidationError('preferred_name applies to cloud_a only');
  if (input.preferredName && !CLOUD_A_PREFERRED_NAME_PATTERN.test(input.preferredName)) {
    throw new CloneValidationError('preferred_name must be 1-16 letters, digits or underscores');
  }
  if (provider === 'cloud_b' && !input.publicBaseUrl)
    throw new CloneValidationError('cloud_b cloning needs SERVICE_PUBLIC_BASE_URL');
  return provider;
}

export async function cloneVoice(input: CloneVoiceInput): Promise<CloneResponse> {
  const providerId = validate(input);
  const provider = input.registry.get(providerId);
  const status = provider.status();
  if (!status.configured)
    throw new ProviderNotConfiguredError(`TTS provider ${providerId} is not configured: ${status.reason}`);
  if (!provider.clone) throw new CloneValidationError(`provider "${providerId}" does not support cloning`);

  let wav24k: Buffer;
  try {
    wav24k = await convertTo24kMonoWav(input.audio, input.signal);
  } catch (error) {
    if (error instanceof AudioConversionError) throw new CloneValidationError(error.message);
    throw error;
  }

  let uploadToken: string | null = null;
  let sampleUrl: string | undefined;
  if (providerId === 'cloud_b') {
    uploadToken = await input.uploads.store(wav24k);
    sampleUrl = `${input.publicBaseUrl!.replace(/\/+$/, '')}/voice-uploads/${uploadToken}`;
  }

  let voiceId: string | null = null;
  try {
    const result = await provider.clone({
      wav24k,
      targetModel: input.targetModel.trim(),
      displayLabel: input.displayLabel.trim(),
      prefix: input.prefix ?? null,
      preferredName: input.preferredName ?? null,
      sampleUrl,
      signal: input.signal,
    });
    voiceId = result.voiceId;
    const entry: NewVoiceEntry = {
      user_id: null,
      provider: providerId,
      voice_id: result.voiceId,
      display_label: input.displayLabel.trim(),
      target_model: input.targetModel.trim(),
      source: 'clone',
    };
    if (providerId === 'local_clone_a' || providerId === 'local_clone_b')
      entry.reference_path = referencePathFor(input.voiceDir, providerId, result.voiceId);
    if (providerId === 'cloud_d') entry.reference_data_uri = `data:audio/wav;base64,${wav24k.toString('base64')}`;
    const stored = await input.catalog.create(entry);
    // Recorded: the sample may now outlive a restart until it expires. A failed commit only shortens that.
    if (uploadToken) await input.uploads.commit(uploadToken).catch(() => {});
    return {
      ok: true,
      entry_id: stored.id,
      voice_id: stored.voice_id,
      display_label: stored.display_label,
      provider: stored.provider,
      target_model: stored.target_model,
      message: result.message,
    };
  } catch (error) {
    // The cloud_b sample stays only while the provider may still fetch it for an accepted clone.
    if (uploadToken) await input.uploads.remove(uploadToken).catch(() => {});
    if (voiceId && (providerId === 'local_clone_a' || providerId === 'local_clone_b'))
      await removeReference(input.voiceDir, providerId, voiceId).catch(() => {});
    // Upstream rejections arrive as UpstreamError (502) from the adapters; everything else propagates as is.
    throw error;
  }
}

/** Deletes a catalog entry and, for local clones, its reference WAV. False when no such entry. */
export async function deleteClonedVoice(input: {
  id: number;
  catalog: VoiceCatalog;
  voiceDir: string;
}): Promise<boolean> {
  const entry = await input.catalog.get(input.id);
  if (!entry) return false;
  const deleted = await input.catalog.delete(input.id);
  const reference = entry.reference_path;
  // Only files inside the voice directory are ours to remove.
  if (deleted && reference && path.resolve(reference).startsWith(path.resolve(input.voiceDir) + path.sep)) {
    await rm(reference, { force: true });
  }
  return deleted;
}

/** Lets providers resolve cloned voice_ids through the catalog (data URIs, reference paths, target models). */
export function catalogVoiceLookup(catalog: VoiceCatalog): VoiceLookup {
  return async (provider: TtsProviderId, voiceId: string) => {
    const entry = await catalog.findByVoiceId(provider, voiceId);
    if (!entry) return null;
    return {
      referencePath: entry.reference_path,
      referenceDataUri: entry.reference_data_uri,
      targetModel: entry.target_model,
    };
  };
}
