import sharp from 'sharp';
import type { MouthAnimation } from '../render/types.ts';
import type { MouthDetection, RgbaImage } from './types.ts';
import { transformAnimation } from './landmarks.ts';

/** The upload is not a usable portrait (empty, wrong format, undecodable, too many pixels); callers answer 400. */
export class InvalidImageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'InvalidImageError';
  }
}
const badRequest = (message: string) => new InvalidImageError(message);

/** Spec 8: portrait uploads are at most 10 MB. */
export const MAX_PORTRAIT_BYTES = 10 * 1024 * 1024;
/**
 * Decompression-bomb guard: a 10 MB file can declare gigapixels. 50 MP covers every phone camera; sharp
 * refuses larger inputs from the header, before allocating pixels.
 */
export const MAX_PORTRAIT_PIXELS = 50_000_000;
/** Detection runs on a copy no longer than this on its long side: faces stay far above the detector's minimum size. */
export const DETECTION_MAX_SIDE = 1024;

export type PortraitFormat = 'jpeg' | 'png' | 'webp';

export type Detector = (image: RgbaImage, opts: { signal?: AbortSignal }) => Promise<MouthDetection>;

/** Identifies JPEG, PNG and WebP from their magic numbers; anything else is null. The client's MIME type is not trusted. */
export function sniffPortraitFormat(bytes: Uint8Array): PortraitFormat | null {
  if (bytes.length >= 3 && bytes[0] === 0xff && bytes[1] === 0xd8 && bytes[2] === 0xff) return 'jpeg';
  const PNG = [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a];
  if (bytes.length >= 8 && PNG.every((b, i) => bytes[i] === b)) return 'png';
  const ascii = (from: number, to: number) => String.fromCharCode(...bytes.subarray(from, to));
  if (bytes.length >= 12 && ascii(0, 4) === 'RIFF' && ascii(8, 12) === 'WEBP') return 'webp';
  return null;
}

export interface PreparedPortrait {
  /** The RGB PNG of the bundle frame, exactly `width × height`. */
  png: Buffer;
  detection: MouthDetection;
  /** Present only when detection succeeded, in output-frame coordinates. */
  animation?: MouthAnimation;
}

/** An upright RGB image decoded from the upload, with EXIF orientation applied. */
interface UprightImage {
  rgb: Buffer;
  width: number;
  height: number;
}

/**
 * Turns an uploaded portrait into the bundle frame: checks the format from its bytes, decodes it under a
 * pixel limit, applies EXIF orientation, drops alpha, finds the face, and cover-crops to `target` centred on
 * the face (on the image centre without one). Invalid or undecodable images throw `InvalidImageError`.
 */
export async function preparePortrait(
  bytes: Buffer,
  target: { width: number; height: number },
  opts: { detect: Detector; signal?: AbortSignal },
): Promise<PreparedPortrait> {
  if (bytes.length === 0) throw badRequest('image is empty');
  if (!sniffPortraitFormat(bytes)) throw badRequest('image must be JPEG, PNG or WebP');
  const upright = await decodeUpright(bytes);
  opts.signal?.throwIfAborted();
  const detection = await detectOn(upright, opts.detect, opts.signal);
  opts.signal?.throwIfAborted();
  const crop = coverCrop(upright, target, detection.ok ? faceCentre(detection.animation) : null);
  const png = await sharp(upright.rgb, { raw: { width: upright.width, height: upright.height, channels: 3 } })
    .extract({ left: crop.left, top: crop.top, width: crop.width, height: crop.height })
    .resize(target.width, target.height, { fit: 'fill' })
    .png()
    .toBuffer();
  if (!detection.ok) return { png, detection };
  const scale = target.width / crop.width;
  return { png, detection, animation: transformAnimation(detection.animation, crop.left, crop.top, scale) };
}

async function decodeUpright(bytes: Buffer): Promise<UprightImage> {
  try {
    const { data, info } = await sharp(bytes, { limitInputPixels: MAX_PORTRAIT_PIXELS, failOn: 'error' })
      .rotate()
      .flatten({ background: { r: 255, g: 255, b: 255 } })
      .toColourspace('srgb')
      .removeAlpha()
      .raw()
      .toBuffer({ resolveWithObject: true });
    if (info.channels !== 3) throw new Error('unexpected channel count');
    return { rgb: data, width: info.width, height: info.height };
  } catch (error) {
    const message = (error as Error).message ?? '';
    if (/pixel limit/i.test(message)) throw badRequest(`image is larger than ${MAX_PORTRAIT_PIXELS / 1e6} megapixels`);
    throw badRequest('image could not be decoded');
  }
}

/** Runs the detector on a bounded-size RGBA copy and maps the result back to full-image coordinates. */
async function detectOn(image: UprightImage, detect: Detector, signal?: AbortSignal): Promise<MouthDetection> {
  const scale = Math.min(1, DETECTION_MAX_SIDE / Math.max(image.width, image.height));
  const width = Math.max(1, Math.round(image.width * scale));
  const height = Math.max(1, Math.round(image.height * scale));
  let pipeline = sharp(image.rgb, { raw: { width: image.width, height: image.height, channels: 3 } });
  if (scale < 1) pipeline = pipeline.resize(width, height, { fit: 'fill' });
  const rgba = await pipeline.ensureAlpha().raw().toBuffer();
  const detection = await detect({ rgba: new Uint8Array(rgba.buffer, rgba.byteOffset, rgba.byteLength), width, height }, { signal });
  if (!detection.ok || scale === 1) return detection;
  return { ok: true, animation: transformAnimation(detection.animation, 0, 0, image.width / width) };
}

function faceCentre(a: MouthAnimation): { x: number; y: number } {
  return { x: a.face_box.x + a.face_box.width / 2, y: a.face_box.y + a.face_box.height / 2 };
}

/**
 * The largest window of the target's aspect ratio that fits the image, centred on `centre` (or the image
 * centre) and slid back inside the image where it would cross an edge.
 */
export function coverCrop(
  image: { width: number; height: number },
  target: { width: number; height: number },
  centre: { x: number; y: number } | null,
): { left: number; top: number; width: number; height: number } {
  const aspect = target.width / target.height;
  let width = image.width;
  let height = Math.round(width / aspect);
  if (height > image.height) {
    height = image.height;
    width = Math.min(image.width, Math.round(height * aspect));
  }
  width = Math.max(1, width);
  height = Math.max(1, height);
  const cx = centre?.x ?? image.width / 2;
  const cy = centre?.y ?? image.height / 2;
  const left = Math.round(Math.min(Math.max(0, cx - width / 2), image.width - width));
  const top = Math.round(Math.min(Math.max(0, cy - height / 2), image.height - height));
  return { left, top, width, height };
}
