import sharp from 'sharp';
import type { MouthAnimation } from '../render/types.ts';
import type { MouthDetection, RgbaImage } from './types.ts';
import { transformAnimation } from './landmarks.ts';
import { withImageProcess } from './image-jobs.ts';
import type { ImageReply } from './image-protocol.ts';

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
/**
 * Longest side a portrait may have. The pixel limit alone lets through 49,000,000×1 (libvips then needs
 * ~1 GB for it) and 1×49,000,000 (a minute of CPU); no camera or portrait is longer than 16384 px on a side.
 * Checked from the header, like the pixel limit, before anything is decoded.
 */
export const MAX_PORTRAIT_SIDE = 16_384;
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

/**
 * Turns an uploaded portrait into the bundle frame: checks the format from its bytes and the size from its
 * header, then (in an image process, `image-jobs.ts`) decodes it, applies EXIF orientation and drops alpha;
 * finds the face in a small copy, and cover-crops to `target` centred on the face (on the image centre without
 * one). Invalid or undecodable images throw `InvalidImageError`; a full queue throws `ImageJobsBusyError`.
 */
export async function preparePortrait(
  bytes: Buffer,
  target: { width: number; height: number },
  opts: { detect: Detector; signal?: AbortSignal; stepDeadlineMs?: number },
): Promise<PreparedPortrait> {
  if (bytes.length === 0) throw badRequest('image is empty');
  if (!sniffPortraitFormat(bytes)) throw badRequest('image must be JPEG, PNG or WebP');
  await checkPortraitHeader(bytes);
  return withImageProcess(async (images) => {
    const decoded = expectReply(
      await images.request({
        type: 'decode',
        image: bytes,
        maxPixels: MAX_PORTRAIT_PIXELS,
        detectionMaxSide: DETECTION_MAX_SIDE,
      }),
      'decoded',
    );
    opts.signal?.throwIfAborted();
    const detection = await detectOn(decoded, opts.detect, opts.signal);
    opts.signal?.throwIfAborted();
    const crop = coverCrop(decoded, target, detection.ok ? faceCentre(detection.animation) : null);
    const { png } = expectReply(await images.request({ type: 'crop', crop, target }), 'cropped');
    const frame = Buffer.from(png.buffer, png.byteOffset, png.byteLength);
    if (!detection.ok) return { png: frame, detection };
    const scale = target.width / crop.width;
    return { png: frame, detection, animation: transformAnimation(detection.animation, crop.left, crop.top, scale) };
  }, opts);
}

/**
 * Refuses a portrait whose header declares more than `MAX_PORTRAIT_PIXELS` or a side over `MAX_PORTRAIT_SIDE`.
 * Reads only the header (sharp metadata: well under a millisecond for any 10 MB upload), so an image built to
 * be expensive is refused before any of its pixels is decoded.
 */
export async function checkPortraitHeader(bytes: Buffer): Promise<void> {
  let size: { width?: number; height?: number };
  try {
    // No pixel limit of sharp's own here (it would refuse with its default of 268 MP before ours): ours follow.
    size = await sharp(bytes, { limitInputPixels: false }).metadata();
  } catch {
    throw badRequest('image could not be decoded');
  }
  const { width, height } = size;
  if (!width || !height) throw badRequest('image could not be decoded');
  if (width * height > MAX_PORTRAIT_PIXELS)
    throw badRequest(`image is larger than ${MAX_PORTRAIT_PIXELS / 1e6} megapixels`);
  if (Math.max(width, height) > MAX_PORTRAIT_SIDE)
    throw badRequest(`image is larger than ${MAX_PORTRAIT_SIDE} px on a side`);
}

/** The reply of the expected type; `invalid` is the upload's fault (400), anything else a fault of ours. */
function expectReply<T extends ImageReply['type']>(reply: ImageReply, type: T): Extract<ImageReply, { type: T }> {
  if (reply.type === type) return reply as Extract<ImageReply, { type: T }>;
  if (reply.type === 'invalid') throw badRequest(reply.message);
  throw new Error(
    reply.type === 'failed' ? `image process failed: ${reply.message}` : `image process answered ${reply.type}`,
  );
}

/** Runs the detector on the image process's bounded-size copy and maps the result back to full-image coordinates. */
async function detectOn(
  image: Extract<ImageReply, { type: 'decoded' }>,
  detect: Detector,
  signal?: AbortSignal,
): Promise<MouthDetection> {
  const copy: RgbaImage = image.detection;
  const detection = await detect(copy, { signal });
  if (!detection.ok || copy.width === image.width) return detection;
  return { ok: true, animation: transformAnimation(detection.animation, 0, 0, image.width / copy.width) };
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
