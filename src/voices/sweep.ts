/**
 * Start-up sweep of the reference WAVs of local clones (`<voiceDir>/<provider>/<voice_id>.wav`). A clone
 * writes its WAV first and its catalog record last, and a delete removes the record first and the WAV
 * last, so after a crash the only possible inconsistency is a WAV no record points to (or a half-written
 * one under a temporary name). Both are removed here, before the service accepts requests.
 *
 * Only names this service generates are touched (`clone-<16 hex>.wav` and their temporary names): files an
 * operator or the engine put in the directory stay.
 */
import { readdir, rm } from 'node:fs/promises';
import path from 'node:path';
import { isTemporaryName, finalNameOf } from '../files/atomic-file.ts';
import type { VoiceCatalogStore as VoiceCatalog } from './catalog.ts';

/** Providers whose clones are reference WAVs in the voice directory. */
const PROVIDERS_WITH_REFERENCE_FILES = ['local_clone_a', 'local_clone_b'] as const;
const REFERENCE_FILE = /^(clone-[0-9a-f]{16})\.wav$/;
/** `writeReference` (actors/tts/providers/local-voices.ts) writes `<name>.<pid>.tmp` before its rename. */
const PID_TEMPORARY_FILE = /^clone-[0-9a-f]{16}\.wav\.\d+\.tmp$/;

export interface VoiceSweepResult {
  /** Reference WAVs without a catalog record: their clone never finished, or their delete did not. */
  orphanReferences: number;
  /** Reference WAVs a crash cut off before their rename. */
  temporaryFiles: number;
}

export async function sweepVoiceFiles(input: { catalog: VoiceCatalog; voiceDir: string }): Promise<VoiceSweepResult> {
  const result: VoiceSweepResult = { orphanReferences: 0, temporaryFiles: 0 };
  const entries = await input.catalog.list();
  for (const provider of PROVIDERS_WITH_REFERENCE_FILES) {
    const dir = path.join(input.voiceDir, provider);
    let names: string[];
    try {
      names = await readdir(dir);
    } catch {
      continue;
    }
    const recorded = new Set(entries.filter((entry) => entry.provider === provider).map((entry) => entry.voice_id));
    for (const name of names) {
      const reference = REFERENCE_FILE.exec(name);
      const temporary =
        PID_TEMPORARY_FILE.test(name) || (isTemporaryName(name) && REFERENCE_FILE.test(finalNameOf(name)));
      if (temporary) result.temporaryFiles++;
      else if (reference && !recorded.has(reference[1])) result.orphanReferences++;
      else continue;
      await rm(path.join(dir, name), { force: true });
    }
  }
  return result;
}
