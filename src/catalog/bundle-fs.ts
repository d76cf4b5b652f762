import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import { isValidAvatarId } from './slug.ts';

/**
 * Hidden directories a bundle passes through, which the catalog never lists (it skips every name starting
 * with `.`): a bundle is built in `.tmp-*` and renamed to its id in one step (custom-avatar.ts), and deleted
 * by a rename to `.trash-*` followed by the removal. A crash between the steps leaves one of them behind,
 * never a half bundle under a real id; `sweepBundleLeftovers` removes them at start-up.
 */
export const BUILDING_DIR_PREFIX = '.tmp-';
export const TRASH_DIR_PREFIX = '.trash-';

/**
 * Removes a bundle so it never appears half-deleted: rename it to a hidden `.trash-*` directory (one
 * atomic step the catalog ignores), then delete that. Resolves false when there was no bundle to rename:
 * someone else's delete took it first, which is the caller's "not found", not a failure.
 */
export async function removeBundleDir(avatarsDir: string, id: string, tag?: string): Promise<boolean> {
  if (!isValidAvatarId(id)) throw new Error('invalid avatar id');
  const trash = path.join(
    avatarsDir,
    `${TRASH_DIR_PREFIX}${tag ? `${tag}-` : ''}${id}-${randomBytes(4).toString('hex')}`,
  );
  try {
    await fs.rename(path.join(avatarsDir, id), trash);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return false;
    throw error;
  }
  await fs.rm(trash, { recursive: true, force: true });
  return true;
}

/**
 * Start-up sweep of the avatars directory: removes `.tmp-*` and `.trash-*` directories, which only an
 * upload or a delete that a crash interrupted can leave (none is in progress before the service listens).
 * With `tag` (cluster mode: the directory is shared, other nodes' uploads may be in progress) only
 * `.tmp-<tag>-*` and `.trash-<tag>-*`, this node's own. Resolves with how many were removed.
 */
export async function sweepBundleLeftovers(avatarsDir: string, tag?: string): Promise<number> {
  let dirents;
  try {
    dirents = await fs.readdir(avatarsDir, { withFileTypes: true });
  } catch {
    return 0;
  }
  const mine = tag ? `${tag}-` : '';
  const leftovers = dirents.filter(
    (dirent) =>
      dirent.isDirectory() &&
      (dirent.name.startsWith(BUILDING_DIR_PREFIX + mine) || dirent.name.startsWith(TRASH_DIR_PREFIX + mine)),
  );
  await Promise.all(
    leftovers.map((dirent) => fs.rm(path.join(avatarsDir, dirent.name), { recursive: true, force: true })),
  );
  return leftovers.length;
}
