/**
 * The bundled ffmpeg for video avatars: reading a clip's header (`probeClip`, from `ffmpeg -i`'s report, since
 * ffprobe is not bundled) and decoding its frames. ffmpeg is a child process of its own, so decoding never runs
 * on the service's threads; every run has a deadline, is killed (SIGKILL) on abort, and has its output bounded.
 */
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';

const FFMPEG_PATH: string = (createRequire(import.meta.url)('@ffmpeg-installer/ffmpeg') as { path: string }).path;

/** ffmpeg's report is a few KB; a hostile file with thousands of streams cannot make us keep more than this. */
const MAX_STDERR_BYTES = 256 * 1024;

/** ffmpeg ran past its deadline or produced more than it was allowed to (the clip's fault). */
export class ClipProcessError extends Error {
  override name = 'ClipProcessError';
}

export interface FfmpegRun {
  code: number | null;
  stderr: string;
}

/**
 * Runs ffmpeg with `args`; resolves when it exits (any code). `onStdout` receives its output as it comes; past
 * `maxStdoutBytes` or `deadlineMs` the process is killed and the run rejects with `ClipProcessError`; on abort
 * it is killed and the run rejects with the signal's reason.
 */
export function runFfmpeg(
  args: string[],
  opts: { deadlineMs: number; maxStdoutBytes?: number; onStdout?: (chunk: Buffer) => void; signal?: AbortSignal },
): Promise<FfmpegRun> {
  return new Promise<FfmpegRun>((resolve, reject) => {
    opts.signal?.throwIfAborted();
    const child = spawn(FFMPEG_PATH, ['-hide_banner', '-nostdin', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    const stderr: Buffer[] = [];
    let stderrBytes = 0;
    let stdoutBytes = 0;
    let failure: Error | undefined;
    const stop = (error: Error) => {
      failure ??= error;
      child.kill('SIGKILL');
    };
    const onAbort = () => stop(opts.signal!.reason as Error);
    const timer = setTimeout(() => stop(new ClipProcessError(`clip took longer than ${opts.deadlineMs / 1000} s to decode`)), opts.deadlineMs);
    opts.signal?.addEventListener('abort', onAbort, { once: true });
    child.stdout.on('data', (chunk: Buffer) => {
      stdoutBytes += chunk.length;
      if (opts.maxStdoutBytes !== undefined && stdoutBytes > opts.maxStdoutBytes) return stop(new ClipProcessError('clip decoded to more than its bounds'));
      if (!failure) opts.onStdout?.(chunk);
    });
    child.stderr.on('data', (chunk: Buffer) => {
      if (stderrBytes >= MAX_STDERR_BYTES) return;
      stderrBytes += chunk.length;
      stderr.push(chunk);
    });
    child.on('error', (error) => stop(error));
    child.on('close', (code) => {
      clearTimeout(timer);
      opts.signal?.removeEventListener('abort', onAbort);
      if (failure) reject(failure);
      else resolve({ code, stderr: Buffer.concat(stderr).toString('utf8') });
    });
  });
}

export interface ClipInfo {
  durationS: number;
  codec: string;
  /** Upright size: the stored size with a 90°/270° rotation applied (ffmpeg turns frames upright when decoding). */
  width: number;
  height: number;
  rotation: number;
  hasAudio: boolean;
}

/** Why `parseClipReport` refused a clip; each is the upload's fault (400). */
export type ClipProbeFailure = 'unreadable' | 'no_video' | 'no_duration';

/** Reads `ffmpeg -i`'s report: the duration, the first video stream's codec and size, its rotation, and whether there is audio. */
export function parseClipReport(stderr: string): ClipInfo | ClipProbeFailure {
  if (!/^Input #0/m.test(stderr)) return 'unreadable';
  const video = /Stream #0:\d+[^:]*: Video: (\w+)[^\n]*?, (\d{1,6})x(\d{1,6})/.exec(stderr);
  if (!video) return 'no_video';
  const duration = /Duration: (\d+):(\d{2}):(\d{2}(?:\.\d+)?)/.exec(stderr);
  if (!duration) return 'no_duration';
  const durationS = Number(duration[1]) * 3600 + Number(duration[2]) * 60 + Number(duration[3]);
  const rotate = /^\s*rotate\s*:\s*(-?\d+)/m.exec(stderr);
  const rotation = rotate ? ((Number(rotate[1]) % 360) + 360) % 360 : 0;
  const stored = { width: Number(video[2]), height: Number(video[3]) };
  const turned = rotation === 90 || rotation === 270;
  return {
    durationS,
    codec: video[1],
    width: turned ? stored.height : stored.width,
    height: turned ? stored.width : stored.height,
    rotation,
    hasAudio: /Stream #0:\d+[^:]*: Audio:/.test(stderr),
  };
}
