/**
 * Converts an uploaded clone sample (any container/codec ffmpeg reads) to 24 kHz mono 16-bit WAV,
 * with the ffmpeg binary shipped by `@ffmpeg-installer/ffmpeg`, piping stdin → stdout.
 */
import { spawn } from 'node:child_process';
import { mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describeDuration } from '../../actors/audio/decode.ts';
import { encodeWav, pcm16FromLittleEndian } from '../../actors/audio/wav.ts';
import { abortReasonAsError } from '../../actors/upstream/abort.ts';

export const CLONE_SAMPLE_RATE = 24_000;
/**
 * Longest clone or reference sample once decoded. Providers enrol a voice from seconds to a few minutes of speech,
 * but the spec's 12 MB must stay a byte bound for ordinary files: any 12 MB 16-bit WAV of 8 kHz or more (at most
 * 13.1 min) fits under this. The 12 MB alone let an 8 kb/s MP3 hold 3.5 hours (~600 MB of 24 kHz PCM); ffmpeg is
 * stopped as soon as its output passes this, so no more than ~43 MB of samples is ever held.
 */
export const MAX_CLONE_SAMPLE_MS = 15 * 60_000;
const MAX_CLONE_PCM_BYTES = (MAX_CLONE_SAMPLE_MS / 1000) * CLONE_SAMPLE_RATE * 2;
/** A 12 MB sample converts in well under a second; this only stops a wedged ffmpeg. */
const FFMPEG_TIMEOUT_MS = 30_000;
/** ffmpeg's complaint is kept short for the 400 detail. */
const MAX_STDERR_CHARS = 400;
/**
 * Temp dirs of ISO-media conversions: `clone-sample-<pid>-XXXXXX` in the OS temp dir. The pid tells the
 * start-up sweep whether the process that made one is gone (a crash skipped its `finally`).
 */
const TEMP_DIR_PREFIX = 'clone-sample-';
const TEMP_DIR_NAME = /^clone-sample-(\d+)-[A-Za-z0-9]{6}$/;
/** Conversions of this process in progress; the sweep never touches these. */
const liveTempDirs = new Set<string>();

const ffmpegPath = (createRequire(import.meta.url)('@ffmpeg-installer/ffmpeg') as { path: string }).path;

export class AudioConversionError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'AudioConversionError';
  }
}

/** MP4/M4A/MOV (`ftyp` box first): their index may sit at the end, which ffmpeg cannot seek to on a pipe. */
function isIsoMedia(audio: Buffer): boolean {
  return audio.length >= 12 && audio.toString('latin1', 4, 8) === 'ftyp';
}

/**
 * Raw s16le out of ffmpeg (a piped WAV header cannot carry sizes), then a proper WAV header here.
 * Input goes through stdin; only ISO media that fails that way is retried from a temporary file.
 */
export async function convertTo24kMonoWav(audio: Buffer, signal: AbortSignal): Promise<Buffer> {
  try {
    return await runFfmpeg('pipe:0', audio, signal);
  } catch (error) {
    if (!(error instanceof AudioConversionError) || !isIsoMedia(audio)) throw error;
    const dir = await mkdtemp(path.join(tmpdir(), `${TEMP_DIR_PREFIX}${process.pid}-`));
    liveTempDirs.add(dir);
    try {
      const file = path.join(dir, 'sample.mp4');
      await writeFile(file, audio);
      return await runFfmpeg(file, null, signal);
    } finally {
      await rm(dir, { recursive: true, force: true });
      liveTempDirs.delete(dir);
    }
  }
}

/**
 * Start-up sweep: removes conversion temp dirs whose process no longer runs, or that carry this process's
 * own pid from an earlier life (a container restarts its service with the same pid) and are not in use.
 * Resolves with how many were removed.
 */
export async function sweepConversionLeftovers(): Promise<number> {
  const root = tmpdir();
  let names: string[];
  try {
    names = await readdir(root);
  } catch {
    return 0;
  }
  let removed = 0;
  for (const name of names) {
    const match = TEMP_DIR_NAME.exec(name);
    const dir = path.join(root, name);
    if (!match || liveTempDirs.has(dir)) continue;
    const pid = Number(match[1]);
    if (pid !== process.pid && processRuns(pid)) continue;
    await rm(dir, { recursive: true, force: true });
    removed++;
  }
  return removed;
}

function processRuns(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    // EPERM: it runs, under another user.
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

function runFfmpeg(input: string, stdinData: Buffer | null, signal: AbortSignal): Promise<Buffer> {
  signal.throwIfAborted();
  return new Promise<Buffer>((resolve, reject) => {
    const child = spawn(
      ffmpegPath,
      [
        '-hide_banner',
        '-nostdin',
        '-loglevel',
        'error',
        '-i',
        input,
        '-vn',
        '-ac',
        '1',
        '-ar',
        String(CLONE_SAMPLE_RATE),
        '-f',
        's16le',
        '-acodec',
        'pcm_s16le',
        'pipe:1',
      ],
      { stdio: [stdinData ? 'pipe' : 'ignore', 'pipe', 'pipe'] },
    );
    const output: Buffer[] = [];
    let stderr = '';
    let settled = false;
    const finish = (error: Error | null, value?: Buffer) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      signal.removeEventListener('abort', onAbort);
      if (child.exitCode === null) child.kill('SIGKILL');
      if (error) reject(error);
      else resolve(value!);
    };
    const timer = setTimeout(
      () => finish(new AudioConversionError(`audio conversion took longer than ${FFMPEG_TIMEOUT_MS} ms`)),
      FFMPEG_TIMEOUT_MS,
    );
    const onAbort = () => finish(abortReasonAsError(signal));
    signal.addEventListener('abort', onAbort, { once: true });

    let outputBytes = 0;
    child.stdout!.on('data', (chunk: Buffer) => {
      outputBytes += chunk.length;
      if (outputBytes > MAX_CLONE_PCM_BYTES) {
        finish(
          new AudioConversionError(
            `audio decodes to more than ${describeDuration(MAX_CLONE_SAMPLE_MS)}; send a shorter sample`,
          ),
        );
        return;
      }
      output.push(chunk);
    });
    child.stderr!.on('data', (chunk: Buffer) => {
      if (stderr.length < MAX_STDERR_CHARS) stderr += chunk.toString('utf8');
    });
    // ffmpeg may stop reading early on garbage input; the resulting EPIPE is reported via its exit code.
    child.stdin?.on('error', () => {});
    child.on('error', (error) => finish(new AudioConversionError(`audio converter failed to start: ${error.message}`)));
    child.on('close', (code) => {
      const pcmBytes = Buffer.concat(output);
      if (code !== 0)
        return finish(
          new AudioConversionError(
            `audio cannot be converted to 24 kHz mono WAV: ${stderr.trim().slice(0, MAX_STDERR_CHARS) || `ffmpeg exit ${code}`}`,
          ),
        );
      const pcm = pcm16FromLittleEndian(pcmBytes);
      if (pcm.length === 0)
        return finish(new AudioConversionError('audio cannot be converted to 24 kHz mono WAV: no audio samples'));
      finish(null, encodeWav(pcm, CLONE_SAMPLE_RATE));
    });
    if (stdinData) child.stdin!.end(stdinData);
  });
}
