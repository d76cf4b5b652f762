/**
 * Memory over many session lifetimes, on the service as its own process: BENCH_CYCLES (default 1000)
 * cycles of create → WebRTC receiver + SSE → start → speak a short sentence → back to idle → delete, a few
 * at a time (BENCH_CYCLE_CONCURRENCY, default 3). Every 100 cycles, with no cycle in flight and after a full
 * GC in the service, its resident memory (process and tree), open descriptors, threads and live sessions are read.
 * Verdict on the second half of the run (see `cycleGrowth`); the climb since the first 100 cycles is reported too.
 *
 *   npm run bench -- session_cycles
 *   BENCH_CYCLES=200 npm run bench -- session_cycles
 */
import { readFileSync } from 'node:fs';
import { ReceivingPeer } from '../test/helpers/peer.ts';
import { SseClient } from '../test/helpers/sse.ts';
import { startBenchService } from './service.ts';
import { avatarFor, getJson, round } from './session-load.ts';
import { loadAverage, openFds, sampleTree } from './proc.ts';

const CYCLES = Number(process.env.BENCH_CYCLES ?? 1000);
const CONCURRENCY = Number(process.env.BENCH_CYCLE_CONCURRENCY ?? 3);
/** Connect a wrtc receiver in every k-th cycle (1 = all): WebRTC is where native memory could leak. */
const PEER_EVERY = Number(process.env.BENCH_CYCLE_PEER_EVERY ?? 1);
/** Readings every 100 cycles (every tenth of the run when it is shorter than 1000). */
const SAMPLE_EVERY = Math.max(1, Math.min(100, Math.floor(CYCLES / 10)));
/** After each batch: the last sessions' teardown (peer close, SSE end) finishes before the reading. */
const SETTLE_MS = 1_000;
const RSS_READINGS = 5;
/** "No growth": what allocator and heap noise may move RSS by over 1000 cycles. */
export const GROWTH_TOLERANCE_MB_PER_1000 = 10;

export interface CycleSample {
  cycles: number;
  service_rss_mb: number;
  tree_rss_mb: number;
  fds: number;
  threads: number;
  live_sessions: number;
  elapsed_s: number;
}

function threadsOf(pid: number): number {
  try {
    return Number(/^Threads:\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? NaN);
  } catch {
    return NaN;
  }
}

function slopePer1000(samples: CycleSample[], pick: (s: CycleSample) => number): number {
  if (samples.length < 2) return NaN;
  const xs = samples.map((s) => s.cycles);
  const ys = samples.map(pick);
  const mx = xs.reduce((a, b) => a + b, 0) / xs.length;
  const my = ys.reduce((a, b) => a + b, 0) / ys.length;
  let num = 0;
  let den = 0;
  for (let i = 0; i < xs.length; i++) {
    num += (xs[i] - mx) * (ys[i] - my);
    den += (xs[i] - mx) ** 2;
  }
  return den > 0 ? round((num / den) * 1000, 1) : NaN;
}

export async function benchSessionCycles(cycles = CYCLES): Promise<Record<string, unknown>> {
  const service = await startBenchService({ env: { SERVICE_MAX_SESSIONS: String(Math.max(12, CONCURRENCY * 2)) } });
  const { baseUrl, pid } = service;
  const started = performance.now();
  const samples: CycleSample[] = [];
  let done = 0;
  let failures = 0;
  let lastError = '';
  try {
    const avatar = await avatarFor(baseUrl, 'rt');
    const sample = async () => {
      // A full GC first (SIGUSR2), then the median of a few readings half a second apart.
      await service.collectGarbage();
      const readings = [];
      for (let i = 0; i < RSS_READINGS; i++) {
        if (i > 0) await new Promise((r) => setTimeout(r, 500));
        readings.push(sampleTree(pid));
      }
      const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];
      const tree = { rootRss: median(readings.map((x) => x.rootRss)), treeRss: median(readings.map((x) => x.treeRss)) };
      const metrics = await getJson<{ sessions: { live: number } }>(baseUrl, '/metrics');
      const s: CycleSample = {
        cycles: done,
        service_rss_mb: round(tree.rootRss / 1e6, 1),
        tree_rss_mb: round(tree.treeRss / 1e6, 1),
        fds: openFds(pid),
        threads: threadsOf(pid),
        live_sessions: metrics.sessions.live,
        elapsed_s: round((performance.now() - started) / 1000, 1),
      };
      samples.push(s);
      console.log(`  ${s.cycles} cycles: rss ${s.service_rss_mb} MB (tree ${s.tree_rss_mb} MB), ${s.fds} fds, ${s.threads} threads, ${s.live_sessions} live, ${s.elapsed_s} s`);
    };
    await sample();
    let next = 0;
    const lifecycle = async (index: number) => {
      const res = await fetch(`${baseUrl}/sessions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ avatar_id: avatar.id, model: 'rt' }),
      });
      const created = (await res.json()) as { session_id?: string; detail?: string };
      if (!created.session_id) throw new Error(`create → ${res.status} ${created.detail ?? ''}`);
      const id = created.session_id;
      const sse = await SseClient.open(`${baseUrl}/sessions/${id}/events`);
      let peer: ReceivingPeer | null = null;
      try {
        if (index % PEER_EVERY === 0) {
          peer = await ReceivingPeer.connect(baseUrl, id);
          peer.keepFrames = false;
        }
        const startRes = await fetch(`${baseUrl}/sessions/${id}/start`, { method: 'POST' });
        if (!startRes.ok) throw new Error(`start → ${startRes.status} ${await startRes.text()}`);
        await startRes.text();
        const from = sse.events.length;
        const speakRes = await fetch(`${baseUrl}/sessions/${id}/speak`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ text: 'Short turn.' }),
        });
        if (!speakRes.ok) throw new Error(`speak → ${speakRes.status} ${await speakRes.text()}`);
        await speakRes.text();
        await sse.waitFor((e) => e.type === 'status' && e.data?.stage === 'idle', 30_000, 'idle', from);
      } finally {
        await fetch(`${baseUrl}/sessions/${id}`, { method: 'DELETE' }).then((r) => r.text());
        peer?.close();
        sse.close();
      }
    };
    // Batches of SAMPLE_EVERY cycles, CONCURRENCY at a time; each reading is taken with no cycle in flight,
    // after the last deletes and peer teardowns settled, so descriptors and threads compare exactly.
    while (done < cycles) {
      const batchEnd = Math.min(cycles, done + SAMPLE_EVERY);
      const worker = async () => {
        for (;;) {
          const index = next++;
          if (index >= batchEnd) return;
          try {
            await lifecycle(index);
          } catch (error) {
            failures++;
            lastError = (error as Error).message;
          }
          done++;
        }
      };
      await Promise.all(Array.from({ length: CONCURRENCY }, worker));
      next = batchEnd;
      await new Promise((r) => setTimeout(r, SETTLE_MS));
      await sample();
    }
  } finally {
    await service.stop();
  }
  return {
    cycles: done,
    concurrency: CONCURRENCY,
    peer_every: PEER_EVERY,
    failures,
    last_error: lastError || undefined,
    seconds: round((performance.now() - started) / 1000, 1),
    ...cycleGrowth(samples),
    load_average: loadAverage(),
    samples,
  };
}

/**
 * Growth figures from the readings. The service's RSS climbs for the first few hundred cycles while V8's heap
 * and the allocator's arenas reach their working size, then levels off; a leak keeps climbing. So the verdict
 * uses the second half of the run (slope and difference), and the climb from the first reading is reported beside it.
 */
export function cycleGrowth(samples: CycleSample[]): Record<string, number> {
  const last = samples[samples.length - 1];
  const warm = samples.find((s) => s.cycles > 0) ?? samples[0];
  const halfway = samples.find((s) => s.cycles >= last.cycles / 2) ?? warm;
  const secondHalf = samples.filter((s) => s.cycles >= halfway.cycles);
  return {
    rss_mb_growth_after_warm: round(last.service_rss_mb - warm.service_rss_mb, 1),
    tree_rss_mb_growth_after_warm: round(last.tree_rss_mb - warm.tree_rss_mb, 1),
    rss_mb_slope_per_1000_cycles: slopePer1000(samples.filter((s) => s.cycles >= warm.cycles), (s) => s.service_rss_mb),
    rss_mb_growth_second_half: round(last.service_rss_mb - halfway.service_rss_mb, 1),
    rss_mb_slope_per_1000_cycles_second_half: slopePer1000(secondHalf, (s) => s.service_rss_mb),
    fds_growth_after_warm: last.fds - warm.fds,
    threads_growth_after_warm: last.threads - warm.threads,
    live_sessions_after: last.live_sessions,
    warm_at_cycles: warm.cycles,
    halfway_at_cycles: halfway.cycles,
  };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  console.log(JSON.stringify(await benchSessionCycles(), null, 2));
  process.exit(0);
}
