import { spawn } from 'node:child_process';
import { FFMPEG_PATH } from '../../src/recording/encoder.ts';

export interface ProbedStream {
  index: number;
  kind: 'Video' | 'Audio' | string;
  codec: string;
  width?: number;
  height?: number;
  pixFmt?: string;
  fps?: number;
  sampleRate?: number;
  channels?: string;
}

export interface ProbeResult {
  format: string;
  durationMs: number;
  streams: ProbedStream[];
}

function run(
  args: string[],
  maxBytes = 512 * 1024 * 1024,
): Promise<{ code: number | null; stdout: Buffer; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(FFMPEG_PATH, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    const out: Buffer[] = [];
    let size = 0;
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > maxBytes) child.kill('SIGKILL');
      else out.push(chunk);
    });
    child.stderr.setEncoding('utf8');
    child.stderr.on('data', (text: string) => (stderr += text));
    child.once('error', reject);
    child.once('close', (code) => resolve({ code, stdout: Buffer.concat(out), stderr }));
  });
}

/** ffprobe-like facts from `ffmpeg -i` stderr (the bundled build ships no ffprobe). */
export async function probeMp4(file: string): Promise<ProbeResult> {
  const { stderr } = await run(['-hide_banner', '-i', file]);
  const format = /Input #0, ([^,]+(?:,[^,]+)*?), from/.exec(stderr)?.[1] ?? '';
  const d = /Duration: (\d+):(\d+):(\d+(?:\.\d+)?)/.exec(stderr);
  const durationMs = d ? Math.round((Number(d[1]) * 3600 + Number(d[2]) * 60 + Number(d[3])) * 1000) : NaN;
  const streams: ProbedStream[] = [];
  for (const line of stderr.split('\n')) {
    const m = /Stream #0:(\d+)(?:\[[^\]]*\])?(?:\([^)]*\))?: (\w+): (\w+)(.*)$/.exec(line.trim());
    if (!m) continue;
    const stream: ProbedStream = { index: Number(m[1]), kind: m[2], codec: m[3] };
    const rest = m[4];
    if (stream.kind === 'Video') {
      const size = /, (\d+)x(\d+)/.exec(rest);
      if (size) [stream.width, stream.height] = [Number(size[1]), Number(size[2])];
      stream.pixFmt = /\), (\w+)\(/.exec(rest)?.[1] ?? /, (yuv\w+)/.exec(rest)?.[1];
      const fps = /, (\d+(?:\.\d+)?) fps/.exec(rest);
      if (fps) stream.fps = Number(fps[1]);
    } else if (stream.kind === 'Audio') {
      const rate = /, (\d+) Hz/.exec(rest);
      if (rate) stream.sampleRate = Number(rate[1]);
      stream.channels = /Hz, (\w+)/.exec(rest)?.[1];
    }
    streams.push(stream);
  }
  return { format, durationMs, streams };
}

/** Every video frame decoded to raw I420, in presentation order. */
export async function extractFrames(file: string, width: number, height: number): Promise<Uint8Array[]> {
  const { code, stdout, stderr } = await run([
    '-hide_banner',
    '-loglevel',
    'error',
    '-i',
    file,
    '-map',
    '0:v:0',
    '-vsync',
    'passthrough',
    '-f',
    'rawvideo',
    '-pix_fmt',
    'yuv420p',
    'pipe:1',
  ]);
  if (code !== 0) throw new Error(`frame extraction failed: ${stderr}`);
  const frameBytes = (width * height * 3) / 2;
  const frames: Uint8Array[] = [];
  for (let offset = 0; offset + frameBytes <= stdout.length; offset += frameBytes)
    frames.push(new Uint8Array(stdout.subarray(offset, offset + frameBytes)));
  return frames;
}

/** The audio track decoded to mono s16le at `sampleRate` (AAC encoder priming is removed by ffmpeg). */
export async function extractAudio(file: string, sampleRate: number): Promise<Int16Array> {
  const { code, stdout, stderr } = await run([
    '-hide_banner',
    '-loglevel',
    'error',
    '-i',
    file,
    '-map',
    '0:a:0',
    '-f',
    's16le',
    '-ac',
    '1',
    '-ar',
    String(sampleRate),
    'pipe:1',
  ]);
  if (code !== 0) throw new Error(`audio extraction failed: ${stderr}`);
  const copy = new Uint8Array(stdout);
  return new Int16Array(copy.buffer, 0, Math.floor(copy.length / 2));
}

/** Start times (ms) of loud stretches: windows above `threshold` RMS after at least `minGapMs` of quiet. */
export function speechOnsets(pcm: Int16Array, sampleRate: number, threshold = 1500, minGapMs = 150): number[] {
  const win = Math.round(sampleRate / 1000); // 1 ms windows
  const onsets: number[] = [];
  let quietMs = minGapMs;
  for (let start = 0; start + win <= pcm.length; start += win) {
    let sum = 0;
    for (let i = start; i < start + win; i++) sum += pcm[i] * pcm[i];
    const rms = Math.sqrt(sum / win);
    if (rms >= threshold) {
      if (quietMs >= minGapMs) onsets.push((start * 1000) / sampleRate);
      quietMs = 0;
    } else quietMs++;
  }
  return onsets;
}

export function rms(pcm: Int16Array, from = 0, to = pcm.length): number {
  let sum = 0;
  for (let i = from; i < to; i++) sum += pcm[i] * pcm[i];
  return Math.sqrt(sum / Math.max(1, to - from));
}
