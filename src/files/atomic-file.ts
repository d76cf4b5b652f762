/**
 * Every file the service keeps appears in one step: it is written under a temporary name in the same
 * directory and renamed over its final name, so a reader (or a restarted service) sees the whole file or
 * nothing. A crash between the two leaves only a name with the temporary marker, which the start-up sweep
 * of the directory's owner removes.
 */
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';

/** Marker between the final name and a random suffix: `recording.json.tmp-1a2b3c4d5e6f`. */
export const TEMPORARY_MARKER = '.tmp-';
const TEMPORARY_NAME = /\.tmp-[0-9a-f]{12}$/;

export function temporaryNameFor(file: string): string {
  return `${file}${TEMPORARY_MARKER}${randomBytes(6).toString('hex')}`;
}

/** True for a name `temporaryNameFor` made: a write that never reached its rename. */
export function isTemporaryName(name: string): boolean {
  return TEMPORARY_NAME.test(name);
}

/** The name a temporary file was going to get (the name itself when it is not temporary). */
export function finalNameOf(name: string): string {
  return name.replace(TEMPORARY_NAME, '');
}

/**
 * Writes `data` to `file` atomically. `durable` also fsyncs the data before the rename, for files whose
 * loss after a power cut would matter more than the extra flush; a process crash (kill -9) never loses a
 * completed write either way, the kernel already holds it.
 */
export async function writeFileAtomic(
  file: string,
  data: Buffer | string,
  options: { durable?: boolean } = {},
): Promise<void> {
  const temporary = temporaryNameFor(file);
  try {
    const handle = await fs.open(temporary, 'w');
    try {
      await handle.writeFile(data);
      if (options.durable) await handle.sync();
    } finally {
      await handle.close();
    }
    await fs.rename(temporary, file);
  } catch (error) {
    await fs.rm(temporary, { force: true });
    throw error;
  }
}
