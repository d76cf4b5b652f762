import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../src/logger.ts';
import { freePort } from './helpers/service-process.ts';

/**
 * What a newcomer sees on the console: the real service started as `node --import tsx src/main.ts`,
 * its stdout and stderr read separately.
 */

const REPO_ROOT = path.resolve(import.meta.dirname, '..');
const WATCHDOG = path.join(import.meta.dirname, 'helpers', 'parent-watchdog.mjs');
/** Start-up (tsx transpile, LevelDB, avatar catalog, render pool, TTS engine) on 2 busy cores; 60 s is a hang. */
const START_TIMEOUT_MS = 60_000;
/** A refused start still builds the app before listening fails, then closes it (bounded at 5 s in main.ts). */
const REFUSED_EXIT_MS = 60_000;
const STACK_FRAME = /^\s+at /mu;
const READY_LINE =
  /^Avatar service ready at (http:\/\/[^\s]+) — open it in a browser( \(it listens on all interfaces\))?$/mu;

interface RunningService {
  child: ChildProcess;
  stdout(): string;
  stderr(): string;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

const children = new Set<ChildProcess>();
const tempDirs: string[] = [];

async function tempDir(prefix: string): Promise<string> {
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), prefix));
  tempDirs.push(dir);
  return dir;
}

let avatarsDir: string;

function runService(env: Record<string, string>): RunningService {
  const child = spawn(
    process.execPath,
    ['--no-turbo-fast-api-calls', '--import', 'tsx', '--import', WATCHDOG, 'src/main.ts'],
    {
      cwd: REPO_ROOT,
      env: {
        ...process.env,
        SERVICE_HOST: '127.0.0.1',
        SERVICE_AVATARS_DIR: avatarsDir,
        SERVICE_LOG_LEVEL: 'info',
        SERVICE_RENDER_THREADS: '1',
        ...env,
      },
      stdio: ['pipe', 'pipe', 'pipe'],
    },
  );
  children.add(child);
  child.stdin!.on('error', () => undefined);
  let stdout = '';
  let stderr = '';
  child.stdout!.on('data', (chunk: Buffer) => (stdout += chunk.toString('utf8')));
  child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString('utf8')));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once('exit', (code, signal) => {
      children.delete(child);
      resolve({ code, signal });
    }),
  );
  return { child, stdout: () => stdout, stderr: () => stderr, exited };
}

/** Resolves with the ready line's URL; fails with the service's output if it exits or takes too long. */
async function readyUrl(service: RunningService): Promise<{ url: string; line: string }> {
  const deadline = Date.now() + START_TIMEOUT_MS;
  let exited = false;
  void service.exited.then(() => (exited = true));
  for (;;) {
    const match = READY_LINE.exec(service.stdout());
    if (match) return { url: match[1], line: match[0] };
    if (exited || Date.now() > deadline)
      throw new Error(`no ready line (exited: ${exited}):\n${service.stdout()}\n${service.stderr()}`);
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}

async function exitWithin(
  service: RunningService,
  ms: number,
): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
  let timer: NodeJS.Timeout | undefined;
  const timedOut = new Promise<never>((_resolve, reject) => {
    timer = setTimeout(
      () => reject(new Error(`still running after ${ms} ms:\n${service.stdout()}\n${service.stderr()}`)),
      ms,
    );
  });
  try {
    return await Promise.race([service.exited, timedOut]);
  } finally {
    clearTimeout(timer);
  }
}

async function stop(service: RunningService | undefined): Promise<void> {
  if (!service || service.child.exitCode !== null || service.child.signalCode !== null) return;
  service.child.kill('SIGTERM');
  await exitWithin(service, 20_000).catch(() => service.child.kill('SIGKILL'));
}

beforeAll(async () => {
  avatarsDir = await tempDir('first-run-avatars-');
  await fs.cp(path.join(REPO_ROOT, 'avatars'), avatarsDir, {
    recursive: true,
    filter: (src) => !path.basename(src).startsWith('.') && !path.basename(src).startsWith('custom-'),
  });
});

afterAll(async () => {
  for (const child of children) child.kill('SIGKILL');
  for (const dir of tempDirs) await fs.rm(dir, { recursive: true, force: true });
});

describe('first run of the real service', () => {
  let first: RunningService;
  let port: number;
  let dataDir: string;

  beforeAll(async () => {
    port = await freePort();
    dataDir = await tempDir('first-run-data-');
    first = runService({ SERVICE_PORT: String(port), SERVICE_DATA_DIR: dataDir });
    await readyUrl(first);
  });
  afterAll(async () => stop(first));

  it('prints one human line on stdout with the bound address, and the address answers', async () => {
    const { url, line } = await readyUrl(first);
    expect(url).toBe(`http://127.0.0.1:${port}`);
    expect(line).not.toContain('listens on all interfaces');
    expect((await fetch(`${url}/healthz`)).status).toBe(200);
    // Not a terminal: every other stdout line is a JSON log line.
    const others = first
      .stdout()
      .split('\n')
      .filter((text) => text.trim() !== '' && text !== line);
    expect(others.length).toBeGreaterThan(0);
    for (const text of others) expect(() => JSON.parse(text), text).not.toThrow();
  });

  it('a second instance on the same port exits non-zero with one sentence and no stack trace', async () => {
    const second = runService({ SERVICE_PORT: String(port), SERVICE_DATA_DIR: await tempDir('first-run-data-') });
    const exit = await exitWithin(second, REFUSED_EXIT_MS);
    expect(exit.code).not.toBe(0);
    expect(exit.code).not.toBeNull();
    expect(second.stderr().trim()).toBe(`port ${port} is already in use — stop the other process or set SERVICE_PORT`);
    expect(second.stdout() + second.stderr()).not.toMatch(STACK_FRAME);
    expect(second.stdout()).not.toMatch(READY_LINE);
  });

  it('a second instance on the same data directory exits non-zero naming the directory, with no stack trace', async () => {
    const second = runService({ SERVICE_PORT: String(await freePort()), SERVICE_DATA_DIR: dataDir });
    const exit = await exitWithin(second, REFUSED_EXIT_MS);
    expect(exit.code).not.toBe(0);
    expect(exit.code).not.toBeNull();
    const shown = path.relative(REPO_ROOT, dataDir);
    expect(path.isAbsolute(shown)).toBe(false);
    expect(second.stderr().trim()).toBe(
      `the data directory ${shown} is in use by another instance of the service — stop it or set SERVICE_DATA_DIR`,
    );
    expect(second.stdout() + second.stderr()).not.toMatch(STACK_FRAME);
    // The first instance is untouched.
    expect((await fetch(`http://127.0.0.1:${port}/healthz`)).status).toBe(200);
  });
});

describe('start-up failures before anything runs', () => {
  it('a data directory that cannot be created exits non-zero with one sentence', async () => {
    const parent = await tempDir('first-run-file-');
    const blocker = path.join(parent, 'not-a-directory');
    await fs.writeFile(blocker, 'a file where the data directory should go');
    const service = runService({
      SERVICE_PORT: String(await freePort()),
      SERVICE_DATA_DIR: path.join(blocker, 'data'),
    });
    const exit = await exitWithin(service, REFUSED_EXIT_MS);
    expect(exit.code).not.toBe(0);
    expect(exit.code).not.toBeNull();
    // Shown relative to the working directory: recognisable, and no absolute path on the console.
    const shown = path.relative(REPO_ROOT, path.join(blocker, 'data'));
    expect(path.isAbsolute(shown)).toBe(false);
    expect(service.stderr().trim()).toBe(
      `the data directory ${shown} cannot be created (ENOTDIR) — check the path or set SERVICE_DATA_DIR`,
    );
    expect(service.stdout() + service.stderr()).not.toMatch(STACK_FRAME);
  });
});

describe('a service bound to all interfaces', () => {
  let service: RunningService | undefined;
  afterEach(async () => stop(service));

  it('shows the loopback address in the ready line and says it listens on all interfaces', async () => {
    const port = await freePort();
    service = runService({
      SERVICE_HOST: '0.0.0.0',
      SERVICE_PORT: String(port),
      SERVICE_DATA_DIR: await tempDir('first-run-data-'),
    });
    const { url, line } = await readyUrl(service);
    expect(url).toBe(`http://127.0.0.1:${port}`);
    expect(line).toContain('(it listens on all interfaces)');
    expect((await fetch(`${url}/healthz`)).status).toBe(200);
  });
});

describe('pretty log lines', () => {
  it('turn JSON entries into one readable line each: time, level, message, fields; errors with type and message', () => {
    const lines: string[] = [];
    const logger = createLogger('info', { write: (text: string) => void lines.push(text) }, 'pretty');
    logger.info({ host: '127.0.0.1', port: 8000 }, 'service listening');
    logger.warn({ sessionId: 'abc', reason: 'no consumer left' }, 'session orphaned');
    logger.error({ err: new TypeError('boom') }, 'render worker failed between tasks');
    expect(lines[0]).toMatch(/^\d\d:\d\d:\d\d INFO {2}service listening host=127\.0\.0\.1 port=8000\n$/u);
    expect(lines[1]).toMatch(/^\d\d:\d\d:\d\d WARN {2}session orphaned sessionId=abc reason="no consumer left"\n$/u);
    expect(lines[2]).toMatch(
      /^\d\d:\d\d:\d\d ERROR render worker failed between tasks err="TypeError: boom"\n {4}at /u,
    );
    // Not a terminal here: no colour codes.
    for (const line of lines) expect(line).not.toContain('\u001b[');
  });
});
