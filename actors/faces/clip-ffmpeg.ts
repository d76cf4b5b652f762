/**
 * The bundled ffmpeg for video avatars: how a clip is opened (`clipInputArgs`: only as the container its bytes
 * say, only that one file, only the accepted decoders, a pixel bound per frame), and what ffmpeg tells about it
 * (`parseFrameReport`: the `framecrc` muxer's lines, which ffmpeg writes itself from the packets and frames, never
 * from the clip's metadata; ffprobe is not bundled, and `ffmpeg -i`'s free-text report copies metadata such as a
 * `title` verbatim). ffmpeg is a child process of its own, so decoding never runs on the service's threads; every
 * run has a deadline, is killed (SIGKILL) on abort, and has its output bounded.
 */
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';

export const FFMPEG_PATH: string = (createRequire(import.meta.url)('@ffmpeg-installer/ffmpeg') as { path: string })
  .path;

/** ffmpeg's report is a few KB; a hostile file with thousands of streams cannot make us keep more than this. */
const MAX_STDERR_BYTES = 256 * 1024;

/** ffmpeg ran past its deadline or produced more than it was allowed to (the clip's fault). */
export class ClipProcessError extends Error {
  override name = 'ClipProcessError';
}

export interface FfmpegRun {
  code: number | null;
  stderr: string;
  /** Its output, when no `onStdout` took it. */
  stdout: string;
}

/**
 * Runs ffmpeg with `args`; resolves when it exits (any code). `onStdout` receives its output as it comes (else the
 * run keeps it, for `stdout`); past
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
    const stdout: Buffer[] = [];
    let stderrBytes = 0;
    let stdoutBytes = 0;
    let failure: Error | undefined;
    const stop = (error: Error) => {
      failure ??= error;
      child.kill('SIGKILL');
    };
    const onAbort = () => stop(opts.signal!.reason as Error);
    const timer = setTimeout(
      () => stop(new ClipProcessError(`clip took longer than ${opts.deadlineMs / 1000} s to decode`)),
      opts.deadlineMs,
    );
    opts.signal?.addEventListener('abort', onAbort, { once: true });
    child.stdout.on('data', (chunk: Buffer) => {
      stdoutBytes += chunk.length;
      if (opts.maxStdoutBytes !== undefined && stdoutBytes > opts.maxStdoutBytes)
        return stop(new ClipProcessError('clip decoded to more than its bounds'));
      if (failure) return;
      if (opts.onStdout) opts.onStdout(chunk);
      else stdout.push(chunk);
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
      else
        resolve({
          code,
          stderr: Buffer.concat(stderr).toString('utf8'),
          stdout: Buffer.concat(stdout).toString('utf8'),
        });
    });
  });
}

/** The containers a clip may be, from its first bytes (`sniffClipFormat`): ISO base media (MP4, MOV) or Matroska (WebM, MKV). */
export type ClipFormat = 'mp4' | 'webm';

/**
 * ffmpeg's input options for the clip in `file`, read as `format` and nothing else. Named, not probed: ffmpeg's
 * probing would take an HLS or DASH manifest, a concat script or an image pattern that merely passed the sniff and
 * follow its URLs and paths. The demuxer list allows no nested demuxer, the protocol list only the local file
 * (no http, tcp, concat, subfile …), MOV's external data references (`dref`, `alis`) stay off, and only `decoders`
 * may open, each frame at most `maxPixels` (checked before its buffers are allocated, also while ffmpeg
 * analyses the streams). `autorotate: false` reads the frames as stored.
 */
export function clipInputArgs(
  file: string,
  format: ClipFormat,
  opts: { decoders: readonly string[]; maxPixels: number; autorotate?: boolean },
): string[] {
  const demuxer =
    format === 'mp4'
      ? ['-f', 'mov', '-format_whitelist', 'mov', '-enable_drefs', '0', '-use_absolute_path', '0']
      : ['-f', 'matroska', '-format_whitelist', 'matroska'];
  return [
    ...demuxer,
    '-protocol_whitelist',
    'file',
    '-codec_whitelist',
    opts.decoders.join(','),
    '-max_pixels',
    String(opts.maxPixels),
    ...(opts.autorotate === false ? ['-noautorotate'] : []),
    // `file:` so that no part of the path is read as a protocol or an option.
    '-i',
    `file:${file}`,
  ];
}

/** One packet or frame of a `framecrc` report, in its stream's time base. */
export interface FrameLine {
  pts: number;
  duration: number;
  /** The adler32 of the packet or the decoded frame's bytes. */
  hash: string;
}

/** One output stream of a `framecrc` report. */
export interface FrameReportStream {
  mediaType: string;
  codec: string;
  /** The stream's size as the muxer was told it (the decoded frames' for raw video; 0 × 0 when not video). */
  width: number;
  height: number;
  /** Seconds per time-base tick. */
  timeBase: number;
  lines: FrameLine[];
}

/**
 * Reads ffmpeg's `framecrc` output (`#tb 0: 1/25`, `#media_type 0: video`, `#codec_id 0: h264`,
 * `#dimensions 0: 640x360`, then `stream, dts, pts, duration, size, hash` per packet or frame). Every line is
 * ffmpeg's own: codec names, sizes and timestamps come from the streams, not from any text in the clip.
 * Lines without a timestamp (ffmpeg's NOPTS) are left out.
 */
export function parseFrameReport(report: string): Map<number, FrameReportStream> {
  const streams = new Map<number, FrameReportStream>();
  const stream = (index: string) => {
    const key = Number(index);
    let found = streams.get(key);
    if (!found) streams.set(key, (found = { mediaType: '', codec: '', width: 0, height: 0, timeBase: 0, lines: [] }));
    return found;
  };
  for (const line of report.split('\n')) {
    const header = /^#(tb|media_type|codec_id|dimensions) (\d+): (\S+)$/.exec(line);
    if (header) {
      const [, key, index, value] = header;
      const target = stream(index);
      if (key === 'media_type') target.mediaType = value;
      else if (key === 'codec_id') target.codec = value;
      else if (key === 'tb') {
        const [num, den] = value.split('/').map(Number);
        target.timeBase = den > 0 ? num / den : 0;
      } else {
        const size = /^(\d{1,6})x(\d{1,6})$/.exec(value);
        if (size) [target.width, target.height] = [Number(size[1]), Number(size[2])];
      }
      continue;
    }
    const frame = /^(\d+),\s*-?\d+,\s*(-?\d+),\s*(-?\d+),\s*\d+,\s*(0x[0-9a-f]+)/.exec(line);
    if (!frame || frame[2] === NO_PTS) continue;
    stream(frame[1]).lines.push({ pts: Number(frame[2]), duration: Number(frame[3]), hash: frame[4] });
  }
  return streams;
}

/** ffmpeg's AV_NOPTS_VALUE as `framecrc` prints it. */
const NO_PTS = '-9223372036854775808';
