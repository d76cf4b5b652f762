/**
 * The built-in TTS engines run in supervised child processes: a fatal fault inside flite/eSpeak (V8 aborts
 * the process it happens in) costs the sentence that was in that process, never the service.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { closeBuiltinEngines, createBuiltinProvider, warmUpBuiltinEngines } from '../actors/tts/providers/builtin.ts';
import {
  BuiltinEnginePool,
  builtinEngineProcesses,
  builtinPreviewEngineProcesses,
  restartDelayMs,
  RESTART_BACKOFF_MAX_MS,
} from '../actors/tts/builtin/pool.ts';
import { pathFreeMessage } from '../actors/tts/builtin/protocol.ts';
import type { SentenceTask } from '../actors/tts/builtin/synthesize-sentence.ts';
import { eventually, labels, openSession, sleep } from './helpers/conversation.ts';
import { json, post, startTestApp, type TestApp } from './helpers/app.ts';

const REPO_ROOT = path.resolve(import.meta.dirname, '..');
const FIXTURES = path.join(import.meta.dirname, 'fixtures');
/** Four sentences of 0.7–2 s each for the engine (long enough to kill it mid-sentence), within the 1000-character preview limit. */
const LONG_TEXT = Array.from({ length: 4 }, () => `${'x'.repeat(190)}.`).join(' ');
/** Sentences through one engine for the descriptor check: a leak of one per sentence would be 25× its bound. */
const SENTENCES_FOR_DESCRIPTORS = 100;

const sentence = (text: string): SentenceTask => ({ engine: 'flite', engineVoice: 'slt', text, sampleRate: 16_000 });

const fdCount = (pid: number | 'self'): number => readdirSync(`/proc/${pid}/fd`).length;
/** The engines' work dirs in `dir` (tsx keeps its own cache in TMPDIR too). */
const workDirsIn = (dir: string): string[] => readdirSync(dir).filter((name) => name.startsWith('builtin-tts-flite-'));

/** Gone, or a zombie nobody reaped yet (PID 1 in a container may not): either way not running. */
function processGone(pid: number): boolean {
  try {
    return readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.startsWith('Z') ?? true;
  } catch {
    return true;
  }
}

/** Kills the engine process as soon as it is busy with a sentence; returns its pid. */
async function killBusyEngine(processes: () => Array<{ pid: number | undefined; busy: boolean }>): Promise<number> {
  let victim: number | undefined;
  const found = await eventually(
    () => {
      victim = processes().find((engine) => engine.busy)?.pid;
      if (victim !== undefined) process.kill(victim, 'SIGKILL');
      return victim !== undefined;
      // An engine starts (compiles 21 MB of WASM) before it is busy: seconds, tens of them on a host at half speed.
    },
    60_000,
    2,
  );
  if (!found || victim === undefined) throw new Error('no engine became busy');
  return victim;
}

function within<T>(work: Promise<T>, ms: number): Promise<T> {
  return Promise.race([
    work,
    new Promise<T>((_, reject) => setTimeout(() => reject(new Error(`still pending after ${ms} ms`)), ms).unref()),
  ]);
}

/** Runs a fixture script with plain node + tsx: none of the flags the test runner adds. */
function runFixture(script: string, env: Record<string, string> = {}) {
  const child = spawn(process.execPath, ['--import', 'tsx', path.join(FIXTURES, script)], {
    cwd: REPO_ROOT,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk) => (stdout += chunk));
  child.stderr.on('data', (chunk) => (stderr += chunk));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.on('exit', (code, signal) => resolve({ code, signal })),
  );
  return { child, exited, output: () => ({ stdout, stderr }) };
}

describe('a service started without --no-turbo-fast-api-calls', () => {
  it('answers the x×1000, 1×1000 and x×200 previews with 200 and keeps running', async () => {
    const run = runFixture('builtin-tts-unflagged-service.ts');
    const exit = await run.exited;
    const { stdout, stderr } = run.output();
    expect({ exit, stderr: stderr.slice(-2000) }).toMatchObject({ exit: { code: 0, signal: null } });
    const { results } = JSON.parse(stdout.trim().split('\n').at(-1)!);
    expect(results.map((r: { text: string; status: number }) => [r.text, r.status])).toEqual([
      ['x*1000', 200],
      ['1*1000', 200],
      ['x*200', 200],
    ]);
    // Seconds of speech each (16 kHz, 16-bit): the whole text was spoken, not an empty WAV.
    for (const result of results) expect(result.bytes).toBeGreaterThan(16_000 * 2 * 5);
    // 43 s on 2 cores; over 240 s on one core shared with another test file.
  }, 480_000);
});

describe('an engine process killed mid-sentence', () => {
  let t: TestApp;

  beforeAll(async () => {
    t = await startTestApp();
    await warmUpBuiltinEngines();
  });
  afterAll(async () => {
    await t?.close();
    await closeBuiltinEngines();
  });

  it('fails that preview with 502 and a path-free detail; the next preview is 200 from a new engine', async () => {
    const pending = post(t.baseUrl, '/tts/preview', { text: LONG_TEXT, tts_provider: 'builtin' });
    // Previews run in the preview engine, apart from the live one (test/tts.preview-bounds.test.ts).
    const killed = await killBusyEngine(builtinPreviewEngineProcesses);
    const res = await pending;
    expect(res.status).toBe(502);
    const { detail } = await json(res);
    expect(detail).toMatch(/engine process was killed \(SIGKILL\)/);
    expect(detail).not.toContain('/');
    expect(detail).not.toContain(os.tmpdir());

    const next = await post(t.baseUrl, '/tts/preview', { text: 'Hello again.', tts_provider: 'builtin' });
    expect(next.status).toBe(200);
    expect((await next.arrayBuffer()).byteLength).toBeGreaterThan(16_000);
    expect(builtinPreviewEngineProcesses().map((engine) => engine.pid)).not.toContain(killed);
    expect(processGone(killed)).toBe(true);
  }, 150_000);

  it('ends that speak turn with SSE error then status idle; the next turn speaks', async () => {
    const live = await openSession(t);
    try {
      const from = live.sse.events.length;
      expect((await post(t.baseUrl, `/sessions/${live.sessionId}/speak`, { text: LONG_TEXT })).status).toBe(200);
      await live.sse.waitFor((e) => e.type === 'tts' && e.data.stage === 'first_audio', 20_000, 'first audio', from);
      await killBusyEngine(builtinEngineProcesses);
      const error = await live.sse.waitFor((e) => e.type === 'error', 20_000, 'error event', from);
      expect(error.data.code).toBe('tts_upstream_error');
      expect(error.data.message).toMatch(/engine process was killed/);
      expect(error.data.message).not.toContain('/');
      await live.sse.waitFor(
        (e) => e.type === 'status' && e.data.stage === 'idle',
        20_000,
        'idle after the error',
        from,
      );
      const afterError = labels(live.sse.events.slice(from));
      expect(afterError.indexOf('error')).toBeLessThan(afterError.lastIndexOf('status:idle'));

      const second = live.sse.events.length;
      expect((await post(t.baseUrl, `/sessions/${live.sessionId}/speak`, { text: 'Back again.' })).status).toBe(200);
      await live.sse.waitFor(
        (e) => e.type === 'tts' && e.data.stage === 'complete',
        20_000,
        'second turn complete',
        second,
      );
      expect(live.sse.events.slice(second).some((e) => e.type === 'error')).toBe(false);
    } finally {
      live.close();
    }
  }, 90_000);
});

describe('descriptors and temp dirs', () => {
  const originalTmpdir = process.env.TMPDIR;
  let privateTmp: string;

  beforeAll(async () => {
    // A private TMPDIR (inherited by the engine process) so other test files' engines cannot blur the listing.
    privateTmp = mkdtempSync(path.join(os.tmpdir(), 'isolation-tmp-'));
    await closeBuiltinEngines();
    process.env.TMPDIR = privateTmp;
  });
  afterAll(async () => {
    await closeBuiltinEngines();
    if (originalTmpdir === undefined) delete process.env.TMPDIR;
    else process.env.TMPDIR = originalTmpdir;
    rmSync(privateTmp, { recursive: true, force: true });
  });

  it('100 sentences leave the descriptor counts flat, and closing the engines leaves no temp dir', async () => {
    const provider = createBuiltinProvider({ warmUp: false });
    await warmUpBuiltinEngines();
    const [engine] = builtinEngineProcesses();
    const serviceFdsBefore = fdCount('self');
    const engineFdsBefore = fdCount(engine.pid!);

    // Short sentences (~50 ms each): the per-sentence costs are what is measured, not the speech. One descriptor
    // kept per sentence would show as 100 against the bound of 4.
    const text = Array.from({ length: SENTENCES_FOR_DESCRIPTORS }, (_, index) => `Number ${index + 1}.`).join(' ');
    let chunks = 0;
    for await (const chunk of provider.synthesize({
      text,
      voice: null,
      sampleRate: 16_000,
      signal: AbortSignal.timeout(120_000),
    })) {
      expect(chunk.pcm.length).toBeGreaterThan(0);
      chunks += 1;
    }
    expect(chunks).toBe(SENTENCES_FOR_DESCRIPTORS);
    expect(builtinEngineProcesses().map((info) => info.pid)).toEqual([engine.pid]);
    expect(fdCount('self') - serviceFdsBefore).toBeLessThanOrEqual(4);
    expect(fdCount(engine.pid!) - engineFdsBefore).toBeLessThanOrEqual(4);
    // While the engine runs: its one work dir, with no sentence files left in it — only the empty trace
    // file of the flite instance made ahead for the next sentence.
    const workDirs = workDirsIn(privateTmp);
    expect(workDirs).toHaveLength(1);
    const left = readdirSync(path.join(privateTmp, workDirs[0]));
    expect(left.length).toBeLessThanOrEqual(1);
    for (const name of left) {
      expect(name).toMatch(/^[0-9a-f]{16}\.trace$/u);
      expect(statSync(path.join(privateTmp, workDirs[0], name)).size).toBe(0);
    }

    await closeBuiltinEngines();
    expect(workDirsIn(privateTmp)).toEqual([]);
    expect(processGone(engine.pid!)).toBe(true);
  }, 120_000);
});

describe('BuiltinEnginePool', () => {
  const pools: BuiltinEnginePool[] = [];
  const newPool = async (
    options: ConstructorParameters<typeof BuiltinEnginePool>[0] = {},
  ): Promise<BuiltinEnginePool> => {
    const pool = new BuiltinEnginePool(options);
    pools.push(pool);
    await pool.warmUp();
    return pool;
  };
  /**
   * One pool with the default options for the tests that need no other (an engine start costs seconds): each
   * leaves it serving, with a live engine and an empty queue, and each checks only what it changes.
   */
  let defaultPool: Promise<BuiltinEnginePool> | undefined;
  const sharedDefaultPool = (): Promise<BuiltinEnginePool> => (defaultPool ??= newPool());
  afterAll(async () => {
    await Promise.all(pools.map((pool) => pool.close()));
  });

  it('runs its engines with --no-turbo-fast-api-calls, whatever flags the service has', async () => {
    const pool = await sharedDefaultPool();
    const [engine] = pool.processes();
    const argv = readFileSync(`/proc/${engine.pid}/cmdline`, 'utf8').split('\0');
    expect(argv).toContain('--no-turbo-fast-api-calls');
  });

  it('a crash rejects only the sentence inside the dead engine; the queued one runs on its replacement', async () => {
    const pool = await sharedDefaultPool();
    const running = pool.synthesize(sentence('x'.repeat(190)));
    const queued = pool.synthesize(sentence('Still here.'));
    const killed = await killBusyEngine(() => pool.processes());
    await expect(running).rejects.toThrow(/engine process was killed \(SIGKILL\)/);
    const audio = await queued;
    expect(audio.pcm.length).toBeGreaterThan(8_000);
    expect(pool.processes().map((engine) => engine.pid)).not.toContain(killed);
  });

  it('an aborted queued sentence never reaches the engine; an aborted running one finishes there alone', async () => {
    const pool = await sharedDefaultPool();
    // The engine may be a replacement that already answered sentences: exactly one more is counted below.
    expect(await eventually(() => pool.processes().length === 1 && pool.processes()[0].ready, 60_000)).toBe(true);
    const answeredBefore = pool.processes()[0].sentences;
    const running = new AbortController();
    const first = pool.synthesize(sentence('x'.repeat(150)), running.signal);
    const queued = new AbortController();
    const second = pool.synthesize(sentence('Never spoken.'), queued.signal);
    queued.abort(new Error('client went away'));
    await expect(second).rejects.toThrow('client went away');
    expect(await eventually(() => pool.processes()[0].busy, 5_000, 2)).toBe(true);
    running.abort(new Error('interrupted'));
    await expect(first).rejects.toThrow('interrupted');
    // The engine finishes the abandoned sentence, then goes idle without ever seeing the queued one.
    expect(await eventually(() => !pool.processes()[0].busy, 10_000)).toBe(true);
    await sleep(300);
    expect(pool.processes()[0]).toMatchObject({ busy: false, sentences: answeredBefore + 1 });
    await expect(pool.synthesize(sentence('Ready.'), AbortSignal.abort(new Error('already gone')))).rejects.toThrow(
      'already gone',
    );
    expect((await pool.synthesize(sentence('Still serving.'))).pcm.length).toBeGreaterThan(0);
  });

  it('refuses a sentence beyond the queue bound with a clear error', async () => {
    const pool = await newPool({ maxQueued: 2 });
    const accepted = [
      pool.synthesize(sentence('x'.repeat(100))),
      pool.synthesize(sentence('One.')),
      pool.synthesize(sentence('Two.')),
    ];
    await eventually(() => pool.processes()[0].busy, 5_000, 2);
    await expect(pool.synthesize(sentence('Three.'))).rejects.toThrow(/overloaded: 2 sentences are already waiting/);
    await Promise.all(accepted);
  });

  it('replaces an engine after its sentence budget without failing a sentence', async () => {
    const pool = await newPool({ sentencesPerProcess: 3 });
    const firstPid = pool.processes()[0].pid!;
    // The fourth sentence is the first after the budget: it must wait for, or run on, the replacement.
    for (let index = 0; index < 4; index++) {
      expect((await pool.synthesize(sentence(`Sentence number ${index}.`))).pcm.length).toBeGreaterThan(0);
    }
    // The retired engine exits once its channel closes; on a host at half speed its replacement's start competes.
    expect(await eventually(() => !pool.processes().some((engine) => engine.pid === firstPid), 30_000)).toBe(true);
    expect(processGone(firstPid)).toBe(true);
    expect(pool.processes()).toHaveLength(1);
  });

  it('close kills every engine, rejects what waits, and is idempotent', async () => {
    const pool = await newPool({ processes: 2 });
    await eventually(() => pool.processes().every((engine) => engine.ready), 20_000);
    const pids = pool.processes().map((engine) => engine.pid!);
    expect(pids).toHaveLength(2);
    const inFlight = pool.synthesize(sentence('x'.repeat(190))).catch((error: Error) => error);
    await Promise.all([pool.close(), pool.close()]);
    expect(await inFlight).toBeInstanceOf(Error);
    expect(String(await inFlight)).toMatch(/shut down/);
    for (const pid of pids) expect(processGone(pid)).toBe(true);
    expect(pool.processes()).toEqual([]);
    await expect(pool.synthesize(sentence('After close.'))).rejects.toThrow(/shut down/);
  });

  it('an engine that cannot start fails the waiting sentences at once, with a path-free error', async () => {
    const originalTmpdir = process.env.TMPDIR;
    // mkdtemp under a missing directory fails with an ENOENT that quotes the path.
    process.env.TMPDIR = path.join(os.tmpdir(), 'isolation-missing', 'nested');
    try {
      const pool = new BuiltinEnginePool();
      pools.push(pool);
      const outcome = await within(
        pool.synthesize(sentence('Nobody will say this.')).catch((error: Error) => error),
        5_000,
      );
      expect(outcome).toBeInstanceOf(Error);
      expect((outcome as Error).message).toMatch(/could not be started: ENOENT/);
      expect((outcome as Error).message).not.toContain('isolation-missing');
      await expect(within(pool.warmUp(), 15_000)).rejects.toThrow(/could not be started/);
    } finally {
      if (originalTmpdir === undefined) delete process.env.TMPDIR;
      else process.env.TMPDIR = originalTmpdir;
    }
  });

  it('backs restarts off exponentially within bounds', () => {
    expect(restartDelayMs(1)).toBe(0);
    expect(restartDelayMs(2)).toBeGreaterThan(0);
    expect(restartDelayMs(3)).toBe(restartDelayMs(2) * 2);
    expect(restartDelayMs(50)).toBe(RESTART_BACKOFF_MAX_MS);
  });
});

describe('engine processes and their parent', () => {
  it('exit when the service process is killed with SIGKILL, and remove their temp dir', async () => {
    const privateTmp = mkdtempSync(path.join(os.tmpdir(), 'isolation-orphan-'));
    const parent = runFixture('builtin-engine-parent.ts', { TMPDIR: privateTmp });
    try {
      expect(await eventually(() => parent.output().stdout.includes('\n'), 60_000, 20)).toBe(true);
      const { enginePids } = JSON.parse(parent.output().stdout.trim()) as { enginePids: number[] };
      expect(enginePids).toHaveLength(1);
      expect(processGone(enginePids[0])).toBe(false);
      expect(workDirsIn(privateTmp)).toHaveLength(1);

      parent.child.kill('SIGKILL');
      expect((await parent.exited).signal).toBe('SIGKILL');
      expect(await eventually(() => processGone(enginePids[0]), 10_000, 20)).toBe(true);
      expect(await eventually(() => workDirsIn(privateTmp).length === 0, 5_000, 20)).toBe(true);
    } finally {
      // A failed assertion above must not leave the stand-in service (and so its engine) running.
      if (parent.child.exitCode === null && parent.child.signalCode === null) parent.child.kill('SIGKILL');
      rmSync(privateTmp, { recursive: true, force: true });
    }
  }, 90_000);
});

describe('engine error messages', () => {
  it('never carry a filesystem path', () => {
    // The path stays on the scrubber's line: test/repository.hygiene.test.ts skips only those.
    // prettier-ignore
    const message = pathFreeMessage(new Error("ENOENT: no such file or directory, open '/tmp/builtin-tts-flite-abc/1f.wav'"));
    expect(message).toBe("ENOENT: no such file or directory, open '<path>'");
    expect(pathFreeMessage(new Error('failed at file:///srv/app/actors/x.ts:3:1'))).toBe('failed at <path>');
    expect(pathFreeMessage(new Error('flite exited with code 1'))).toBe('flite exited with code 1');
    expect(pathFreeMessage('8 kHz/16 bit and 1/2 speed')).toBe('8 kHz/16 bit and 1/2 speed');
  });
});
