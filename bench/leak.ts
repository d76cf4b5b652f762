import { json, post, startTestApp } from '../test/helpers/app.ts';
import { ReceivingPeer } from '../test/helpers/peer.ts';
import { SseClient } from '../test/helpers/sse.ts';
import { round } from './stats.ts';

const WARMUP_SESSIONS = 5;
const MEASURED_SESSIONS = 30;

async function settle(): Promise<{ heap: number; rss: number }> {
  const gc = (globalThis as { gc?: () => void }).gc;
  for (let i = 0; i < 3; i++) {
    gc?.();
    await new Promise((r) => setTimeout(r, 200));
  }
  const usage = process.memoryUsage();
  return { heap: usage.heapUsed, rss: usage.rss };
}

/**
 * Session churn: full session lifecycles (create, WebRTC peer, SSE, start, speak, delete) back to back.
 * Memory retained per finished session should be ~0; a leak shows as heap growing with the count.
 * Run with `--expose-gc` (npm run bench does) for stable heap figures.
 */
export async function benchLeak(): Promise<Record<string, number>> {
  const t = await startTestApp();
  const avatars = await json(await fetch(`${t.baseUrl}/avatars`));
  const avatar = avatars.find((a: { model_type: string }) => a.model_type === 'rt') ?? avatars[0];
  const lifecycle = async () => {
    const { session_id } = await json(await post(t.baseUrl, '/sessions', { avatar_id: avatar.id, model: 'rt' }));
    const sse = await SseClient.open(`${t.baseUrl}/sessions/${session_id}/events`);
    const peer = await ReceivingPeer.connect(t.baseUrl, session_id);
    peer.keepFrames = false;
    await post(t.baseUrl, `/sessions/${session_id}/start`);
    const from = sse.events.length;
    await post(t.baseUrl, `/sessions/${session_id}/speak`, { text: 'Short turn.' });
    await sse.waitFor((e) => e.type === 'status' && e.data.stage === 'idle', 20_000, 'idle', from);
    await fetch(`${t.baseUrl}/sessions/${session_id}`, { method: 'DELETE' });
    await sse.waitFor((e) => e.type === 'session.terminated', 5_000, 'terminated');
    peer.close();
    sse.close();
  };
  try {
    for (let i = 0; i < WARMUP_SESSIONS; i++) await lifecycle();
    const before = await settle();
    for (let i = 0; i < MEASURED_SESSIONS; i++) await lifecycle();
    const after = await settle();
    return {
      sessions: MEASURED_SESSIONS,
      heap_kb_retained_per_session: round((after.heap - before.heap) / MEASURED_SESSIONS / 1024, 1),
      rss_mb_growth_total: round((after.rss - before.rss) / 1e6, 1),
      live_sessions_after: t.services.supervisor.liveCount,
    };
  } finally {
    await t.close();
  }
}
