/**
 * The memory readings the session_cycles bench judges growth by (bench/gc-on-signal.mjs, bench/service.ts,
 * bench/session-cycles.ts): the preload's report after a forced GC, including worker threads; glibc's
 * malloc_stats() report; and the allocator setting `npm start` gives the service, which the bench applies too.
 */
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { startScriptEnv, type MemoryAfterGc } from '../bench/service.ts';
import { lastMallocStats } from '../bench/session-cycles.ts';
import { mappingsThatGrew, parseSmaps, readSmaps, smapsGrowth } from '../bench/smaps.ts';

const ROOT = path.resolve(import.meta.dirname, '..');
const GC_ON_SIGNAL = path.join(ROOT, 'bench', 'gc-on-signal.mjs');
/** A bare node process with the preload starts in well under a second; this is a hang. */
const CHILD_TIMEOUT_MS = 20_000;

/**
 * A process with one worker thread holding ~20 MB of live objects; SIGUSR2 once the worker is up. The worker is
 * loaded from a URL, as the service's pools load theirs from files: eval workers do not run --import preloads.
 */
const WORKER = `import { parentPort } from 'node:worker_threads';
globalThis.kept = Array.from({ length: 100000 }, (_, i) => ({ i, s: 'x'.repeat(40) + i }));
parentPort.postMessage('ready');
setInterval(() => {}, 1000);`;
const PROGRAM = `import { Worker } from 'node:worker_threads';
const worker = new Worker(new URL(${JSON.stringify(`data:text/javascript,${encodeURIComponent(WORKER)}`)}));
worker.once('message', () => process.kill(process.pid, 'SIGUSR2'));`;

/** Runs PROGRAM with the preload, resolves to the report line it wrote to stderr, then ends the child. */
function reportOfChild(): Promise<MemoryAfterGc> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', GC_ON_SIGNAL, '--input-type=module', '-e', PROGRAM], {
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let stderr = '';
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`no report within ${CHILD_TIMEOUT_MS} ms: ${stderr}`));
    }, CHILD_TIMEOUT_MS);
    child.stderr!.on('data', (chunk: Buffer) => {
      stderr += chunk.toString('utf8');
      const line = stderr
        .split('\n')
        .slice(0, -1)
        .find((l) => l.startsWith('{"bench_memory_after_gc":'));
      if (!line) return;
      clearTimeout(timer);
      child.kill('SIGKILL');
      resolve((JSON.parse(line) as { bench_memory_after_gc: MemoryAfterGc }).bench_memory_after_gc);
    });
    child.once('error', reject);
  });
}

describe('bench memory readings', () => {
  it('SIGUSR2 reports the main thread after a full GC, and the heap of a worker thread that loaded the preload', async () => {
    const report = await reportOfChild();
    expect(report.sequence).toBe(1);
    for (const key of ['rss', 'heapUsed', 'heapTotal', 'external', 'arrayBuffers'] as const)
      expect(report[key]).toBeGreaterThan(0);
    expect(report.heapUsed).toBeLessThanOrEqual(report.heapTotal);
    // V8's own split: committed spaces add up to the heap total; the resident part cannot exceed it.
    expect(report.spaces.new_space).toBeGreaterThan(0);
    expect(report.spaces.old_space).toBeGreaterThan(0);
    expect(Object.values(report.spaces).reduce((a, b) => a + b, 0)).toBe(report.heapTotal);
    expect(report.heapPhysical).toBeGreaterThan(0);
    expect(report.heapPhysical).toBeLessThanOrEqual(report.heapTotal);
    expect(report.workers).toHaveLength(1);
    // The worker keeps ~100k small objects alive: its heap, not the main thread's, holds them.
    expect(report.workers[0].heapUsed).toBeGreaterThan(10e6);
    expect(report.heapUsed).toBeLessThan(10e6);
    expect(report.workers[0].threadId).toBeGreaterThan(0);
  });

  it('reads the totals and the arena count of the last complete malloc_stats() report', () => {
    const report = (arenas: number, system: number, inUse: number) =>
      [
        ...Array.from(
          { length: arenas },
          (_, i) => `Arena ${i}:\nsystem bytes     =    1000000\nin use bytes     =     500000`,
        ),
        'Total (incl. mmap):',
        `system bytes     = ${String(system).padStart(10)}`,
        `in use bytes     = ${String(inUse).padStart(10)}`,
        'max mmap regions =          3',
        'max mmap bytes   =    4194304',
      ].join('\n');
    const logs = `{"level":40}\n${report(2, 5_000_000, 3_000_000)}\n{"level":40}\n${report(16, 60_200_000, 35_300_000)}\n`;
    expect(lastMallocStats(logs)).toEqual({ systemBytes: 60_200_000, inUseBytes: 35_300_000, arenas: 16 });
    // A report cut off before its totals end is not read as one.
    expect(
      lastMallocStats('Arena 0:\nsystem bytes = 1\nin use bytes = 1\nTotal (incl. mmap):\nsystem bytes     =   5'),
    ).toBeNull();
    expect(lastMallocStats('no report')).toBeNull();
  });

  it('places RSS growth in the kinds of mapping and the mappings that grew, from two smaps readings', () => {
    const entry = (start: number, sizeKb: number, name: string, rssKb: number) =>
      `${start.toString(16)}-${(start + sizeKb * 1024).toString(16)} rw-p 00000000 00:00 0 ${name}\nSize: ${sizeKb} kB\nRss: ${rssKb} kB\nAnonymous: ${rssKb} kB\n`;
    const v8Page = 0x10000000;
    const arena = 0x7f0000000000;
    const before = parseSmaps(
      entry(v8Page, 256, '', 8) + entry(arena, 4096, '', 1000) + entry(0x400000, 7612, '/usr/bin/node', 7000),
    );
    const after = parseSmaps(
      entry(v8Page, 256, '', 256) +
        entry(v8Page + 0x40000, 256, '', 256) +
        entry(arena, 4096, '', 1000) +
        entry(0x400000, 7612, '/usr/bin/node', 7000),
    );
    expect(before[2]).toMatchObject({ name: '/usr/bin/node', perms: 'rw-p', rssKb: 7000 });
    // One 256 KiB page became resident and another appeared; the arena and the binary did not move.
    expect(smapsGrowth(before, after)).toEqual([
      { kind: 'anon rw-p 256K', mappings: [1, 2], rss_kb: [8, 512], rss_delta_kb: 504 },
    ]);
    expect(mappingsThatGrew(before, after)).toEqual([
      { start: v8Page.toString(16), size_kb: 256, kind: 'anon rw-p 256K', rss_kb: [8, 256] },
    ]);
    // The real file of this process parses, and its resident total matches what the kernel reports.
    const own = readSmaps(process.pid);
    const status = /^VmRSS:\s+(\d+)/m.exec(readFileSync('/proc/self/status', 'utf8'));
    const total = own.reduce((a, m) => a + m.rssKb, 0);
    expect(own.length).toBeGreaterThan(10);
    expect(Math.abs(total - Number(status![1]))).toBeLessThan(Number(status![1]) * 0.1);
  });

  it("`npm start` fixes glibc's mmap threshold, and the bench runs its service with the same setting", () => {
    const previous = process.env.MALLOC_MMAP_THRESHOLD_;
    delete process.env.MALLOC_MMAP_THRESHOLD_;
    try {
      expect(startScriptEnv(ROOT)).toEqual({ MALLOC_MMAP_THRESHOLD_: '131072' });
      // A value in the environment wins, as the script's ${NAME:-default} does.
      process.env.MALLOC_MMAP_THRESHOLD_ = '262144';
      expect(startScriptEnv(ROOT)).toEqual({ MALLOC_MMAP_THRESHOLD_: '262144' });
    } finally {
      if (previous === undefined) delete process.env.MALLOC_MMAP_THRESHOLD_;
      else process.env.MALLOC_MMAP_THRESHOLD_ = previous;
    }
  });
});
