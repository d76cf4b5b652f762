/**
 * The service as a separate process for the benchmarks, so its CPU and memory can be read from `/proc`
 * without counting the bench's own wrtc receivers.
 *
 * Without extra node flags this is `startServiceProcess` from the test helpers (the same command line as
 * the process tests). Flags such as `--cpu-prof` cannot go through NODE_OPTIONS (node refuses them there),
 * so a profiled service (or one run from another checkout, BENCH_SERVICE_DIR) is spawned here with the same
 * command line plus those flags; everything else (temp data dir, temp copy of avatars/, TMPDIR, the stdin
 * watchdog) mirrors the helper.
 */
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { freePort, startServiceProcess, type ServiceExit } from '../test/helpers/service-process.ts';

const REPO_ROOT = path.resolve(import.meta.dirname, '..');
const WATCHDOG = path.join(REPO_ROOT, 'test', 'helpers', 'parent-watchdog.mjs');
/** SIGUSR2 → full GC in the service (`collectGarbage`), loaded through NODE_OPTIONS so every launch path has it. */
const GC_ON_SIGNAL = path.join(REPO_ROOT, 'bench', 'gc-on-signal.mjs');
/** Start-up takes ~2-5 s on 2 busy cores (tsx transpile, LevelDB, render pool); 60 s is a hang. */
const READY_TIMEOUT_MS = 60_000;
/** The service bounds its graceful shutdown at 10 s; a profiled one also writes its profiles then. */
const STOP_TIMEOUT_MS = 20_000;

export interface BenchService {
  baseUrl: string;
  pid: number;
  /**
   * A full GC in the service's main thread, then a pause for it to finish (memory readings compare live data).
   * Resolves to the service's own memory figures taken right after that GC, or null if none arrived in time.
   */
  collectGarbage(): Promise<MemoryAfterGc | null>;
  /** SIGTERM and wait for the graceful exit (the moment node writes `--cpu-prof` profiles). */
  stop(): Promise<ServiceExit>;
  logs(): string;
}

export interface BenchServiceOptions {
  env?: Record<string, string>;
  /** Extra node flags before the entry point, e.g. `['--cpu-prof', '--cpu-prof-dir=…']`. */
  nodeArgs?: string[];
}

/**
 * Where the service is run from: this repository, or another checkout of it given by BENCH_SERVICE_DIR
 * (e.g. an export of the landed commit, `git archive HEAD | tar -x -C <dir>` with a node_modules link, to
 * measure "before" figures while the working tree is mid-change).
 */
export const SERVICE_ROOT = process.env.BENCH_SERVICE_DIR ? path.resolve(process.env.BENCH_SERVICE_DIR) : REPO_ROOT;

/**
 * The environment `npm start` gives the service: the leading `NAME=${NAME:-value}` (or `NAME=value`) assignments of
 * the checkout's start script, such as the allocator setting MALLOC_MMAP_THRESHOLD_ (docs/performance.md, "RSS over
 * 1000 cycles"). The bench launches node directly, so it applies them itself to measure the service as deployed; a
 * value already in the bench's environment wins, as `:-` does. BENCH_START_SCRIPT_ENV=0 leaves them out (the
 * allocator's defaults, for a before/after comparison).
 */
export function startScriptEnv(root = SERVICE_ROOT): Record<string, string> {
  if (process.env.BENCH_START_SCRIPT_ENV === '0') return {};
  let script = '';
  try {
    script =
      (JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8')) as { scripts?: { start?: string } }).scripts
        ?.start ?? '';
  } catch {
    return {};
  }
  const env: Record<string, string> = {};
  const assignment = /^([A-Za-z_][A-Za-z0-9_]*)=(?:\$\{\1:-([^}\s]*)\}|([^\s$]*))\s+/;
  for (let match = assignment.exec(script); match; match = assignment.exec(script)) {
    env[match[1]] = process.env[match[1]] ?? match[2] ?? match[3];
    script = script.slice(match[0].length);
  }
  return env;
}

/** Defaults every bench service gets: quiet logs, a session limit above what any step opens, `npm start`'s environment. */
const BENCH_ENV: Record<string, string> = {
  SERVICE_MAX_SESSIONS: '12',
  SERVICE_LOG_LEVEL: 'warn',
  // Also reaches the TTS engine processes (harmless there: a SIGUSR2 handler nobody signals).
  NODE_OPTIONS: [process.env.NODE_OPTIONS, `--import=${GC_ON_SIGNAL}`].filter(Boolean).join(' '),
  ...startScriptEnv(),
};

export async function startBenchService(options: BenchServiceOptions = {}): Promise<BenchService> {
  const env = { ...BENCH_ENV, ...options.env };
  if (!options.nodeArgs?.length && SERVICE_ROOT === REPO_ROOT) {
    // SERVICE_RENDER_THREADS: the helper pins 1; the bench keeps the service's own default unless told.
    const service = await startServiceProcess({ env: { SERVICE_RENDER_THREADS: '0', ...env } });
    const stop = async () => {
      const exit = await service.stop();
      for (const dir of [service.dataDir, service.avatarsDir, service.tmpDir])
        await fs.rm(dir, { recursive: true, force: true });
      return exit;
    };
    const logs = () => service.logs();
    return {
      baseUrl: service.baseUrl,
      pid: service.pid,
      stop,
      logs,
      collectGarbage: garbageCollector(service.pid, logs),
    };
  }
  return spawnWithFlags(options.nodeArgs ?? [], env);
}

/** Lets a GC that SIGUSR2 started finish (a full GC of the service's ~30-40 MB heap takes tens of ms). */
const GC_SETTLE_MS = 300;
/**
 * The report comes ~1 s after the signal (GCs, then the workers' replies, bench/gc-on-signal.mjs); a busy event loop
 * (sessions speaking, load 6+) may run the handler late. Past this the reading is dropped.
 */
const GC_REPORT_TIMEOUT_MS = 10_000;
/** How often the output tail is checked for that report while waiting for it. */
const GC_REPORT_POLL_MS = 50;
/** The line bench/gc-on-signal.mjs writes to stderr after each forced GC. */
const MEMORY_MARKER = '{"bench_memory_after_gc":';

/**
 * `process.memoryUsage()` of the service's main thread right after a full GC, its libuv handles by type, and the
 * V8 heap of each worker thread that answered (render, inference, face pools) after its own full GC.
 */
export interface MemoryAfterGc {
  sequence: number;
  rss: number;
  heapTotal: number;
  heapUsed: number;
  external: number;
  arrayBuffers: number;
  /** V8's heap pages that are resident (total_physical_size), and what V8 itself holds from malloc (zones, tables). */
  heapPhysical: number;
  mallocedByV8: number;
  /** Committed bytes per V8 space (`new_space`, `old_space`, `code_space`, `large_object_space`, ...). */
  spaces: Record<string, number>;
  resources: Record<string, number>;
  workers: { threadId: number; heapUsed: number; heapTotal: number; external: number }[];
}

/** The newest memory line in the service's output tail, if any. */
function lastMemoryReport(logs: string): MemoryAfterGc | null {
  const at = logs.lastIndexOf(MEMORY_MARKER);
  if (at < 0) return null;
  const end = logs.indexOf('\n', at);
  if (end < 0) return null; // still being written
  try {
    return (JSON.parse(logs.slice(at, end)) as { bench_memory_after_gc: MemoryAfterGc }).bench_memory_after_gc;
  } catch {
    return null;
  }
}

function garbageCollector(pid: number, logs: () => string): () => Promise<MemoryAfterGc | null> {
  let lastSequence = 0;
  return async () => {
    try {
      process.kill(pid, 'SIGUSR2');
    } catch {
      return null;
    }
    await new Promise((r) => setTimeout(r, GC_SETTLE_MS));
    const deadline = Date.now() + GC_REPORT_TIMEOUT_MS;
    for (;;) {
      const report = lastMemoryReport(logs());
      if (report && report.sequence > lastSequence) {
        lastSequence = report.sequence;
        return report;
      }
      if (Date.now() > deadline) return null;
      await new Promise((r) => setTimeout(r, GC_REPORT_POLL_MS));
    }
  };
}

async function spawnWithFlags(nodeArgs: string[], env: Record<string, string>): Promise<BenchService> {
  const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'bench-svc-data-'));
  const avatarsDir = await fs.mkdtemp(path.join(os.tmpdir(), 'bench-svc-avatars-'));
  const tmpDir = await fs.mkdtemp(path.join(os.tmpdir(), 'bench-svc-tmp-'));
  const repoAvatars = path.join(SERVICE_ROOT, 'avatars');
  const skip = (name: string) => name.startsWith('.') || name.startsWith('custom-');
  await fs.cp(repoAvatars, avatarsDir, {
    recursive: true,
    filter: (src) => src === repoAvatars || !skip(path.basename(src)),
  });
  const port = await freePort();
  const baseUrl = `http://127.0.0.1:${port}`;
  const child = spawn(
    process.execPath,
    ['--no-turbo-fast-api-calls', ...nodeArgs, '--import', 'tsx', '--import', WATCHDOG, 'src/main.ts'],
    {
      cwd: SERVICE_ROOT,
      env: {
        ...process.env,
        SERVICE_HOST: '127.0.0.1',
        SERVICE_PORT: String(port),
        SERVICE_DATA_DIR: dataDir,
        SERVICE_AVATARS_DIR: avatarsDir,
        TMPDIR: tmpDir,
        SERVICE_RENDER_THREADS: '0',
        ...env,
      },
      stdio: ['pipe', 'pipe', 'pipe'],
    },
  );
  const killOnExit = () => child.kill('SIGKILL');
  process.on('exit', killOnExit);
  let tail = '';
  const keep = (chunk: Buffer) => {
    tail = (tail + chunk.toString('utf8')).slice(-64 * 1024);
  };
  child.stdout!.on('data', keep);
  child.stderr!.on('data', keep);
  child.stdin!.on('error', () => undefined);
  let status: ServiceExit | null = null;
  let stopRequested = false;
  const exited = new Promise<ServiceExit>((resolve) =>
    child.once('exit', (code, signal) => {
      status = { code, signal };
      process.off('exit', killOnExit);
      // A service that dies on its own while measured: its last lines say why (a bench client only sees a closed socket).
      if (!stopRequested)
        process.stderr.write(
          `bench service exited unexpectedly (${JSON.stringify(status)}); its last output:\n${tail.slice(-4000)}\n`,
        );
      resolve(status);
    }),
  );
  const cleanup = async () => {
    for (const dir of [dataDir, avatarsDir, tmpDir]) await fs.rm(dir, { recursive: true, force: true });
  };
  const deadline = Date.now() + READY_TIMEOUT_MS;
  for (;;) {
    try {
      const res = await fetch(`${baseUrl}/healthz`, { signal: AbortSignal.timeout(2_000) });
      await res.body?.cancel();
      if (res.ok) break;
    } catch {
      // not listening yet
    }
    if (status !== null || Date.now() > deadline) {
      child.kill('SIGKILL');
      await exited;
      await cleanup();
      throw new Error(`service did not start (${JSON.stringify(status)}):\n${tail}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  let stopping: Promise<ServiceExit> | null = null;
  return {
    baseUrl,
    pid: child.pid!,
    logs: () => tail,
    collectGarbage: garbageCollector(child.pid!, () => tail),
    stop: () => {
      stopRequested = true;
      stopping ??= (async () => {
        if (status === null) {
          child.kill('SIGTERM');
          const timer = setTimeout(() => child.kill('SIGKILL'), STOP_TIMEOUT_MS);
          await exited;
          clearTimeout(timer);
        }
        await cleanup();
        return status!;
      })();
      return stopping;
    },
  };
}
