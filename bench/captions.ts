import { json, post, startTestApp } from '../test/helpers/app.ts';
import { ReceivingPeer } from '../test/helpers/peer.ts';
import { SseClient } from '../test/helpers/sse.ts';
import { summary } from './stats.ts';

/** The receiver's "sound" threshold, as the other wrtc benches use (test/helpers/conversation.ts imports vitest). */
const AUDIBLE_RMS = 300;
/** Above this RMS a received buffer carries the turn's audio at all (its leading near-silence included); idle is 0. */
const FIRST_SAMPLE_RMS = 1;

/** Turns measured: each gives one caption whose audio starts after silence (the turn's first sentence). */
const RUNS = 10;
/** Quiet between turns, longer than the audio path, so each turn's start is found after silence. */
const SETTLE_MS = 600;

/**
 * Issue 46: a caption reaches an SSE client within ±80 ms of the start of its audio at a wrtc receiver. Each turn's
 * first caption is timed against the first audible buffer at the receiver (caption arrival − audio arrival).
 */
export async function benchCaptions(): Promise<Record<string, ReturnType<typeof summary>>> {
  const t = await startTestApp();
  const avatars = await json(await fetch(`${t.baseUrl}/avatars`));
  const avatar = avatars.find((a: { model_type: string }) => a.model_type === 'rt') ?? avatars[0];
  const { session_id } = await json(await post(t.baseUrl, '/sessions', { avatar_id: avatar.id, model: 'rt' }));
  const sse = await SseClient.open(`${t.baseUrl}/sessions/${session_id}/events`);
  const peer = await ReceivingPeer.connect(t.baseUrl, session_id);
  await post(t.baseUrl, `/sessions/${session_id}/start`);
  await peer.until(() => peer.audio.length > 50, 10_000, 'audio');
  const offsets: number[] = [];
  const paths: number[] = [];
  try {
    for (let run = 0; run < RUNS; run++) {
      const from = sse.events.length;
      const sentAt = performance.now();
      await post(t.baseUrl, `/sessions/${session_id}/speak`, { text: 'Caption timing check, one two three.' });
      // The SSE client stamps each event as it arrives.
      const caption = await sse.waitFor((e) => e.type === 'caption', 15_000, 'caption', from);
      await peer.until(() => peer.firstAudible(sentAt, AUDIBLE_RMS) !== undefined, 15_000, 'audible');
      offsets.push(caption.at - peer.firstAudible(sentAt, AUDIBLE_RMS)!.at);
      // The turn's first sample at the viewer (its leading silence is not digital zero): the audio path alone.
      const firstSample = peer.firstAudible(sentAt, FIRST_SAMPLE_RMS);
      if (firstSample) paths.push(firstSample.at - caption.at);
      await sse.waitFor((e) => e.type === 'status' && e.data.stage === 'idle', 20_000, 'idle', from);
      // The turn's last audio is still on its way to the receiver at `idle`: it must not count as the next one's start.
      await new Promise((resolve) => setTimeout(resolve, SETTLE_MS));
    }
  } finally {
    peer.close();
    sse.close();
    await fetch(`${t.baseUrl}/sessions/${session_id}`, { method: 'DELETE' });
    await t.close();
  }
  return {
    captionOffsetMs: summary(offsets),
    captionAbsOffsetMs: summary(offsets.map(Math.abs)),
    firstSampleAfterCaptionMs: summary(paths),
  };
}
