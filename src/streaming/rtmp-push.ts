import { ClockRecorder, type RecordableMedia } from '../recording/clock-recorder.ts';

/**
 * ffmpeg that is still running this long after it started takes the stream: a refused connection, an unknown
 * application or a rejected key end ffmpeg within a second of its first frames.
 */
export const RTMP_LIVE_AFTER_MS = 2_000;
/**
 * Bytes queued for ffmpeg (raw frames and PCM) past which the push counts as dropped: ~2 s of 512² frames. ffmpeg
 * stops reading when the server stops reading (a stalled connection); the clock does not wait, so the queue is cut here.
 */
export const RTMP_MAX_QUEUED_BYTES = 50 * 384 * 1024;
/** How often the queue bound is checked. */
const RTMP_QUEUE_CHECK_MS = 250;

/** One live RTMP push; the same shape as a WHIP push (`actors/media/whip-client.ts`). */
export interface RtmpPush {
  readonly ended: Promise<string>;
  close(): Promise<void>;
}

/**
 * Publishes the session's media clock to an RTMP server through the bundled ffmpeg: the recorder's tap of the clock
 * (`ClockRecorder`: the session's own audio and frames at their presentation times, one timeline) into an FLV encoder
 * (H.264 at the avatar size and clock fps, a keyframe every 2 s, AAC). Resolves once ffmpeg has run
 * `RTMP_LIVE_AFTER_MS`; rejects with the reason when it exits before.
 */
export async function startRtmpPush(media: RecordableMedia, url: string, videoBitrateKbps: number, signal: AbortSignal): Promise<RtmpPush> {
  let resolveEnded!: (reason: string) => void;
  const ended = new Promise<string>((resolve) => (resolveEnded = resolve));
  const recorder = new ClockRecorder(media, url, () => resolveEnded('the media clock stopped'), { videoBitrateKbps });
  void recorder.whenEncoderExited().then(({ code, signal: killedBy }) => resolveEnded(`ffmpeg ended the stream (${code !== null ? `exit ${code}` : `signal ${killedBy}`})`));
  const queueCheck = setInterval(() => {
    if (recorder.bufferedBytes > RTMP_MAX_QUEUED_BYTES) resolveEnded('the RTMP server stopped reading');
  }, RTMP_QUEUE_CHECK_MS);
  queueCheck.unref();
  let closing: Promise<void> | null = null;
  const close = (): Promise<void> =>
    (closing ??= (async () => {
      clearInterval(queueCheck);
      resolveEnded('stopped');
      await recorder.abort();
    })());
  let timer: NodeJS.Timeout | undefined;
  let onAbort: (() => void) | undefined;
  const failure = await Promise.race([
    ended,
    new Promise<null>((resolve) => (timer = setTimeout(() => resolve(null), RTMP_LIVE_AFTER_MS))),
    new Promise<string>((resolve) => {
      onAbort = () => resolve('aborted');
      if (signal.aborted) onAbort();
      else signal.addEventListener('abort', onAbort, { once: true });
    }),
  ]);
  clearTimeout(timer);
  signal.removeEventListener('abort', onAbort!);
  if (failure !== null) {
    await close();
    throw new Error(failure);
  }
  return { ended, close };
}
