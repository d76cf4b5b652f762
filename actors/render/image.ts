/** Bundle image loading through sharp: always straight RGBA at exactly the requested size. */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import sharp from 'sharp';
import type { AvatarSource } from './types.ts';

export interface RgbaImage {
  width: number;
  height: number;
  data: Uint8Array;
}

export const BUNDLE_FRAME_PATH = join('frames', 'frame_00000.png');

export async function loadRgba(input: string | Buffer, width: number, height: number): Promise<RgbaImage> {
  const { data, info } = await sharp(input)
    .resize(width, height, { fit: 'cover' })
    .ensureAlpha()
    .raw()
    .toBuffer({ resolveWithObject: true });
  return { width: info.width, height: info.height, data: new Uint8Array(data.buffer, data.byteOffset, data.length) };
}

/** The avatar's first bundle frame scaled (cover) to the manifest size. */
export function loadBundleFrame(avatar: AvatarSource): Promise<RgbaImage> {
  const source = avatar.framePng ? Buffer.from(avatar.framePng) : join(avatar.dir, BUNDLE_FRAME_PATH);
  return loadRgba(source, avatar.manifest.width, avatar.manifest.height);
}

/** Rasterises an SVG document (librsvg inside sharp) to RGBA at its own size. */
export async function rasteriseSvg(svg: string): Promise<RgbaImage> {
  const { data, info } = await sharp(Buffer.from(svg)).ensureAlpha().raw().toBuffer({ resolveWithObject: true });
  return { width: info.width, height: info.height, data: new Uint8Array(data.buffer, data.byteOffset, data.length) };
}

export async function writePng(path: string, image: RgbaImage): Promise<void> {
  await sharp(Buffer.from(image.data.buffer, image.data.byteOffset, image.data.length), {
    raw: { width: image.width, height: image.height, channels: 4 },
  })
    .png()
    .toFile(path);
}

/** A file's bytes in shared memory: handed to every render task without a copy. */
export async function readShared(file: string): Promise<Uint8Array> {
  const bytes = await readFile(file);
  const shared = new Uint8Array(new SharedArrayBuffer(bytes.length));
  shared.set(bytes);
  return shared;
}
