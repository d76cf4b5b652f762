/**
 * Small inputs that once bought the service a lot (issue "nothing small may cost a lot"), made on the spot:
 * an MP3 whose few megabytes decode to an hour of audio, and a PNG of a few kilobytes whose one side is
 * tens of millions of pixels long.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs/promises';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import zlib from 'node:zlib';

const FFMPEG = (createRequire(import.meta.url)('@ffmpeg-installer/ffmpeg') as { path: string }).path;

/** `seconds` of quiet noise as an 8 kb/s mono MP3 (~1 KB per second of audio). */
export async function lowBitrateMp3(seconds: number): Promise<Buffer> {
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'hostile-mp3-'));
  const file = path.join(dir, 'long.mp3');
  try {
    await promisify(execFile)(FFMPEG, [
      '-v', 'error', '-f', 'lavfi', '-i', `anoisesrc=a=0.02:r=8000:d=${seconds}`,
      '-ac', '1', '-ar', '8000', '-b:a', '8k', '-codec:a', 'libmp3lame', file,
    ]);
    return await fs.readFile(file);
  } finally {
    await fs.rm(dir, { recursive: true, force: true });
  }
}

function pngChunk(type: string, data: Buffer): Buffer {
  const length = Buffer.alloc(4);
  length.writeUInt32BE(data.length);
  const body = Buffer.concat([Buffer.from(type, 'latin1'), data]);
  const crc = Buffer.alloc(4);
  crc.writeUInt32BE(zlib.crc32(body));
  return Buffer.concat([length, body, crc]);
}

/** A valid grey 8-bit PNG of `width`×`height`, all black: rows compress to almost nothing, whatever the shape. */
export function extremePng(width: number, height: number): Buffer {
  const header = Buffer.alloc(13);
  header.writeUInt32BE(width, 0);
  header.writeUInt32BE(height, 4);
  header[8] = 8; // bit depth
  header[9] = 0; // greyscale
  // Each row: a filter byte and `width` zero samples.
  const raw = Buffer.alloc((width + 1) * height);
  return Buffer.concat([
    Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
    pngChunk('IHDR', header),
    pngChunk('IDAT', zlib.deflateSync(raw, { level: 9 })),
    pngChunk('IEND', Buffer.alloc(0)),
  ]);
}
