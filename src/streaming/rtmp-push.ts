import { ClockRecorder, type RecordableMedia } from '../recording/clock-recorder.ts';

/**
 * Bound on an RTMP output becoming live: ffmpeg reports bytes written to the stream only once the server completed
 * the handshake and accepted the publish, which on a reachable server takes well under a second; a refused
 * connection, an unknown application or a rejected key end ffmpeg sooner. A server that accepts the connection and
 * never answers would hold the output `connecting` for ever: past this it is a failure (retried). The same 15 s as
 * a WHIP connection (`WHIP_CONNECT_TIMEOUT_MS`).
 */
export const RTMP_LIVE_TIMEOUT_MS = 15_000;
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
 * (H.264 at the avatar size and clock fps, a keyframe every 2 s, AAC). Resolves once ffmpeg reports output progress
 * (bytes written to the stream: the handshake and publish completed); rejects with the reason when it exits, the
 * server stops reading, or `RTMP_LIVE_TIMEOUT_MS` passes before.
 */
export async function startRtmpPush(
  media: RecordableMedia,
  url: string,
  videoBitrateKbps: number,
  signal: AbortSignal,
): Promise<RtmpPush> {
  let resolveEnded!: (reason: string) => void;
  const ended = new Promise<string>((resolve) => (resolveEnded = resolve));
  const recorder = new ClockRecorder(media, url, () => resolveEnded('the media clock stopped'), { videoBitrateKbps });
  void recorder
    .whenEncoderExited()
    .then(({ code, signal: killedBy }) =>
      resolveEnded(`ffmpeg ended the stream (${code !== null ? `exit ${code}` : `signal ${killedBy}`})`),
    );
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
    recorder.whenEncoderOutputWritten().then(() => null),
    new Promise<string>(
      (resolve) =>
        (timer = setTimeout(
          () => resolve(`the RTMP server did not accept the stream within ${RTMP_LIVE_TIMEOUT_MS / 1000} s`),
          RTMP_LIVE_TIMEOUT_MS,
        )),
    ),
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
