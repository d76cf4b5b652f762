/**
 * A portrait image process, forked by `image-jobs.ts`, serving one upload at a time: sharp (libvips) decodes, resizes and
 * encodes here, on this process's own libuv threads, so a slow image never holds the threads the service
 * answers requests (and reads files) with, and the service can end it at once with SIGKILL at a deadline,
 * an abort or shutdown. It answers `decode` with the upright size and a small RGBA copy to search for a
 * face, keeps the full image, and answers `crop` with the bundle frame's PNG.
 */
import sharp from 'sharp';
import type { CropRect, ImageReply, ImageRequest } from './image-protocol.ts';

/** libvips worker threads for this process: one, so an upload leaves the other core to live sessions. */
const VIPS_THREADS = 1;

sharp.concurrency(VIPS_THREADS);
// Every upload is a different image: libvips' operation cache would only hold memory.
sharp.cache(false);

interface UprightImage {
  rgb: Buffer;
  width: number;
  height: number;
}
let upright: UprightImage | undefined;

function send(reply: ImageReply): void {
  if (process.connected) process.send!(reply, undefined, {}, () => undefined);
}

// The service is the only reason to exist. Its channel closing means it is gone (or gave up on this upload):
// SIGKILL rather than exit(), which would first wait for the libvips work still running on the thread pool.
process.on('disconnect', () => process.kill(process.pid, 'SIGKILL'));
// Ctrl-C signals the whole process group; the service decides when this process ends.
process.on('SIGINT', () => undefined);

process.on('message', (request: ImageRequest) => {
  answer(request).then(send, (error: unknown) =>
    send({ type: 'failed', message: (error as Error)?.message ?? 'image process failed' }),
  );
});

async function answer(request: ImageRequest): Promise<ImageReply> {
  if (request.type === 'decode') {
    upright = undefined;
    try {
      upright = await decodeUpright(
        Buffer.from(request.image.buffer, request.image.byteOffset, request.image.byteLength),
        request.maxPixels,
      );
    } catch {
      return { type: 'invalid', message: 'image could not be decoded' };
    }
    return {
      type: 'decoded',
      width: upright.width,
      height: upright.height,
      detection: await detectionCopy(upright, request.detectionMaxSide),
    };
  }
  if (!upright) return { type: 'failed', message: 'crop before decode' };
  const png = await cropToFrame(upright, request.crop, request.target);
  // The upload is done: its pixels (up to 150 MB) are not kept while this process waits for the next one.
  upright = undefined;
  return { type: 'cropped', png };
}

send({ type: 'ready' });

/** EXIF orientation applied, alpha flattened onto white, sRGB, 3 channels. */
async function decodeUpright(bytes: Buffer, maxPixels: number): Promise<UprightImage> {
  const { data, info } = await sharp(bytes, { limitInputPixels: maxPixels, failOn: 'error' })
    .rotate()
    .flatten({ background: { r: 255, g: 255, b: 255 } })
    .toColourspace('srgb')
    .removeAlpha()
    .raw()
    .toBuffer({ resolveWithObject: true });
  if (info.channels !== 3) throw new Error('unexpected channel count');
  return { rgb: data, width: info.width, height: info.height };
}

/** An RGBA copy no longer than `maxSide` on its long side (the detector's input). */
async function detectionCopy(
  image: UprightImage,
  maxSide: number,
): Promise<{ rgba: Uint8Array; width: number; height: number }> {
  const scale = Math.min(1, maxSide / Math.max(image.width, image.height));
  const width = Math.max(1, Math.round(image.width * scale));
  const height = Math.max(1, Math.round(image.height * scale));
  let pipeline = sharp(image.rgb, { raw: { width: image.width, height: image.height, channels: 3 } });
  if (scale < 1) pipeline = pipeline.resize(width, height, { fit: 'fill' });
  const rgba = await pipeline.ensureAlpha().raw().toBuffer();
  return { rgba: new Uint8Array(rgba.buffer, rgba.byteOffset, rgba.byteLength), width, height };
}

async function cropToFrame(
  image: UprightImage,
  crop: CropRect,
  target: { width: number; height: number },
): Promise<Uint8Array> {
  const png = await sharp(image.rgb, { raw: { width: image.width, height: image.height, channels: 3 } })
    .extract(crop)
    .resize(target.width, target.height, { fit: 'fill' })
    .png()
    .toBuffer();
  return new Uint8Array(png.buffer, png.byteOffset, png.byteLength);
}
