/**
 * An MP3 whose few megabytes decode to an hour of audio (issue "nothing small may cost a lot"), made on the
 * spot; its image twin, a tiny PNG tens of millions of pixels long, is `blackPng` in test/helpers/hostile-images.ts.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs/promises';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';

const FFMPEG = (createRequire(import.meta.url)('@ffmpeg-installer/ffmpeg') as { path: string }).path;

/** `seconds` of quiet noise as an 8 kb/s mono MP3 (~1 KB per second of audio). */
export async function lowBitrateMp3(seconds: number): Promise<Buffer> {
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'hostile-mp3-'));
  const file = path.join(dir, 'long.mp3');
  try {
    await promisify(execFile)(FFMPEG, [
      '-v',
      'error',
      '-f',
      'lavfi',
      '-i',
      `anoisesrc=a=0.02:r=8000:d=${seconds}`,
      '-ac',
      '1',
      '-ar',
      '8000',
      '-b:a',
      '8k',
      '-codec:a',
      'libmp3lame',
      file,
    ]);
    return await fs.readFile(file);
  } finally {
    await fs.rm(dir, { recursive: true, force: true });
  }
}
