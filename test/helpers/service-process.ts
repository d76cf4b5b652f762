import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';

/**
 * The real service as a child process (`node --no-turbo-fast-api-calls --import tsx src/main.ts`), for
 * tests that must observe a crash as an exit, read fds/RSS from `/proc/<pid>`, or kill -9 the service.
 *
 *   const service = await startServiceProcess({ env: { SERVICE_MAX_SESSIONS: '4' } });
 *   await fetch(`${service.baseUrl}/healthz`);
 *   await service.stop();          // SIGTERM, graceful; or service.kill() for SIGKILL
 *
 * Each child gets a free loopback port, its own temp `SERVICE_DATA_DIR` (unless given), a temp copy of
 * the repository's `avatars/` (so custom avatars and deletes never touch the repository) and its own
 * `TMPDIR`. No orphan survives: a process exit handler SIGKILLs live children, and the child watches its
 * stdin pipe (parent-watchdog.mjs) so it also shuts down when the test process dies without running it.
 */

const REPO_ROOT = path.resolve(import.meta.dirname, '..', '..');
const REPO_AVATARS = path.join(REPO_ROOT, 'avatars');
const WATCHDOG = path.join(import.meta.dirname, 'parent-watchdog.mjs');

/** Start-up (tsx transpile, LevelDB, avatar catalog, render pool) takes ~2-5 s on 2 busy cores, over 60 s at load 16–25 beside a cluster test; 120 s is a hang. */
const READY_TIMEOUT_MS = 120_000;
/** The service bounds its own graceful shutdown at 10 s (src/main.ts); past this, stop() SIGKILLs. */
const STOP_TIMEOUT_MS = 15_000;
/** Output kept for failure messages: the tail is what explains a crash. */
const LOG_TAIL_CHARS = 64 * 1024;
/** A free port can be taken between probing and binding; retry start-up on another port this often. */
const PORT_ATTEMPTS = 3;

export interface ServiceExit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

export interface ServiceProcess {
  baseUrl: string;
  port: number;
  pid: number;
  dataDir: string;
  avatarsDir: string;
  /** The child's own TMPDIR: every temp file the service makes lands here. */
  tmpDir: string;
  /** null while running; the exit code/signal once it has exited. */
  exitStatus(): ServiceExit | null;
  /** Resolves when the child exits, for whatever reason. */
  exited: Promise<ServiceExit>;
  /** The last ~64 KB of the child's stdout+stderr (pino JSON lines). */
  logs(): string;
  /** SIGTERM and wait for the graceful shutdown (SIGKILL after 15 s). Idempotent. */
  stop(): Promise<ServiceExit>;
  /** SIGKILL, no shutdown path: what a crash or an OOM kill looks like to the data directory. Idempotent. */
  kill(): Promise<ServiceExit>;
}

export interface StartServiceOptions {
  /** Extra environment for the child (SERVICE_* variables); wins over the defaults set here. */
  env?: Record<string, string>;
  /** Reuse a data directory (e.g. to restart on the same LevelDB); a fresh temp dir otherwise. */
  dataDir?: string;
  /** Use this avatars directory as is; a temp copy of the repository's `avatars/` otherwise. */
  avatarsDir?: string;
  /** Listen on this port (e.g. to restart a cluster node under the same URL, hence the same node id); a free one otherwise. */
  port?: number;
}

const liveChildren = new Set<ChildProcess>();
let exitHandlerInstalled = false;

function installExitHandler(): void {
  if (exitHandlerInstalled) return;
  exitHandlerInstalled = true;
  process.on('exit', () => {
    for (const child of liveChildren) child.kill('SIGKILL');
  });
}

/** A loopback port free right now (another process may still take it first: callers retry). */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

async function tempDir(prefix: string): Promise<string> {
  return fs.mkdtemp(path.join(os.tmpdir(), prefix));
}

async function copyRepoAvatars(target: string): Promise<void> {
  const skip = (name: string) => name.startsWith('.') || name.startsWith('custom-');
  await fs.cp(REPO_AVATARS, target, {
    recursive: true,
    filter: (src) => src === REPO_AVATARS || !skip(path.basename(src)),
  });
}

/**
 * tsx keeps its transpiled files under `$TMPDIR/tsx-<uid>`; a child with its own TMPDIR would transpile all
 * ~220 source files again at every start (a second of CPU). Its cache entry points at this process's cache
 * instead: one symlink, which tests reading the child's TMPDIR see as one stable entry.
 */
async function shareTranspileCache(childTmpDir: string): Promise<void> {
  // tsx's own naming: the effective uid where there is one.
  const name = `tsx-${process.geteuid?.() ?? os.userInfo().username}`;
  // The machine's temp dir, not this test file's own (test/setup/temp-root.ts): the cache outlives the file.
  const sharedRoot = process.env.TEST_SHARED_TMPDIR ?? os.tmpdir();
  const shared = path.join(sharedRoot, name);
  if (path.resolve(childTmpDir) === path.resolve(sharedRoot)) return;
  await fs.mkdir(shared, { recursive: true });
  await fs.symlink(shared, path.join(childTmpDir, name)).catch((error: NodeJS.ErrnoException) => {
    if (error.code !== 'EEXIST') throw error;
  });
}

async function healthy(baseUrl: string): Promise<boolean> {
  try {
    const res = await fetch(`${baseUrl}/healthz`, { signal: AbortSignal.timeout(2_000) });
    await res.body?.cancel();
    return res.ok;
  } catch {
    return false;
  }
}

export async function startServiceProcess(options: StartServiceOptions = {}): Promise<ServiceProcess> {
  const dataDir = options.dataDir ?? (await tempDir('svc-proc-data-'));
  let avatarsDir = options.avatarsDir;
  if (!avatarsDir) {
    avatarsDir = await tempDir('svc-proc-avatars-');
    await copyRepoAvatars(avatarsDir);
  }
  const tmpDir = await tempDir('svc-proc-tmp-');
  let lastError: Error | null = null;
  for (let attempt = 0; attempt < PORT_ATTEMPTS; attempt++) {
    try {
      return await launch({ dataDir, avatarsDir, tmpDir, env: options.env ?? {}, port: options.port });
    } catch (error) {
      lastError = error as Error;
      if (!/EADDRINUSE/.test(lastError.message)) throw lastError;
    }
  }
  throw lastError!;
}

async function launch(input: {
  dataDir: string;
  avatarsDir: string;
  tmpDir: string;
  env: Record<string, string>;
  port?: number;
}): Promise<ServiceProcess> {
  installExitHandler();
  const port = input.port ?? (await freePort());
  const baseUrl = `http://127.0.0.1:${port}`;
  await shareTranspileCache(input.env.TMPDIR ?? input.tmpDir);
  const child = spawn(
    process.execPath,
    ['--no-turbo-fast-api-calls', '--import', 'tsx', '--import', WATCHDOG, 'src/main.ts'],
    {
      cwd: REPO_ROOT,
      env: {
        ...process.env,
        SERVICE_HOST: '127.0.0.1',
        SERVICE_PORT: String(port),
        SERVICE_DATA_DIR: input.dataDir,
        SERVICE_AVATARS_DIR: input.avatarsDir,
        SERVICE_LOG_LEVEL: process.env.TEST_LOG_LEVEL ?? 'warn',
        SERVICE_RENDER_THREADS: '1',
        TMPDIR: input.tmpDir,
        ...input.env,
      },
      stdio: ['pipe', 'pipe', 'pipe'],
    },
  );
  liveChildren.add(child);
  let tail = '';
  const keep = (chunk: Buffer) => {
    tail = (tail + chunk.toString('utf8')).slice(-LOG_TAIL_CHARS);
  };
  child.stdout!.on('data', keep);
  child.stderr!.on('data', keep);
  child.stdin!.on('error', () => undefined);
  let status: ServiceExit | null = null;
  const exited = new Promise<ServiceExit>((resolve) => {
    child.once('exit', (code, signal) => {
      status = { code, signal };
      liveChildren.delete(child);
      resolve(status);
    });
  });

  const deadline = Date.now() + READY_TIMEOUT_MS;
  while (!(await healthy(baseUrl))) {
    if (status !== null) throw new Error(`service exited during start-up (${JSON.stringify(status)}):\n${tail}`);
    if (Date.now() > deadline) {
      child.kill('SIGKILL');
      await exited;
      throw new Error(`service not healthy within ${READY_TIMEOUT_MS} ms:\n${tail}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }

  const signalAndWait = async (signal: NodeJS.Signals, graceMs: number): Promise<ServiceExit> => {
    if (status !== null) return status;
    child.kill(signal);
    const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
    try {
      return await exited;
    } finally {
      clearTimeout(timer);
    }
  };

  return {
    baseUrl,
    port,
    pid: child.pid!,
    dataDir: input.dataDir,
    avatarsDir: input.avatarsDir,
    tmpDir: input.tmpDir,
    exitStatus: () => status,
    exited,
    logs: () => tail,
    stop: () => signalAndWait('SIGTERM', STOP_TIMEOUT_MS),
    kill: () => signalAndWait('SIGKILL', STOP_TIMEOUT_MS),
  };
}
