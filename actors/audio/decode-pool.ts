/**
 * Client audio (speak_audio, transcribe, offline segments) is decoded and resampled in a worker thread, never on
 * the event loop: an MP3 of a few MB can take seconds of CPU even inside its duration bound, and `/healthz`,
 * SSE and every live session's timers must keep running meanwhile.
 */
import { Piscina } from 'piscina';
import { Overloaded } from '../admission.ts';
import { LazyPiscina } from '../lazy-piscina.ts';
import { movedWith } from '../transferable.ts';
import { AudioTooLongError, InvalidAudioError, type DecodeOptions, type DecodedAudio } from './decode.ts';
import type { DecodeOutcome, DecodeTask } from './decode-worker.ts';

const WORKER_BOOTSTRAP = new URL('./decode-worker.mjs', import.meta.url);
/** One decode at a time: uploads are rare next to live turns, and the other core stays with the sessions. */
export const AUDIO_DECODE_THREADS = 1;
/**
 * Decodes waiting for the thread. The upload admission cap keeps fewer than this in flight; past it a decode is
 * refused (`AudioDecoderBusyError`) rather than queued without end.
 */
export const AUDIO_DECODE_QUEUE = 32;
/**
 * Longest one decode may take, waiting included. A 10-minute MP3 decodes and resamples in a few seconds on one
 * slow core; past this the thread is stuck or starved, and the caller gets a refusal rather than a wait.
 */
export const AUDIO_DECODE_TIMEOUT_MS = 60_000;
/** The thread (its WASM decoder and resampler, a few MB) is let go after this long without uploads. */
const IDLE_TIMEOUT_MS = 60_000;

/** Retry-After of a busy decoder: about one upload's read and decode. */
export const AUDIO_DECODER_BUSY_RETRY_AFTER_S = 5;

/** The decoder could not take the work now (its queue is full, or it took too long): a 503, try again later. */
export class AudioDecoderBusyError extends Overloaded {
  constructor(message: string) {
    super(message, AUDIO_DECODER_BUSY_RETRY_AFTER_S);
  }
}

const pool = new LazyPiscina<DecodeTask, DecodeOutcome>(
  () =>
    new Piscina<DecodeTask, DecodeOutcome>({
      filename: WORKER_BOOTSTRAP.href,
      minThreads: 0,
      maxThreads: AUDIO_DECODE_THREADS,
      maxQueue: AUDIO_DECODE_QUEUE,
      idleTimeout: IDLE_TIMEOUT_MS,
      // The decoder's WASM start-up is async; Atomics.wait between tasks would stall it.
      atomics: 'disabled',
    }),
);

/**
 * `decodeAudioToPcm16` in the decode worker, bounded by `maxDurationMs` (required: client audio always has a
 * bound). Throws `InvalidAudioError`, `AudioTooLongError`, `AudioDecoderBusyError`, or the signal's reason.
 */
export async function decodeAudioOffThread(
  bytes: Uint8Array,
  options: DecodeOptions & { maxDurationMs: number },
): Promise<DecodedAudio> {
  const { signal, ...rest } = options;
  signal?.throwIfAborted();
  if (bytes.length === 0) throw new InvalidAudioError('audio is empty');
  // A private copy moves to the worker: the caller's buffer may be a view into a larger one, or still in use.
  const task: DecodeTask = { ...rest, bytes: new Uint8Array(bytes) };
  const deadline = AbortSignal.timeout(AUDIO_DECODE_TIMEOUT_MS);
  let outcome: DecodeOutcome;
  try {
    outcome = await pool.get().run(movedWith(task, [task.bytes.buffer]), {
      signal: signal ? AbortSignal.any([signal, deadline]) : deadline,
    });
  } catch (error) {
    if (signal?.aborted) throw signal.reason ?? error;
    if (deadline.aborted)
      throw new AudioDecoderBusyError(`audio decoding took longer than ${AUDIO_DECODE_TIMEOUT_MS / 1000} s`);
    if (/queue is at limit/i.test((error as Error).message))
      throw new AudioDecoderBusyError('the audio decoder is busy');
    throw error;
  }
  if (outcome.ok) return { pcm: outcome.pcm, sampleRate: outcome.sampleRate, format: outcome.format };
  if (outcome.kind === 'too_long') throw new AudioTooLongError(rest.maxDurationMs);
  throw new InvalidAudioError(outcome.message);
}

/** Stops the decode thread; the next decode starts a fresh one. Idempotent. */
export function closeAudioDecoder(): Promise<void> {
  return pool.close();
}
