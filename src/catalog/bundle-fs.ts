import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import { isValidAvatarId } from './slug.ts';

/**
 * Removes a bundle so it never appears half-deleted: rename it to a hidden `.trash-*` directory (one
 * atomic step the catalog ignores), then delete that.
 */
export async function removeBundleDir(avatarsDir: string, id: string): Promise<void> {
  if (!isValidAvatarId(id)) throw new Error('invalid avatar id');
  const trash = path.join(avatarsDir, `.trash-${id}-${randomBytes(4).toString('hex')}`);
  await fs.rename(path.join(avatarsDir, id), trash);
  await fs.rm(trash, { recursive: true, force: true });
}
