import { spawn, type ChildProcess } from 'node:child_process';
import { createRequire } from 'node:module';
import fs from 'node:fs/promises';
import type { Writable } from 'node:stream';

/** The bundled static ffmpeg (libx264 + aac); nothing is downloaded at run time. */
export const FFMPEG_PATH: string = (createRequire(import.meta.url)('@ffmpeg-installer/ffmpeg') as { path: string })
  .path;

/** How much of ffmpeg's stderr is kept for error messages; its log is otherwise discarded. */
const STDERR_TAIL_CHARS = 4_000;
/** ffmpeg flushes the encoder and moves the moov atom (faststart) after the inputs end; bounded so a wedged process cannot hang a stop. */
const FINISH_TIMEOUT_MS = 60_000;
/** Packets ffmpeg may queue per input thread; enough that neither pipe stalls while the muxer waits for the other. */
const INPUT_QUEUE_PACKETS = 512;
/** Longest line kept of ffmpeg's `-progress` report (`key=value` lines of a few dozen characters); more is dropped. */
const MAX_PROGRESS_LINE_CHARS = 1_024;
/** Sample rate of the AAC track. */
export const OUTPUT_AUDIO_RATE = 48_000;

export interface Mp4EncoderOptions {
  /** The MP4 file; or, for `live`, the RTMP URL ffmpeg publishes to (never logged or echoed: it may hold a stream key). */
  outPath: string;
  /**
   * A live FLV stream over RTMP instead of a file: constant bitrate (`videoBitrateKbps`), x264 tuned for latency, a
   * keyframe every 2 s exactly (players join and servers cut segments at keyframes), no file to remove on abort.
   */
  live?: { videoBitrateKbps: number };
  width: number;
  height: number;
  fps: number;
  sampleRate: number;
  /** x264 speed/size trade-off; `veryfast` keeps up with real time on one core at avatar sizes. */
  preset?: 'ultrafast' | 'superfast' | 'veryfast' | 'faster' | 'fast' | 'medium';
  logger?: { warn(obj: object, msg: string): void };
}

export class EncoderError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'EncoderError';
  }
}

/**
 * Streams raw I420 frames (pipe 3) and mono s16le PCM (pipe 4) into one ffmpeg that writes an MP4 with
 * H.264 (yuv420p) + AAC. Timestamps are implicit: frame n is at n/fps and sample n at n/sampleRate, so
 * callers keep the two streams in sync by writing exactly one frame per frame period and contiguous audio.
 * Writes resolve once the pipe accepted them, so awaiting them keeps memory flat.
 */
export class Mp4Encoder {
  readonly frameBytes: number;
  framesWritten = 0;
  samplesWritten = 0;
  private readonly child: ChildProcess;
  private readonly video: Writable;
  private readonly audio: Writable;
  private readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  private stderrTail = '';
  private readonly outputWritten: Promise<void>;
  private pipeError: Error | null = null;
  private finished = false;
  private aborted = false;

  constructor(private readonly options: Mp4EncoderOptions) {
    const { width, height, fps, sampleRate, live } = options;
    const keyframeEvery = String(Math.max(1, Math.round(fps * 2)));
    if (width % 2 !== 0 || height % 2 !== 0)
      throw new EncoderError(`H.264 yuv420p needs even dimensions (got ${width}x${height})`);
    this.frameBytes = (width * height * 3) / 2;
    const args = [
      '-hide_banner',
      '-nostdin',
      '-loglevel',
      'error',
      '-y',
      // A live stream's progress report on stdout: its first `total_size` above 0 says the output was opened, which
      // for RTMP means the handshake, connect and publish completed (`whenOutputWritten`).
      ...(live ? ['-progress', 'pipe:1'] : []),
      '-f',
      'rawvideo',
      '-pix_fmt',
      'yuv420p',
      '-s',
      `${width}x${height}`,
      '-framerate',
      String(fps),
      // Formats are fully described here; probing would read ahead on one pipe while the other waits.
      '-probesize',
      '32',
      '-analyzeduration',
      '0',
      '-thread_queue_size',
      String(INPUT_QUEUE_PACKETS),
      '-i',
      'pipe:3',
      '-f',
      's16le',
      '-ar',
      String(sampleRate),
      '-ac',
      '1',
      '-probesize',
      '32',
      '-analyzeduration',
      '0',
      '-thread_queue_size',
      String(INPUT_QUEUE_PACKETS),
      '-i',
      'pipe:4',
      '-map',
      '0:v:0',
      '-map',
      '1:a:0',
      '-c:v',
      'libx264',
      '-preset',
      options.preset ?? 'veryfast',
      '-pix_fmt',
      'yuv420p',
      ...(live
        ? [
            '-tune',
            'zerolatency',
            '-b:v',
            `${live.videoBitrateKbps}k`,
            '-maxrate',
            `${live.videoBitrateKbps}k`,
            '-bufsize',
            `${live.videoBitrateKbps * 2}k`,
            '-keyint_min',
            keyframeEvery,
            '-sc_threshold',
            '0',
          ]
        : ['-crf', '23']),
      '-g',
      keyframeEvery,
      // 48 kHz output: AAC works in 1024-sample frames, which at 16 kHz (64 ms) would be longer than a video frame.
      '-c:a',
      'aac',
      '-b:a',
      '96k',
      '-ar',
      String(OUTPUT_AUDIO_RATE),
      ...(live
        ? ['-f', 'flv', '-flvflags', 'no_duration_filesize', options.outPath]
        : ['-movflags', '+faststart', '-f', 'mp4', options.outPath]),
    ];
    this.child = spawn(FFMPEG_PATH, args, { stdio: ['ignore', live ? 'pipe' : 'ignore', 'pipe', 'pipe', 'pipe'] });
    this.outputWritten = live ? firstOutputBytes(this.child) : new Promise(() => undefined);
    this.video = this.child.stdio[3] as Writable;
    this.audio = this.child.stdio[4] as Writable;
    for (const pipe of [this.video, this.audio]) {
      // EPIPE after ffmpeg died is reported through `finish()` with ffmpeg's own message.
      pipe.on('error', (error) => (this.pipeError ??= error));
    }
    this.child.stderr?.setEncoding('utf8');
    this.child.stderr?.on('data', (text: string) => {
      this.stderrTail = (this.stderrTail + text).slice(-STDERR_TAIL_CHARS);
    });
    this.exited = new Promise((resolve) => {
      this.child.once('error', (error) => {
        this.pipeError ??= error;
        resolve({ code: -1, signal: null });
      });
      this.child.once('exit', (code, signal) => resolve({ code, signal }));
    });
  }

  /**
   * A live stream: resolves once ffmpeg reports bytes written to its output (an RTMP server completed the handshake
   * and accepted the publish). Never resolves for a file, or while a server accepted the connection and said nothing.
   */
  whenOutputWritten(): Promise<void> {
    return this.outputWritten;
  }

  /** Resolves when ffmpeg exits, however: a live stream's end (its server refused, dropped or went away). */
  whenExited(): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
    return this.exited;
  }

  /** Bytes accepted but not yet read by ffmpeg, for both pipes. */
  get bufferedBytes(): number {
    return this.video.writableLength + this.audio.writableLength;
  }

  writeFrame(i420: Uint8Array): Promise<void> {
    if (i420.length !== this.frameBytes) {
      throw new EncoderError(
        `frame has ${i420.length} bytes, expected ${this.frameBytes} for ${this.options.width}x${this.options.height}`,
      );
    }
    this.framesWritten++;
    return this.write(this.video, Buffer.from(i420.buffer, i420.byteOffset, i420.byteLength));
  }

  writeAudio(pcm: Int16Array): Promise<void> {
    if (pcm.length === 0) return Promise.resolve();
    this.samplesWritten += pcm.length;
    return this.write(this.audio, Buffer.from(pcm.buffer, pcm.byteOffset, pcm.byteLength));
  }

  /**
   * Queues without waiting, for real-time producers that cannot be slowed (the playout clock): the
   * pipe buffers in memory until ffmpeg reads; `bufferedBytes` tells how much. Errors surface in `finish()`.
   */
  pushFrame(i420: Uint8Array): void {
    if (i420.length !== this.frameBytes || this.finished || this.video.destroyed) return;
    this.framesWritten++;
    this.video.write(Buffer.from(i420.buffer, i420.byteOffset, i420.byteLength));
  }

  pushAudio(pcm: Int16Array): void {
    if (pcm.length === 0 || this.finished || this.audio.destroyed) return;
    this.samplesWritten += pcm.length;
    this.audio.write(Buffer.from(pcm.buffer, pcm.byteOffset, pcm.byteLength));
  }

  /** Ends both inputs and waits for ffmpeg to finalise the file; throws with ffmpeg's message on failure. */
  async finish(signal?: AbortSignal): Promise<void> {
    if (this.finished) return;
    this.finished = true;
    this.video.end();
    this.audio.end();
    let timer: NodeJS.Timeout | undefined;
    const onAbort = () => this.child.kill('SIGKILL');
    signal?.addEventListener('abort', onAbort, { once: true });
    try {
      const timeout = new Promise<never>((_, reject) => {
        timer = setTimeout(() => {
          this.child.kill('SIGKILL');
          reject(new EncoderError(`ffmpeg did not finish within ${FINISH_TIMEOUT_MS} ms`));
        }, FINISH_TIMEOUT_MS);
      });
      const { code, signal: killedBy } = await Promise.race([this.exited, timeout]);
      signal?.throwIfAborted();
      if (code !== 0) {
        const detail =
          this.stderrTail.trim().split('\n').slice(-3).join(' | ') || this.pipeError?.message || `signal ${killedBy}`;
        throw new EncoderError(`ffmpeg failed (exit ${code}): ${detail}`);
      }
    } finally {
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
    }
  }

  /** Kills ffmpeg and removes the partial output. Idempotent. */
  async abort(): Promise<void> {
    if (this.aborted) return;
    this.aborted = true;
    this.finished = true;
    this.video.destroy();
    this.audio.destroy();
    this.child.kill('SIGKILL');
    await this.exited;
    if (!this.options.live) await fs.rm(this.options.outPath, { force: true });
  }

  private write(pipe: Writable, chunk: Buffer): Promise<void> {
    if (this.finished || pipe.destroyed) return Promise.reject(new EncoderError('encoder is closed'));
    if (pipe.write(chunk)) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const cleanup = () => {
        pipe.off('drain', onDrain);
        pipe.off('close', onClose);
      };
      const onDrain = () => {
        cleanup();
        resolve();
      };
      const onClose = () => {
        cleanup();
        reject(this.pipeError ?? new EncoderError('ffmpeg closed its input'));
      };
      pipe.on('drain', onDrain);
      pipe.on('close', onClose);
    });
  }
}

/**
 * Reads ffmpeg's `-progress pipe:1` report (blocks of `key=value` lines) until a `total_size` above 0, then keeps
 * draining it (a full pipe would stall ffmpeg). Lines are bounded by `MAX_PROGRESS_LINE_CHARS`.
 */
function firstOutputBytes(child: ChildProcess): Promise<void> {
  return new Promise((resolve) => {
    let written = false;
    let partial = '';
    child.stdout?.setEncoding('utf8');
    child.stdout?.on('data', (text: string) => {
      if (written) return;
      const lines = (partial + text).split('\n');
      partial = lines.pop()!.slice(-MAX_PROGRESS_LINE_CHARS);
      if (lines.some((line) => /^total_size=[1-9]\d*$/u.test(line.trim()))) {
        written = true;
        resolve();
      }
    });
  });
}
