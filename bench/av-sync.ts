import { json, post, startTestApp, type TestApp } from '../test/helpers/app.ts';
import { ReceivingPeer } from '../test/helpers/peer.ts';
import { SseClient } from '../test/helpers/sse.ts';
import { decodeTimecode } from '../actors/render/timecode.ts';
import { summary } from './stats.ts';

const AUDIBLE_RMS = 300;
const RUNS = 8;

/**
 * A/V offset at a real receiver: the `mock` renderer stamps each frame with its index; the SSE `frame`
 * event with pts_ms≈0 names the frame that must be on screen when the turn's first sample plays. The
 * offset is (arrival of that frame) − (arrival of the first audible audio), corrected by the frame's pts.
 * Positive: video late. Both media cross the same wrtc stack, so the figure includes jitter buffers.
 */
export async function benchAvSync(app?: TestApp): Promise<Record<string, ReturnType<typeof summary>>> {
  const t = app ?? (await startTestApp());
  const avatars = await json(await fetch(`${t.baseUrl}/avatars`));
  const avatar = avatars.find((a: { model_type: string }) => a.model_type === 'rt') ?? avatars[0];
  const { session_id } = await json(await post(t.baseUrl, '/sessions', { avatar_id: avatar.id, model: 'mock' }));
  const sse = await SseClient.open(`${t.baseUrl}/sessions/${session_id}/events`);
  const peer = await ReceivingPeer.connect(t.baseUrl, session_id);
  await post(t.baseUrl, `/sessions/${session_id}/start`);
  await peer.until(() => peer.frames.length > 20, 10_000, 'video');
  const offsets: number[] = [];
  for (let run = 0; run < RUNS; run++) {
    const from = sse.events.length;
    const sentAt = performance.now();
    await post(t.baseUrl, `/sessions/${session_id}/speak`, { text: 'Synchronisation check. One, two, three.' });
    const firstFrame = await sse.waitFor((e) => e.type === 'frame', 15_000, 'frame event', from);
    await peer.until(() => peer.firstAudible(sentAt, AUDIBLE_RMS) !== undefined, 15_000, 'audible');
    const audioAt = peer.firstAudible(sentAt, AUDIBLE_RMS)!.at;
    await peer.until(
      () => peer.frames.some((f) => f.at > sentAt && (decodeTimecode(f)?.frameIdx ?? -1) >= firstFrame.data.frame_idx),
      5_000,
      'stamped frame',
    );
    const frame = peer.frames.find(
      (f) => f.at > sentAt && (decodeTimecode(f)?.frameIdx ?? -1) >= firstFrame.data.frame_idx,
    )!;
    offsets.push(frame.at - audioAt - firstFrame.data.pts_ms);
    await sse.waitFor((e) => e.type === 'status' && e.data.stage === 'idle', 20_000, 'idle', from);
  }
  peer.close();
  sse.close();
  await fetch(`${t.baseUrl}/sessions/${session_id}`, { method: 'DELETE' });
  if (!app) await t.close();
  return { avOffsetMs: summary(offsets), avAbsOffsetMs: summary(offsets.map(Math.abs)) };
}
