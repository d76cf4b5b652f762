/**
 * Memory over many session lifetimes, on the service as its own process: BENCH_CYCLES (default 1000)
 * cycles of create → WebRTC receiver + SSE → start → speak a short sentence → back to idle → delete, a few
 * at a time (BENCH_CYCLE_CONCURRENCY, default 3). Every 100 cycles, with no cycle in flight and after a full
 * GC in the service, its resident memory (process and tree), open descriptors, threads and live sessions are read,
 * and the service's own figures right after that GC (V8 heap used, external, arrayBuffers, libuv handles; written
 * by bench/gc-on-signal.mjs), so a climb in RSS can be told apart: JS or buffer retention moves heap/external,
 * native or allocator growth moves RSS alone. Verdict on the second half of the run's RSS (see `cycleGrowth`);
 * the climb since the first 100 cycles and the heap/external slopes are reported beside it.
 *
 *   npm run bench -- session_cycles
 *   BENCH_CYCLES=200 npm run bench -- session_cycles
 *   BENCH_CYCLE_MALLOC_STATS=1 npm run bench -- session_cycles   (also glibc's own account, via gdb)
 *   BENCH_CYCLE_SMAPS=1 npm run bench -- session_cycles          (also which mappings grew, from /proc/<pid>/smaps)
 */
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { promisify } from 'node:util';
import { ReceivingPeer } from '../test/helpers/peer.ts';
import { SseClient } from '../test/helpers/sse.ts';
import { parsePrometheusText, sampleValue } from '../test/helpers/prometheus-text.ts';
import { startBenchService, startScriptEnv } from './service.ts';
import { avatarFor, getJson, round } from './session-load.ts';
import { loadAverage, openFds, sampleTree } from './proc.ts';
import { type Mapping, mappingsThatGrew, readSmaps, smapsGrowth } from './smaps.ts';

const CYCLES = Number(process.env.BENCH_CYCLES ?? 1000);
const CONCURRENCY = Number(process.env.BENCH_CYCLE_CONCURRENCY ?? 3);
/** Connect a wrtc receiver in every k-th cycle (1 = all): WebRTC is where native memory could leak. */
const PEER_EVERY = Number(process.env.BENCH_CYCLE_PEER_EVERY ?? 1);
/** Readings every 100 cycles (every tenth of the run when it is shorter than 1000). */
const SAMPLE_EVERY = Math.max(1, Math.min(100, Math.floor(CYCLES / 10)));
/** After each batch: the last sessions' teardown (peer close, SSE end) finishes before the reading. */
const SETTLE_MS = 1_000;
const RSS_READINGS = 5;
/** Between the RSS readings of one sample: long enough for a background thread's burst to show as an outlier. */
const RSS_READING_GAP_MS = 500;
/**
 * Opt-in: after the RSS readings, gdb calls glibc's malloc_stats() in the service, which prints bytes the allocator
 * holds from the system and bytes in use (all arenas and mmapped chunks). In-use climbing is a native leak;
 * held-from-system climbing with in-use flat is the allocator keeping freed memory. Pauses the service briefly.
 */
const MALLOC_STATS = process.env.BENCH_CYCLE_MALLOC_STATS === '1';
/** Opt-in: the service's smaps at every reading; the result says which kinds of mapping grew, per half of the run. */
const SMAPS = process.env.BENCH_CYCLE_SMAPS === '1';
/** gdb attaches and calls in well under a second (--readnever skips node's debug info); more is a stuck attach. */
const GDB_TIMEOUT_MS = 30_000;
/** malloc_stats() has written to the service's stderr when gdb returns; the bench reads that pipe within this. */
const MALLOC_STATS_SETTLE_MS = 300;
/** The key under which Node's bundled undici keeps the dispatcher that the global `fetch` uses. */
const GLOBAL_DISPATCHER = Symbol.for('undici.globalDispatcher.1');
/** The service closes a socket within milliseconds of the client's FIN; this leaves room on a loaded machine. */
const CONNECTIONS_CLOSE_MS = 200;

/**
 * Closes the bench's idle keep-alive connections to the service and starts a fresh connection pool, so the fd count
 * at a reading does not depend on how many connections the client happens to keep open (it varied by ±2 between
 * readings, which the "≤ 2 fds more" criterion cannot tell from a leak). Node's `fetch` has no public call for this;
 * the dispatcher's own class makes the new pool, so no second copy of undici is needed.
 */
async function closeClientConnections(): Promise<void> {
  const holder = globalThis as Record<symbol, { close(): Promise<void>; constructor: new () => unknown } | undefined>;
  const dispatcher = holder[GLOBAL_DISPATCHER];
  if (!dispatcher) return;
  holder[GLOBAL_DISPATCHER] = new dispatcher.constructor() as typeof dispatcher;
  await dispatcher.close();
  await new Promise((r) => setTimeout(r, CONNECTIONS_CLOSE_MS));
}

/** "No growth": what allocator and heap noise may move RSS by over 1000 cycles. */
export const GROWTH_TOLERANCE_MB_PER_1000 = 10;

export interface CycleSample {
  cycles: number;
  service_rss_mb: number;
  tree_rss_mb: number;
  fds: number;
  threads: number;
  live_sessions: number;
  /** The render pool's reused frame buffers (`avatar_frame_buffers_*`): lent now, and kept free (their sum is what it made). */
  frame_buffers_outstanding: number;
  frame_buffers_free: number;
  /** V8 heap in use after the forced GC (live JS objects). */
  heap_used_mb: number;
  heap_total_mb: number;
  /** Of heap_total_mb: committed new space (young generation; grows with the allocation rate) and old space. */
  new_space_mb: number;
  old_space_mb: number;
  /** V8's heap pages that are resident, and what V8 holds from malloc itself. */
  heap_physical_mb: number;
  v8_malloced_mb: number;
  /** Memory of C++ objects bound to JS (Buffers, ArrayBuffers, native wrappers), incl. array_buffers_mb. */
  external_mb: number;
  array_buffers_mb: number;
  /** V8 heaps of the worker threads (render pool and the like) after their own full GC, summed. */
  worker_heap_used_mb: number;
  worker_heap_total_mb: number;
  workers: number;
  /** Live libuv handles and requests (sockets, timers, fs requests...), summed over types. */
  handles: number;
  /** Resident anonymous memory (heaps, stacks, malloc arenas) and file-backed pages (code of node and libraries). */
  rss_anon_mb: number;
  rss_file_mb: number;
  /**
   * Anonymous RSS that is not a V8 heap (rss_anon_mb minus the main thread's resident heap and the workers' heaps):
   * malloc's arenas and mmapped blocks, thread stacks, V8's pooled pages and code outside the heap. Splits an RSS
   * climb into "the JS heap grew" and "native memory grew".
   */
  outside_v8_mb: number;
  /** With BENCH_CYCLE_MALLOC_STATS=1: glibc's bytes held from the system and in use, all arenas plus mmapped chunks. */
  malloc_system_mb?: number;
  malloc_in_use_mb?: number;
  malloc_arenas?: number;
  elapsed_s: number;
}

/** Numeric fields of /proc/<pid>/status by name (`Threads`, `RssAnon` in kB, ...); NaN when the process or field is gone. */
function statusFields<K extends string>(pid: number, names: readonly K[]): Record<K, number> {
  let status = '';
  try {
    status = readFileSync(`/proc/${pid}/status`, 'utf8');
  } catch {
    // Reported as NaN below, like a missing field.
  }
  const fields = {} as Record<K, number>;
  for (const name of names) fields[name] = Number(new RegExp(`^${name}:\\s+(\\d+)`, 'm').exec(status)?.[1] ?? NaN);
  return fields;
}

function threadsOf(pid: number): number {
  return statusFields(pid, ['Threads']).Threads;
}

/** RssAnon and RssFile of /proc/<pid>/status, in bytes. */
function residentKinds(pid: number): { anon: number; file: number } {
  const kb = statusFields(pid, ['RssAnon', 'RssFile']);
  return { anon: kb.RssAnon * 1024, file: kb.RssFile * 1024 };
}

interface MallocTotals {
  systemBytes: number;
  inUseBytes: number;
  arenas: number;
}

/** The last complete malloc_stats() report in `output` (arenas listed, then "Total (incl. mmap):"). */
export function lastMallocStats(output: string): MallocTotals | null {
  const totalAt = output.lastIndexOf('Total (incl. mmap):');
  if (totalAt < 0) return null;
  const total = /system bytes\s+=\s+(\d+)\s+in use bytes\s+=\s+(\d+)\s+max mmap regions/.exec(output.slice(totalAt));
  if (!total) return null;
  const before = output.slice(0, totalAt);
  const reportStart = before.lastIndexOf('Arena 0:');
  const arenas = reportStart < 0 ? NaN : (before.slice(reportStart).match(/^Arena \d+:/gm) ?? []).length;
  return { systemBytes: Number(total[1]), inUseBytes: Number(total[2]), arenas };
}

async function mallocStatsOf(pid: number, logs: () => string): Promise<MallocTotals | null> {
  try {
    await promisify(execFile)(
      'gdb',
      ['--readnever', '-nx', '-batch', '-p', String(pid), '-ex', 'call (void)malloc_stats()'],
      {
        timeout: GDB_TIMEOUT_MS,
      },
    );
  } catch (error) {
    console.log(`  malloc_stats via gdb failed: ${(error as Error).message.split('\n')[0]}`);
    return null;
  }
  // The call has returned, so the report is in the pipe; the bench's loop reads it within a few turns.
  await new Promise((r) => setTimeout(r, MALLOC_STATS_SETTLE_MS));
  return lastMallocStats(logs());
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
  const smaps = new Map<number, Mapping[]>();
  let done = 0;
  let failures = 0;
  let lastError = '';
  try {
    const avatar = await avatarFor(baseUrl, 'rt');
    const sample = async () => {
      // No idle client connection in the fd count, then a full GC (SIGUSR2), then the median of a few readings
      // half a second apart.
      await closeClientConnections();
      const afterGc = await service.collectGarbage();
      const readings = [];
      const kinds = [];
      for (let i = 0; i < RSS_READINGS; i++) {
        if (i > 0) await new Promise((r) => setTimeout(r, RSS_READING_GAP_MS));
        readings.push(sampleTree(pid));
        kinds.push(residentKinds(pid));
      }
      const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];
      const tree = { rootRss: median(readings.map((x) => x.rootRss)), treeRss: median(readings.map((x) => x.treeRss)) };
      const anon = median(kinds.map((k) => k.anon));
      const workersHeapTotal = afterGc ? afterGc.workers.reduce((a, w) => a + w.heapTotal, 0) : NaN;
      if (SMAPS) smaps.set(done, readSmaps(pid));
      const malloc = MALLOC_STATS ? await mallocStatsOf(pid, service.logs) : null;
      const metrics = await getJson<{ sessions: { live: number } }>(baseUrl, '/metrics');
      const prometheus = parsePrometheusText(await (await fetch(`${baseUrl}/metrics`)).text());
      const gauge = (name: string) => sampleValue(prometheus, name) ?? NaN;
      const s: CycleSample = {
        cycles: done,
        service_rss_mb: round(tree.rootRss / 1e6, 1),
        tree_rss_mb: round(tree.treeRss / 1e6, 1),
        fds: openFds(pid),
        threads: threadsOf(pid),
        live_sessions: metrics.sessions.live,
        frame_buffers_outstanding: gauge('avatar_frame_buffers_outstanding'),
        frame_buffers_free: gauge('avatar_frame_buffers_free'),
        heap_used_mb: afterGc ? round(afterGc.heapUsed / 1e6, 1) : NaN,
        heap_total_mb: afterGc ? round(afterGc.heapTotal / 1e6, 1) : NaN,
        new_space_mb: round((afterGc?.spaces?.new_space ?? NaN) / 1e6, 1),
        old_space_mb: round((afterGc?.spaces?.old_space ?? NaN) / 1e6, 1),
        heap_physical_mb: round((afterGc?.heapPhysical ?? NaN) / 1e6, 1),
        v8_malloced_mb: round((afterGc?.mallocedByV8 ?? NaN) / 1e6, 1),
        external_mb: afterGc ? round(afterGc.external / 1e6, 1) : NaN,
        array_buffers_mb: afterGc ? round(afterGc.arrayBuffers / 1e6, 1) : NaN,
        worker_heap_used_mb: afterGc ? round(afterGc.workers.reduce((a, w) => a + w.heapUsed, 0) / 1e6, 1) : NaN,
        worker_heap_total_mb: round(workersHeapTotal / 1e6, 1),
        workers: afterGc ? afterGc.workers.length : NaN,
        handles: afterGc ? Object.values(afterGc.resources).reduce((a, b) => a + b, 0) : NaN,
        rss_anon_mb: round(anon / 1e6, 1),
        rss_file_mb: round(median(kinds.map((k) => k.file)) / 1e6, 1),
        outside_v8_mb: round((anon - (afterGc?.heapPhysical ?? NaN) - workersHeapTotal) / 1e6, 1),
        ...(malloc && {
          malloc_system_mb: round(malloc.systemBytes / 1e6, 1),
          malloc_in_use_mb: round(malloc.inUseBytes / 1e6, 1),
          malloc_arenas: malloc.arenas,
        }),
        elapsed_s: round((performance.now() - started) / 1000, 1),
      };
      samples.push(s);
      const mallocText =
        s.malloc_in_use_mb === undefined
          ? ''
          : `, malloc in use ${s.malloc_in_use_mb} of ${s.malloc_system_mb} MB (${s.malloc_arenas} arenas)`;
      console.log(
        `  ${s.cycles} cycles: rss ${s.service_rss_mb} MB (anon ${s.rss_anon_mb}, file ${s.rss_file_mb}; tree ${s.tree_rss_mb} MB)${mallocText}, heap used ${s.heap_used_mb} MB ` +
          `(total ${s.heap_total_mb}: new ${s.new_space_mb}, old ${s.old_space_mb}; resident ${s.heap_physical_mb}; V8 malloc ${s.v8_malloced_mb}), external ${s.external_mb} MB (arrayBuffers ${s.array_buffers_mb}), ` +
          `${s.workers} workers' heap used ${s.worker_heap_used_mb} MB (total ${s.worker_heap_total_mb}), ${s.handles} handles, ` +
          `outside V8 ${s.outside_v8_mb} MB, ${s.fds} fds, ${s.threads} threads, ${s.live_sessions} live, frame buffers ${s.frame_buffers_outstanding} lent + ${s.frame_buffers_free} free, ${s.elapsed_s} s, load ${loadAverage()[0]}`,
      );
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
    // The glibc malloc settings the service ran with (from `npm start`'s script or the bench's own environment),
    // so runs compare like for like.
    service_malloc_env: Object.fromEntries(
      Object.entries({ ...process.env, ...startScriptEnv() }).filter(([name]) => name.startsWith('MALLOC_')),
    ),
    failures,
    last_error: lastError || undefined,
    seconds: round((performance.now() - started) / 1000, 1),
    ...cycleGrowth(samples),
    ...(SMAPS && smapsReport(samples, smaps)),
    load_average: loadAverage(),
    samples,
  };
}

/** Which kinds of mapping grew from the first reading after warm-up to halfway, and from halfway to the last. */
function smapsReport(samples: CycleSample[], smaps: Map<number, Mapping[]>): Record<string, unknown> {
  const { warm_at_cycles: warm, halfway_at_cycles: halfway } = cycleGrowth(samples);
  const last = samples[samples.length - 1].cycles;
  const at = (cycles: number) => smaps.get(cycles) ?? [];
  const report = {
    smaps_first_half: smapsGrowth(at(warm), at(halfway)),
    smaps_second_half: smapsGrowth(at(halfway), at(last)),
    smaps_mappings_grown_second_half: mappingsThatGrew(at(halfway), at(last)),
  };
  console.log(
    '  smaps, second half:',
    JSON.stringify(report.smaps_second_half),
    JSON.stringify(report.smaps_mappings_grown_second_half),
  );
  return report;
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
  const afterWarm = samples.filter((s) => s.cycles >= warm.cycles);
  const secondHalf = samples.filter((s) => s.cycles >= halfway.cycles);
  // The same slopes for the service's own figures: if RSS climbs while these stay flat, nothing JS-visible is retained.
  type Figure =
    | 'heap_used_mb'
    | 'heap_total_mb'
    | 'new_space_mb'
    | 'old_space_mb'
    | 'heap_physical_mb'
    | 'v8_malloced_mb'
    | 'worker_heap_used_mb'
    | 'worker_heap_total_mb'
    | 'external_mb'
    | 'array_buffers_mb';
  type OtherFigure =
    | 'handles'
    | 'rss_anon_mb'
    | 'rss_file_mb'
    | 'outside_v8_mb'
    | 'malloc_in_use_mb'
    | 'malloc_system_mb';
  const slopes = (key: Figure | OtherFigure) => ({
    [`${key}_growth_after_warm`]: round((last[key] ?? NaN) - (warm[key] ?? NaN), 1),
    [`${key}_slope_per_1000_cycles`]: slopePer1000(afterWarm, (s) => s[key] ?? NaN),
    [`${key}_slope_per_1000_cycles_second_half`]: slopePer1000(secondHalf, (s) => s[key] ?? NaN),
  });
  return {
    rss_mb_growth_after_warm: round(last.service_rss_mb - warm.service_rss_mb, 1),
    tree_rss_mb_growth_after_warm: round(last.tree_rss_mb - warm.tree_rss_mb, 1),
    rss_mb_slope_per_1000_cycles: slopePer1000(afterWarm, (s) => s.service_rss_mb),
    rss_mb_growth_second_half: round(last.service_rss_mb - halfway.service_rss_mb, 1),
    rss_mb_slope_per_1000_cycles_second_half: slopePer1000(secondHalf, (s) => s.service_rss_mb),
    ...slopes('heap_used_mb'),
    ...slopes('heap_total_mb'),
    ...slopes('new_space_mb'),
    ...slopes('old_space_mb'),
    ...slopes('heap_physical_mb'),
    ...slopes('v8_malloced_mb'),
    ...slopes('worker_heap_used_mb'),
    ...slopes('worker_heap_total_mb'),
    ...slopes('external_mb'),
    ...slopes('array_buffers_mb'),
    ...slopes('handles'),
    ...slopes('rss_anon_mb'),
    ...slopes('rss_file_mb'),
    ...slopes('outside_v8_mb'),
    ...(last.malloc_in_use_mb !== undefined && { ...slopes('malloc_in_use_mb'), ...slopes('malloc_system_mb') }),
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
