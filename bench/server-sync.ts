import { json, post, startTestApp } from '../test/helpers/app.ts';
import { ReceivingPeer } from '../test/helpers/peer.ts';
import { SseClient } from '../test/helpers/sse.ts';
import { summary } from './stats.ts';
import { sessionParts } from '../src/sessions/session.ts';

/**
 * A/V offset at the sender: for every video frame handed to WebRTC during speech, how far the media clock
 * (the audio already handed over) is past the frame's presentation time. This is the part of A/V sync the
 * service controls; receivers add their own jitter buffers (browsers re-align tracks of one stream).
 */
export async function benchServerSync(): Promise<Record<string, ReturnType<typeof summary> | number>> {
  const t = await startTestApp();
  const avatars = await json(await fetch(`${t.baseUrl}/avatars`));
  const avatar = avatars.find((a: { model_type: string }) => a.model_type === 'rt') ?? avatars[0];
  const { session_id } = await json(await post(t.baseUrl, '/sessions', { avatar_id: avatar.id, model: 'rt' }));
  const sse = await SseClient.open(`${t.baseUrl}/sessions/${session_id}/events`);
  const peer = await ReceivingPeer.connect(t.baseUrl, session_id);
  peer.keepFrames = false;
  await post(t.baseUrl, `/sessions/${session_id}/start`);
  const playout = sessionParts(t.services.supervisor.liveSession(session_id)!).media.playout;
  const offsets: number[] = [];
  playout.on('video', (_frame, _idx, ptsMs) => offsets.push(playout.mediaMs - ptsMs));
  const longText = Array.from(
    { length: 6 },
    (_, i) => `Sentence ${i + 1} of a long answer that keeps the avatar talking for a while.`,
  ).join(' ');
  const from = sse.events.length;
  await post(t.baseUrl, `/sessions/${session_id}/speak`, { text: longText });
  await sse.waitFor((e) => e.type === 'status' && e.data.stage === 'idle', 120_000, 'idle', from);
  const frameIntervalMs = 1000 / playout.fps;
  const result = {
    senderVideoBehindAudioMs: summary(offsets),
    framesWithinOneFrame:
      Math.round((offsets.filter((o) => Math.abs(o) <= frameIntervalMs).length / offsets.length) * 1000) / 10,
    lateFrames: playout.lateFrames,
    sentFrames: playout.sentFrames,
  };
  peer.close();
  sse.close();
  await t.close();
  return result;
}
