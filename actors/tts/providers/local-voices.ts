/**
 * Reference WAVs of voices cloned for the local engines live in `<voiceDir>/<provider>/<voice_id>.wav`.
 * The engine runs on the same host (or mounts the same directory at the same path), so only the
 * absolute path travels to it.
 */
import { randomBytes } from 'node:crypto';
import { access, mkdir, rename, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fetchUpstream, readBody, trimTrailingSlash, type FetchLike } from '../../upstream/http.ts';
import { VoiceNotFoundError, type CloneRequest, type TtsProviderId } from '../types.ts';
import { ProviderNotConfiguredError } from '../../upstream/errors.ts';

/** Voice ids we generate: safe as file names, never able to climb out of the directory. */
export const LOCAL_VOICE_ID_PATTERN = /^clone-[0-9a-f]{16}$/;

export function newLocalVoiceId(): string {
  return `clone-${randomBytes(8).toString('hex')}`;
}

export function referencePathFor(voiceDir: string, provider: TtsProviderId, voiceId: string): string {
  if (!LOCAL_VOICE_ID_PATTERN.test(voiceId)) throw new RangeError(`not a local voice id: ${voiceId}`);
  return path.resolve(voiceDir, provider, `${voiceId}.wav`);
}

/** Written via a temporary name so an engine never reads a half-written reference. */
export async function writeReference(
  voiceDir: string,
  provider: TtsProviderId,
  voiceId: string,
  wav: Buffer,
): Promise<string> {
  const target = referencePathFor(voiceDir, provider, voiceId);
  await mkdir(path.dirname(target), { recursive: true });
  const temporary = `${target}.${process.pid}.tmp`;
  try {
    await writeFile(temporary, wav);
    await rename(temporary, target);
  } catch (error) {
    await rm(temporary, { force: true });
    throw error;
  }
  return target;
}

export async function removeReference(voiceDir: string, provider: TtsProviderId, voiceId: string): Promise<void> {
  if (!LOCAL_VOICE_ID_PATTERN.test(voiceId)) return;
  await rm(referencePathFor(voiceDir, provider, voiceId), { force: true });
}

/** Absolute reference path when `voice` is one of our clones and its file exists, else null. */
export async function existingReference(
  voiceDir: string | undefined,
  provider: TtsProviderId,
  voice: string,
): Promise<string | null> {
  if (!voiceDir || !LOCAL_VOICE_ID_PATTERN.test(voice)) return null;
  const file = referencePathFor(voiceDir, provider, voice);
  try {
    await access(file);
    return file;
  } catch {
    return null;
  }
}

/** The reference of a cloned voice the engine must be sent; a clone whose file is gone is a 400, not a 502. */
export async function requireReference(
  voiceDir: string | undefined,
  provider: TtsProviderId,
  voice: string,
): Promise<string> {
  const reference = await existingReference(voiceDir, provider, voice);
  if (!reference)
    throw new VoiceNotFoundError(`${provider} voice ${voice} has no reference sample in the voice directory`);
  return reference;
}

/**
 * Zero-shot cloning for a local engine: the reference is stored, then `probePath` on the engine
 * must answer, so a clone against a dead server fails (and leaves no file) instead of dangling.
 */
export async function storeLocalClone(options: {
  provider: TtsProviderId;
  voiceDir: string | undefined;
  baseUrl: string;
  probePath: string;
  fetchImpl: FetchLike;
  request: CloneRequest;
}): Promise<string> {
  const { provider, voiceDir, request } = options;
  if (!voiceDir)
    throw new ProviderNotConfiguredError(`${provider} cloning needs a voice directory (SERVICE_TTS_VOICE_DIR)`);
  const voiceId = newLocalVoiceId();
  await writeReference(voiceDir, provider, voiceId, request.wav24k);
  try {
    const probe = `${trimTrailingSlash(options.baseUrl)}${options.probePath}`;
    const response = await fetchUpstream(options.fetchImpl, probe, { method: 'GET', signal: request.signal, provider });
    await readBody(response, request.signal, provider);
  } catch (error) {
    await removeReference(voiceDir, provider, voiceId);
    throw error;
  }
  return voiceId;
}
