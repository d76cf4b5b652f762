import { json, post, startTestApp } from '../test/helpers/app.ts';
import { ReceivingPeer } from '../test/helpers/peer.ts';
import { round } from './stats.ts';

/** Each load step speaks continuously for this long before late frames are counted. */
const STEP_MS = 12_000;
const WARMUP_MS = 3_000;
const MAX_SESSIONS = 12;
const LATE_LIMIT = 0.01;
const TEXT =
  'The quick brown fox jumps over the lazy dog. Pack my box with five dozen liquor jugs. How vexingly quick daft zebras jump.';

/**
 * The largest number of concurrent sessions that hold the avatar's fps with under 1% late frames, each
 * with a real wrtc receiver and continuous speech, plus resident memory per session. Receivers run in the
 * same process, so the figure is pessimistic for the server alone.
 */
export async function benchCapacity(model = 'rt'): Promise<Record<string, number>> {
  const t = await startTestApp({ env: { SERVICE_MAX_SESSIONS: String(MAX_SESSIONS), SERVICE_RENDER_THREADS: '2' } });
  const avatars = await json(await fetch(`${t.baseUrl}/avatars`));
  const avatar = avatars.find((a: { model_type: string }) => a.model_type === model) ?? avatars[0];
  const sessions: Array<{ id: string; peer: ReceivingPeer; keepSpeaking: boolean }> = [];
  const rssBase = process.memoryUsage().rss;
  let best = 0;
  let rssPerSession = 0;
  try {
    for (let n = 1; n <= MAX_SESSIONS; n++) {
      const { session_id } = await json(await post(t.baseUrl, '/sessions', { avatar_id: avatar.id, model }));
      const peer = await ReceivingPeer.connect(t.baseUrl, session_id);
      peer.keepFrames = false;
      await post(t.baseUrl, `/sessions/${session_id}/start`);
      const entry = { id: session_id, peer, keepSpeaking: true };
      sessions.push(entry);
      void (async () => {
        while (entry.keepSpeaking) {
          const res = await post(t.baseUrl, `/sessions/${session_id}/speak`, { text: TEXT });
          await res.text();
          await new Promise((r) => setTimeout(r, res.status === 200 ? 200 : 50));
        }
      })();
      // A new session's first frames render on cold worker code; measure the steady state only.
      await new Promise((r) => setTimeout(r, WARMUP_MS));
      const before = sessions.map((s) => statsOf(t, s.id));
      await new Promise((r) => setTimeout(r, STEP_MS));
      const after = sessions.map((s) => statsOf(t, s.id));
      let sent = 0;
      let late = 0;
      after.forEach((a, i) => {
        sent += a.sent - before[i].sent;
        late += a.late - before[i].late;
      });
      const lateRatio = sent ? late / sent : 1;
      const rss = process.memoryUsage().rss;
      console.log(
        `  ${n} session(s): ${sent} frames, ${(lateRatio * 100).toFixed(2)}% late, rss ${Math.round(rss / 1e6)} MB`,
      );
      if (lateRatio >= LATE_LIMIT) break;
      best = n;
      rssPerSession = (rss - rssBase) / n;
    }
  } finally {
    for (const s of sessions) {
      s.keepSpeaking = false;
      s.peer.close();
    }
    await t.close();
  }
  return {
    [`capacity_${model}_sessions`]: best,
    [`capacity_${model}_rss_mb_per_session`]: round(rssPerSession / 1e6, 1),
  };
}

function statsOf(t: Awaited<ReturnType<typeof startTestApp>>, id: string): { sent: number; late: number } {
  const session = t.services.supervisor.liveSession(id);
  return session?.frameCounts ?? { sent: 0, late: 0 };
}
