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
  /** A full GC in the service's main thread, then a pause for it to finish (memory readings compare live data). */
  collectGarbage(): Promise<void>;
  /** SIGTERM and wait for the graceful exit (the moment node writes `--cpu-prof` profiles). */
  stop(): Promise<ServiceExit>;
  logs(): string;
}

export interface BenchServiceOptions {
  env?: Record<string, string>;
  /** Extra node flags before the entry point, e.g. `['--cpu-prof', '--cpu-prof-dir=…']`. */
  nodeArgs?: string[];
}

/** Defaults every bench service gets: quiet logs, a session limit above what any step opens. */
const BENCH_ENV: Record<string, string> = {
  SERVICE_MAX_SESSIONS: '12',
  SERVICE_LOG_LEVEL: 'warn',
  // Also reaches the TTS engine processes (harmless there: a SIGUSR2 handler nobody signals).
  NODE_OPTIONS: [process.env.NODE_OPTIONS, `--import=${GC_ON_SIGNAL}`].filter(Boolean).join(' '),
};

/**
 * Where the service is run from: this repository, or another checkout of it given by BENCH_SERVICE_DIR
 * (e.g. an export of the landed commit, `git archive HEAD | tar -x -C <dir>` with a node_modules link, to
 * measure "before" figures while the working tree is mid-change).
 */
export const SERVICE_ROOT = process.env.BENCH_SERVICE_DIR ? path.resolve(process.env.BENCH_SERVICE_DIR) : REPO_ROOT;

export async function startBenchService(options: BenchServiceOptions = {}): Promise<BenchService> {
  const env = { ...BENCH_ENV, ...options.env };
  if (!options.nodeArgs?.length && SERVICE_ROOT === REPO_ROOT) {
    // SERVICE_RENDER_THREADS: the helper pins 1; the bench keeps the service's own default unless told.
    const service = await startServiceProcess({ env: { SERVICE_RENDER_THREADS: '0', ...env } });
    const stop = async () => {
      const exit = await service.stop();
      for (const dir of [service.dataDir, service.avatarsDir, service.tmpDir]) await fs.rm(dir, { recursive: true, force: true });
      return exit;
    };
    return { baseUrl: service.baseUrl, pid: service.pid, stop, logs: () => service.logs(), collectGarbage: () => collectGarbage(service.pid) };
  }
  return spawnWithFlags(options.nodeArgs ?? [], env);
}

/** Lets a GC that SIGUSR2 started finish (a full GC of the service's ~30-40 MB heap takes tens of ms). */
const GC_SETTLE_MS = 300;

async function collectGarbage(pid: number): Promise<void> {
  try {
    process.kill(pid, 'SIGUSR2');
  } catch {
    return;
  }
  await new Promise((r) => setTimeout(r, GC_SETTLE_MS));
}

async function spawnWithFlags(nodeArgs: string[], env: Record<string, string>): Promise<BenchService> {
  const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'bench-svc-data-'));
  const avatarsDir = await fs.mkdtemp(path.join(os.tmpdir(), 'bench-svc-avatars-'));
  const tmpDir = await fs.mkdtemp(path.join(os.tmpdir(), 'bench-svc-tmp-'));
  const repoAvatars = path.join(SERVICE_ROOT, 'avatars');
  const skip = (name: string) => name.startsWith('.') || name.startsWith('custom-');
  await fs.cp(repoAvatars, avatarsDir, { recursive: true, filter: (src) => src === repoAvatars || !skip(path.basename(src)) });
  const port = await freePort();
  const baseUrl = `http://127.0.0.1:${port}`;
  const child = spawn(process.execPath, ['--no-turbo-fast-api-calls', ...nodeArgs, '--import', 'tsx', '--import', WATCHDOG, 'src/main.ts'], {
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
  });
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
  const exited = new Promise<ServiceExit>((resolve) =>
    child.once('exit', (code, signal) => {
      status = { code, signal };
      process.off('exit', killOnExit);
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
    collectGarbage: () => collectGarbage(child.pid!),
    stop: () => {
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
