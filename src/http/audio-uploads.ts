/**
 * Client audio at the HTTP edge. Admission is decided before a byte of the body is read: a session takes one
 * upload at a time (409), and the service reads and decodes a bounded number at once (503 + Retry-After).
 * Without it, thirty parallel 25 MB uploads to one idle session were all read before twenty-nine got their 409.
 * Decoding runs off the event loop and stops at a decoded-duration bound (`decodeClientAudio`); an upload whose
 * container already shows it is past that bound is refused while it streams (`refuseTooLongWhileStreaming`).
 * The routes that take audio (interaction, offline bundles, voices) reach the audio stage only through here.
 */
import type { FastifyReply } from 'fastify';
import { HttpError, badRequest, conflict } from '../errors.ts';
import { Admission, Overloaded, type Release } from '../../actors/admission.ts';
import { AudioTooLongError, InvalidAudioError, UPLOAD_AUDIO_RULES } from '../../actors/audio/decode.ts';
import { decodeAudioOffThread } from '../../actors/audio/decode-pool.ts';
import { DecodedDurationWatch } from '../../actors/audio/duration-watch.ts';

export { describeDuration, UPLOAD_AUDIO_RULES } from '../../actors/audio/decode.ts';
export { closeAudioDecoder } from '../../actors/audio/decode-pool.ts';

/**
 * Audio uploads (speak_audio, speak_rt_audio, transcribe, offline bundles, clone and reference samples) being read
 * or decoded at once across the service. Each holds up to its byte bound (25 MB) while it is read and its decoded
 * duration bound while it decodes on the one decode thread; four keep that to ~100 MB of bodies and a decode
 * queue a few seconds deep, which is more than a single-host service sees from honest clients.
 */
export const MAX_CONCURRENT_AUDIO_UPLOADS = 4;
/** Retry-After of the 503 past that cap: about one upload's read and decode. */
export const AUDIO_UPLOADS_RETRY_AFTER_S = 5;

/** One service's upload admission. */
export class UploadAdmission {
  /** The service-wide slots: counted places, nobody waits (an upload past them is refused unread). */
  private readonly uploads = new Admission({
    maxRunning: MAX_CONCURRENT_AUDIO_UPLOADS,
    maxWaiting: 0,
    refusal: () =>
      new Overloaded(
        `too many audio uploads in progress (at most ${MAX_CONCURRENT_AUDIO_UPLOADS}); retry shortly`,
        AUDIO_UPLOADS_RETRY_AFTER_S,
      ),
  });
  private readonly sessionsReceiving = new Set<string>();

  /** Uploads holding a service-wide slot now. */
  get uploadsInProgress(): number {
    return this.uploads.load.running;
  }

  /**
   * Takes one of the service-wide upload slots until the request's answer is sent or its connection drops;
   * 503 with Retry-After when all are taken.
   */
  admitUpload(reply: FastifyReply): void {
    onAnswered(reply, this.uploads.take());
  }

  /**
   * Takes the session's single upload slot (speak_audio, speak_rt_audio and transcribe share it) until the
   * answer is sent: while one upload is read and decoded, the machine is still idle and would admit the
   * next, which would then be read only to be refused. 409 when the slot is taken.
   */
  reserveSession(sessionId: string, reply: FastifyReply): void {
    if (this.sessionsReceiving.has(sessionId))
      throw conflict('another audio upload to this session is still being received');
    this.sessionsReceiving.add(sessionId);
    onAnswered(reply, () => this.sessionsReceiving.delete(sessionId));
  }
}

/** Runs `release` when the response is finished or its connection closed ('close' comes once, after either). */
function onAnswered(reply: FastifyReply, release: Release): void {
  reply.raw.once('close', release);
}

const admissions = new WeakMap<object, UploadAdmission>();

/** The upload admission of one service (keyed by its services object, so every route plugin shares it). */
export function uploadAdmission(services: object): UploadAdmission {
  let admission = admissions.get(services);
  if (!admission) {
    admission = new UploadAdmission();
    admissions.set(services, admission);
  }
  return admission;
}

export interface ClientAudioOptions {
  targetRate: number;
  /** Rate of headerless raw PCM (default 16 kHz). */
  rawSampleRate?: number;
  /** The route's decoded-duration bound. */
  maxDurationMs: number;
  /** Status past `maxDurationMs`: 413 unless the route's spec row says 400 (clone samples). */
  tooLongStatus?: 400 | 413;
  signal?: AbortSignal;
}

/**
 * A `readMultipart` file watch that refuses the upload while it streams, with the same answer the decode would
 * give, as soon as its container shows it decodes past `maxDurationMs` (`DecodedDurationWatch`): an hour of
 * 8 kb/s MP3 is refused from its first frame, not after its 3.6 MB were read.
 */
export function refuseTooLongWhileStreaming(
  options: Pick<ClientAudioOptions, 'maxDurationMs' | 'tooLongStatus'>,
  label = 'audio',
): (chunk: Buffer) => void {
  const watch = new DecodedDurationWatch(options.maxDurationMs);
  return (chunk) => {
    try {
      watch.push(chunk);
    } catch (error) {
      if (error instanceof AudioTooLongError) throw tooLong(error, options.tooLongStatus ?? 413, label);
      throw error;
    }
  };
}

function tooLong(error: AudioTooLongError, status: 400 | 413, label: string): HttpError {
  return new HttpError(status, `${label} is too long: it ${error.message.replace(/^audio /, '')}`);
}

/**
 * Decodes client audio (`UPLOAD_AUDIO_RULES`) off the event loop at `targetRate`: 400 for audio it cannot read
 * or that holds no samples, `tooLongStatus` once it decodes past `maxDurationMs`, 503 when the decoder is busy.
 * `label` names the input in the detail (`audio`, `segments[2]`).
 */
export async function decodeClientAudio(
  data: Uint8Array,
  options: ClientAudioOptions,
  label = 'audio',
): Promise<Int16Array> {
  const { tooLongStatus = 413, ...decode } = options;
  try {
    const decoded = await decodeAudioOffThread(data, { ...decode, rules: UPLOAD_AUDIO_RULES });
    if (decoded.pcm.length === 0) throw badRequest(`${label} contains no samples`);
    return decoded.pcm;
  } catch (error) {
    if (error instanceof AudioTooLongError) throw tooLong(error, tooLongStatus, label);
    if (error instanceof InvalidAudioError) throw badRequest(`invalid ${label}: ${error.message}`);
    throw error;
  }
}
