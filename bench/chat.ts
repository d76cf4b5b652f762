import { json, post, startTestApp } from '../test/helpers/app.ts';
import { ReceivingPeer } from '../test/helpers/peer.ts';
import { SseClient } from '../test/helpers/sse.ts';
import { startOpenAiUpstream } from '../test/fakes/openai-upstream.ts';
import { summary } from './stats.ts';

const TTFT_MS = 300;
const RUNS = 8;
const AUDIBLE_RMS = 300;
/** 20 silent 10 ms buffers in a row at the receiver: the previous reply has finished playing. */
const QUIET_BUFFERS = 20;

/** chat → first audible sample with a loopback LLM of fixed time-to-first-token; reports the service's overhead beyond it. */
export async function benchChat(): Promise<Record<string, ReturnType<typeof summary>>> {
  const upstream = await startOpenAiUpstream({
    chat: {
      replyTokens: ['Sure', '!', ' Here', ' is', ' a', ' short', ' answer', '.', ' And', ' more', ' text', '.'],
      firstTokenDelayMs: TTFT_MS,
      tokenDelayMs: 20,
    },
  });
  const t = await startTestApp({ env: { SERVICE_LLM_BASE_URL: upstream.baseUrl } });
  const { session_id, sse, peer } = await openWarmSession(t.baseUrl);
  const overhead: number[] = [];
  try {
    for (let run = 0; run < RUNS; run++) {
      // `status idle` comes when the last sample is handed to WebRTC; the receiver hears it ~100 ms later. Start
      // only once the receiver has been silent for a while, or that tail counts as this run's first audible sample.
      const quietSince = performance.now();
      await peer.until(
        () => {
          const recent = peer.audio.slice(-QUIET_BUFFERS);
          return (
            recent.length === QUIET_BUFFERS && recent[0].at > quietSince && recent.every((a) => a.rms < AUDIBLE_RMS)
          );
        },
        10_000,
        'silence before the next chat',
      );
      const from = sse.events.length;
      const sentAt = performance.now();
      const res = await post(t.baseUrl, `/sessions/${session_id}/chat`, { prompt: 'Say something.' });
      if (res.status !== 200) throw new Error(`chat failed: ${res.status} ${await res.text()}`);
      await peer.until(() => peer.firstAudible(sentAt, AUDIBLE_RMS) !== undefined, 15_000, 'audible');
      overhead.push(peer.firstAudible(sentAt, AUDIBLE_RMS)!.at - sentAt - TTFT_MS);
      await sse.waitFor((e) => e.type === 'status' && e.data.stage === 'idle', 30_000, 'idle', from);
    }
  } finally {
    peer.close();
    sse.close();
    await t.close();
    await upstream.close();
  }
  return { chatOverheadBeyondTtftMs: summary(overhead) };
}

/**
 * A started `rt` session (or the first avatar's on `mock`) with SSE and a receiving wrtc peer, after one warm-up
 * speak turn, so the measured turns do not pay for cold engines: the setup of the chat and voice steps.
 */
export async function openWarmSession(
  baseUrl: string,
): Promise<{ session_id: string; sse: SseClient; peer: ReceivingPeer }> {
  const avatars = await json(await fetch(`${baseUrl}/avatars`));
  const avatar = avatars.find((a: { model_type: string }) => a.model_type === 'rt') ?? avatars[0];
  const { session_id } = await json(
    await post(baseUrl, '/sessions', { avatar_id: avatar.id, model: avatar.model_type === 'rt' ? 'rt' : 'mock' }),
  );
  const sse = await SseClient.open(`${baseUrl}/sessions/${session_id}/events`);
  const peer = await ReceivingPeer.connect(baseUrl, session_id);
  peer.keepFrames = false;
  await post(baseUrl, `/sessions/${session_id}/start`);
  await post(baseUrl, `/sessions/${session_id}/speak`, { text: 'Warm up.' });
  await sse.waitFor((e) => e.type === 'status' && e.data.stage === 'idle', 30_000, 'warm');
  return { session_id, sse, peer };
}
