/**
 * The KServe fake in a process of its own, as a real inference server is: its JSON parsing and model runs do not
 * share the test's event loop with the service and the receiving peer it measures. Live-session tests use it so
 * that a loaded machine slows the backend the way a remote server would be slowed, not the test's own receiver.
 * `close()` is a SIGKILL (the server dies mid-request, like a crashed pod).
 */
import { fork, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { FakeKserveOptions, FakeKserveStats } from './kserve-server.ts';

const CHILD_ENTRY = path.join(path.dirname(fileURLToPath(import.meta.url)), 'kserve-server-child.ts');
/** Loading tsx and onnxruntime in a fresh process takes ~1 s, longer on a loaded machine. */
const START_TIMEOUT_MS = 30_000;
/** A stats answer is one IPC round trip. */
const STATS_TIMEOUT_MS = 10_000;

export class KserveServerProcess {
  private nextId = 0;
  private closed = false;

  private constructor(
    private readonly child: ChildProcess,
    readonly url: string,
  ) {}

  static async start(options: Omit<FakeKserveOptions, 'model'> = {}): Promise<KserveServerProcess> {
    const child = fork(CHILD_ENTRY, [JSON.stringify(options)], {
      execArgv: ['--no-turbo-fast-api-calls', '--import', 'tsx'],
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    const ready = new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('KServe fake process did not start in time')), START_TIMEOUT_MS);
      child.once('exit', (code) => reject(new Error(`KServe fake process exited (${code}) before it was ready`)));
      child.on('message', (message: { type?: string; url?: string }) => {
        if (message?.type !== 'ready' || !message.url) return;
        clearTimeout(timer);
        resolve(message.url);
      });
    });
    try {
      return new KserveServerProcess(child, await ready);
    } catch (error) {
      child.kill('SIGKILL');
      throw error;
    }
  }

  /** What the server was asked so far. */
  async readStats(): Promise<FakeKserveStats> {
    const id = this.nextId++;
    this.child.send({ type: 'stats', id });
    const timeout = AbortSignal.timeout(STATS_TIMEOUT_MS);
    for (;;) {
      const [message] = (await once(this.child, 'message', { signal: timeout })) as [
        { type?: string; id?: number; stats?: FakeKserveStats },
      ];
      if (message?.type === 'stats' && message.id === id && message.stats) return message.stats;
    }
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    const exited = once(this.child, 'exit');
    this.child.kill('SIGKILL');
    await exited;
  }
}
