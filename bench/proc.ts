/**
 * What the benchmarks read about another process from `/proc` (Linux): CPU time of a process and all its
 * descendants (the built-in TTS engines run in child processes), CPU per thread grouped by thread name
 * (libwebrtc, V8 and libuv name their threads, so native time such as VP8 encoding shows up here even
 * though a JS profile cannot see it), resident memory and open descriptors.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync, readdirSync } from 'node:fs';
import os from 'node:os';

/** Clock ticks per second of utime/stime in /proc/<pid>/stat (USER_HZ; 100 on every common Linux). */
export const CLK_TCK = (() => {
  try {
    return Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
  } catch {
    return 100;
  }
})();
const TICK_MS = 1000 / CLK_TCK;

interface StatFields {
  pid: number;
  comm: string;
  ppid: number;
  /** utime + stime, ms */
  cpuMs: number;
  /** cutime + cstime (children that exited and were waited for), ms */
  childrenCpuMs: number;
  rssPages: number;
}

/** Parses /proc/<pid>/stat or /proc/<pid>/task/<tid>/stat; the command name may contain spaces and parentheses. */
function readStat(file: string): StatFields | null {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch {
    return null;
  }
  const open = text.indexOf('(');
  const close = text.lastIndexOf(')');
  const rest = text.slice(close + 2).split(' ');
  // rest[0] is field 3 (state); field n is rest[n - 3].
  const field = (n: number) => Number(rest[n - 3]);
  return {
    pid: Number(text.slice(0, open).trim()),
    comm: text.slice(open + 1, close),
    ppid: field(4),
    cpuMs: (field(14) + field(15)) * TICK_MS,
    childrenCpuMs: (field(16) + field(17)) * TICK_MS,
    rssPages: field(24),
  };
}

const PAGE_SIZE = (() => {
  try {
    return Number(execFileSync('getconf', ['PAGESIZE'], { encoding: 'utf8' }).trim()) || 4096;
  } catch {
    return 4096;
  }
})();

/** `pid` and every live descendant (scans /proc once and follows parent links). */
export function processTree(pid: number): number[] {
  const children = new Map<number, number[]>();
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const stat = readStat(`/proc/${name}/stat`);
    if (!stat) continue;
    const list = children.get(stat.ppid) ?? [];
    list.push(stat.pid);
    children.set(stat.ppid, list);
  }
  const out: number[] = [];
  const stack = [pid];
  while (stack.length > 0) {
    const next = stack.pop()!;
    out.push(next);
    stack.push(...(children.get(next) ?? []));
  }
  return out;
}

export interface TreeSample {
  /** performance.now() of the reading */
  at: number;
  /** CPU of the root and live descendants, plus descendants that already exited (root's cutime/cstime), ms */
  cpuMs: number;
  /** CPU of the root process alone (all its threads), ms */
  rootCpuMs: number;
  /** Resident set of the root process, bytes */
  rootRss: number;
  /** Resident set of root + live descendants, bytes (shared pages counted once per process) */
  treeRss: number;
  /** Per process of the tree: its command name → CPU ms (for the engine processes' share) */
  byProcess: Record<string, number>;
  processes: number;
}

/** One reading of a process tree's CPU and memory. Differences between two readings give the CPU of a window. */
export function sampleTree(pid: number): TreeSample {
  const at = performance.now();
  let cpuMs = 0;
  let rootCpuMs = 0;
  let rootRss = 0;
  let treeRss = 0;
  const byProcess: Record<string, number> = {};
  const pids = processTree(pid);
  for (const member of pids) {
    const stat = readStat(`/proc/${member}/stat`);
    if (!stat) continue;
    const own = stat.cpuMs + (member === pid ? stat.childrenCpuMs : 0);
    cpuMs += own;
    const key = member === pid ? 'service' : `child ${stat.comm}`;
    byProcess[key] = (byProcess[key] ?? 0) + own;
    treeRss += stat.rssPages * PAGE_SIZE;
    if (member === pid) {
      rootCpuMs = stat.cpuMs;
      rootRss = stat.rssPages * PAGE_SIZE;
    }
  }
  return { at, cpuMs, rootCpuMs, rootRss, treeRss, byProcess, processes: pids.length };
}

/** CPU ms of every thread of `pid` (live threads only), keyed by `<name>` with a counter for repeated names. */
export function threadCpu(pid: number): Map<number, { name: string; cpuMs: number }> {
  const out = new Map<number, { name: string; cpuMs: number }>();
  let tids: string[];
  try {
    tids = readdirSync(`/proc/${pid}/task`);
  } catch {
    return out;
  }
  for (const tid of tids) {
    const stat = readStat(`/proc/${pid}/task/${tid}/stat`);
    if (stat) out.set(Number(tid), { name: stat.comm, cpuMs: stat.cpuMs });
  }
  return out;
}

/**
 * CPU spent per thread between two `threadCpu` readings, summed by thread name. The main thread is
 * named after the process (`node`, reported as `main (JS event loop)`); threads born inside the window
 * count from zero, threads that died inside it are lost (their time stays in the process total).
 */
export function threadCpuDelta(
  pid: number,
  before: Map<number, { name: string; cpuMs: number }>,
  after: Map<number, { name: string; cpuMs: number }>,
): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [tid, { name, cpuMs }] of after) {
    const delta = cpuMs - (before.get(tid)?.cpuMs ?? 0);
    // Node 20 leaves its own threads (worker threads, V8 platform workers, libuv pool) named after the process.
    const key = tid === pid ? 'main (JS event loop)' : name === 'node' ? `node thread ${tid}` : name;
    out[key] = (out[key] ?? 0) + delta;
  }
  return out;
}

export function openFds(pid: number): number {
  try {
    return readdirSync(`/proc/${pid}/fd`).length;
  } catch {
    return NaN;
  }
}

/**
 * Time the hypervisor ran someone else on our virtual CPUs (`steal` in /proc/stat), ms summed over all CPUs since
 * boot. A window's share of it says whether late frames came from the host rather than from us: this VM's speed
 * moves between days and within a run.
 */
export function hostStealMs(): number {
  try {
    const fields = readFileSync('/proc/stat', 'utf8').split('\n', 1)[0].trim().split(/\s+/);
    return Number(fields[8] ?? 0) * TICK_MS;
  } catch {
    return NaN;
  }
}

/** The 1/5/15-minute load averages, for the record next to every CPU figure (others share these cores). */
export function loadAverage(): [number, number, number] {
  const [a, b, c] = os.loadavg();
  return [round2(a), round2(b), round2(c)];
}

const round2 = (v: number) => Math.round(v * 100) / 100;
