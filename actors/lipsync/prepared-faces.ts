/**
 * Prepared faces (`face-crop.ts`) shared by the sessions of one avatar: the crop, tensor and mask depend only on
 * the avatar's content and the model's face size, so a second session on the same avatar costs nothing.
 */
import { createHash } from 'node:crypto';
import type { AvatarSource } from '../render/types.ts';
import { prepareFace, type PreparedFace } from './face-crop.ts';

/** A few avatars' worth (a 96² face is ~0.3 MB, a 288² one ~2 MB plus the frame): the live sessions' avatars. */
export const MAX_PREPARED_FACES = 8;

export class PreparedFaceCache {
  private readonly entries = new Map<string, Promise<PreparedFace>>();

  get(avatar: AvatarSource, size: number): Promise<PreparedFace> {
    const hash = createHash('sha1').update(JSON.stringify(avatar.manifest));
    if (avatar.framePng) hash.update(avatar.framePng);
    const key = `${avatar.id}|${size}|${hash.digest('hex')}`;
    let entry = this.entries.get(key);
    if (entry) {
      this.entries.delete(key);
      this.entries.set(key, entry);
      return entry;
    }
    entry = prepareFace(avatar, size);
    entry.catch(() => this.entries.delete(key));
    this.entries.set(key, entry);
    while (this.entries.size > MAX_PREPARED_FACES) this.entries.delete(this.entries.keys().next().value as string);
    return entry;
  }
}
