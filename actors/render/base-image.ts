import path from 'node:path';
import sharp from 'sharp';
import type { AvatarSource } from './types.ts';

/** The avatar's still frame as RGBA at the manifest size (cover-fit), the starting point of every renderer. */
export async function loadBaseRgba(avatar: AvatarSource): Promise<Uint8Array> {
  const { width, height } = avatar.manifest;
  const { data } = await sharp(path.join(avatar.dir, 'frames', 'frame_00000.png'), { limitInputPixels: 64_000_000 })
    .removeAlpha()
    .resize(width, height, { fit: 'cover' })
    .ensureAlpha()
    .raw()
    .toBuffer({ resolveWithObject: true });
  return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
}
