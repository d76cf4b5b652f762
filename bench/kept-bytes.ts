/**
 * What the service keeps, under load that makes it keep a lot (issue 42, H2–H4): transcripts and the webhook outbox
 * against their byte budgets, and what reading and retrying them costs everyone else. Turns are made cheaply, as the
 * hostile runs did: a 10,000-character speak interrupted at once is a finished turn of 10,000 characters (the `mock`
 * model on a 128×128 card renders next to nothing). Three services, each its own process:
 *
 * - `transcripts`: 3 sessions × 200 such turns; the data dir's growth (du) against the documented budget; then 20
 *   concurrent readers of one session's whole transcript, live and after the session ended, while `/healthz` is probed
 *   every 50 ms (p95) beside the same probe unloaded;
 * - `outbox`: SERVICE_WEBHOOK_URL points at a port nobody listens on; 5,000 such turns; RSS (max while turning), the
 *   outbox's body bytes (read from its LevelDB after a SIGTERM), and the idle process's CPU before and after a restart.
 *
 *   npm run bench -- kept_bytes          (BENCH_KEPT_TURNS=500 for a quick look, 0: transcripts only)
 */
import { execFileSync, fork } from 'node:child_process';
import fs from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { makeAvatarBundle, post } from '../test/helpers/app.ts';
import { startServiceProcess, type ServiceProcess } from '../test/helpers/service-process.ts';
import { Store } from '../src/store/db.ts';
import { TRANSCRIPT_MAX_BYTES } from '../src/sessions/transcript.ts';
import { WEBHOOK_OUTBOX_MAX_BYTES } from '../src/webhooks/outbox.ts';
import { loadAverage, sampleTree } from './proc.ts';
import { startScriptEnv } from './service.ts';
import { percentile, round } from './stats.ts';

/** Turns of the outbox phase (the row: 5,000). */
const OUTBOX_TURNS = Number(process.env.BENCH_KEPT_TURNS ?? 5_000);
const TRANSCRIPT_SESSIONS = 3;
const TRANSCRIPT_TURNS = 200;
/** Sessions turning at once in the outbox phase: the turns' HTTP round trips overlap. */
const OUTBOX_SESSIONS = 4;
/**
 * 10,000 characters of words in a random order: LevelDB compresses its tables (Snappy), and a repeated sentence would
 * shrink ~50× on disk and hide what real text costs.
 */
const TURN_TEXT = randomWords(10_000);
const READERS = 20;
const READ_PHASE_MS = 8_000;
const PROBE_INTERVAL_MS = 50;
const IDLE_WINDOW_MS = 20_000;
/** A 409 (the interrupted turn is still settling) is retried after this. */
const BUSY_RETRY_MS = 5;
/**
 * LevelDB's slack over the live bytes it holds: a dropped turn's record stays in its table files until a compaction
 * reaches them, and its write-ahead log holds the newest writes once more. The data dir budget for transcripts is
 * `live sessions × TRANSCRIPT_MAX_BYTES × LEVELDB_SLACK` (docs/reliability.md).
 */
export const LEVELDB_SLACK = 3;
const SECRET = `whsec_${Buffer.from('the kept-bytes bench secret, 32B').toString('base64')}`;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function randomWords(chars: number): string {
  const words = [
    'avatar',
    'speaks',
    'while',
    'the',
    'listener',
    'waits',
    'for',
    'a',
    'reply',
    'about',
    'mars',
    'weather',
    'dust',
    'cold',
    'orbit',
    'rover',
  ];
  let text = '';
  while (text.length < chars)
    text += `${words[Math.floor(Math.random() * words.length)]}${Math.random() < 0.1 ? '. ' : ' '}`;
  return text.slice(0, chars);
}

async function openSession(baseUrl: string): Promise<string> {
  const res = await post(baseUrl, '/sessions', { avatar_id: 'card', model: 'mock' });
  const body = (await res.json()) as { session_id: string };
  if (res.status !== 200) throw new Error(`POST /sessions → ${res.status}`);
  const started = await post(baseUrl, `/sessions/${body.session_id}/start`);
  await started.body?.cancel();
  if (started.status !== 200) throw new Error(`start → ${started.status}`);
  return body.session_id;
}

/** One cheap long turn: speak 10,000 characters, interrupt at once (retrying while the previous turn settles). */
async function cheapTurn(baseUrl: string, sessionId: string): Promise<void> {
  for (;;) {
    const res = await post(baseUrl, `/sessions/${sessionId}/speak`, { text: TURN_TEXT });
    await res.body?.cancel();
    if (res.status === 200) break;
    if (res.status !== 409) throw new Error(`speak → ${res.status}`);
    await sleep(BUSY_RETRY_MS);
  }
  const interrupted = await post(baseUrl, `/sessions/${sessionId}/interrupt`);
  await interrupted.body?.cancel();
}

async function turnsOn(baseUrl: string, sessionIds: string[], total: number, onProgress?: () => void): Promise<void> {
  let left = total;
  await Promise.all(
    sessionIds.map(async (id) => {
      while (left > 0) {
        left--;
        await cheapTurn(baseUrl, id);
        onProgress?.();
      }
    }),
  );
}

function duBytes(dir: string): number {
  return Number(execFileSync('du', ['-sb', dir], { encoding: 'utf8' }).split('\t')[0]);
}

async function probeHealthz(baseUrl: string, until: number): Promise<number[]> {
  const times: number[] = [];
  while (performance.now() < until) {
    const started = performance.now();
    try {
      await (await fetch(`${baseUrl}/healthz`, { signal: AbortSignal.timeout(10_000) })).text();
    } catch {
      // counted at the bound
    }
    times.push(performance.now() - started);
    await sleep(PROBE_INTERVAL_MS);
  }
  return times;
}

/**
 * Readers in a process of their own (this file, forked): parsing 20 MB of answers a second in the bench's process
 * would delay its own `/healthz` probes and charge that to the service. Answers {reads, bytes} over IPC.
 */
function startReaders(url: string, readers: number, until: number): Promise<{ reads: number; bytes: number }> {
  if (readers === 0) return Promise.resolve({ reads: 0, bytes: 0 });
  const child = fork(import.meta.filename, [], {
    env: {
      ...process.env,
      BENCH_KEPT_READ_URL: url,
      BENCH_KEPT_READERS: String(readers),
      BENCH_KEPT_READ_MS: String(until - performance.now()),
    },
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  return new Promise((resolve, reject) => {
    child.once('message', (message: { reads: number; bytes: number }) => resolve(message));
    child.once('exit', (code) => reject(new Error(`reader exited (${code}) without answering`)));
  });
}

async function readInChild(url: string, readers: number, ms: number): Promise<{ reads: number; bytes: number }> {
  const until = performance.now() + ms;
  let reads = 0;
  let bytes = 0;
  await Promise.all(
    Array.from({ length: readers }, async () => {
      while (performance.now() < until) {
        const res = await fetch(url);
        // Read and count, without parsing: the client's cost stays small.
        for await (const chunk of res.body!) bytes += (chunk as Uint8Array).byteLength;
        reads++;
      }
    }),
  );
  return { reads, bytes: reads ? Math.round(bytes / reads) : 0 };
}

/** `/healthz` p50/p95 while `readers` clients (another process) read the transcript over and over. */
async function readPhase(service: ServiceProcess, sessionId: string, readers: number) {
  const until = performance.now() + READ_PHASE_MS;
  const rssBefore = sampleTree(service.pid).rootRss;
  let rssMax = rssBefore;
  const sampler = setInterval(() => (rssMax = Math.max(rssMax, sampleTree(service.pid).rootRss)), 250);
  const reading = startReaders(`${service.baseUrl}/sessions/${sessionId}/transcript`, readers, until);
  const probes = await probeHealthz(service.baseUrl, until);
  const { reads, bytes } = await reading;
  clearInterval(sampler);
  return {
    healthz_p50_ms: round(percentile(probes, 50)),
    healthz_p95_ms: round(percentile(probes, 95)),
    probes: probes.length,
    reads,
    transcript_bytes: bytes,
    rss_growth_mb: round((rssMax - rssBefore) / 1e6),
  };
}

/** Root-process CPU over a quiet window, in % of one core. */
async function idleCpuPercent(pid: number): Promise<number> {
  const before = sampleTree(pid);
  await sleep(IDLE_WINDOW_MS);
  const after = sampleTree(pid);
  return round(((after.rootCpuMs - before.rootCpuMs) / (after.at - before.at)) * 100, 2);
}

async function outboxOnDisk(dataDir: string): Promise<{ entries: number; body_bytes: number; db_bytes: number }> {
  const store = await Store.open(dataDir);
  try {
    let entries = 0;
    let bodyBytes = 0;
    for await (const message of store.sublevel<{ body: string }>('webhook-messages').values()) {
      entries++;
      bodyBytes += Buffer.byteLength(message.body);
    }
    return { entries, body_bytes: bodyBytes, db_bytes: duBytes(path.join(dataDir, 'db')) };
  } finally {
    await store.close();
  }
}

/** A loopback port with nobody listening: every delivery attempt is refused at once. */
async function deadPort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

export async function benchKeptBytes(): Promise<Record<string, unknown>> {
  const avatarsDir = await fs.mkdtemp(path.join(os.tmpdir(), 'bench-kept-avatars-'));
  await makeAvatarBundle(avatarsDir, 'card');
  const env = { SERVICE_LOG_LEVEL: 'warn', SERVICE_MAX_SESSIONS: '12', ...startScriptEnv() };
  const out: Record<string, unknown> = { turn_chars: TURN_TEXT.length };
  const services: ServiceProcess[] = [];
  try {
    // Transcripts: data dir growth, then concurrent reads.
    const plain = await startServiceProcess({ env, avatarsDir });
    services.push(plain);
    const sessions = await Promise.all(Array.from({ length: TRANSCRIPT_SESSIONS }, () => openSession(plain.baseUrl)));
    const duBefore = duBytes(plain.dataDir);
    const turnsStarted = performance.now();
    await Promise.all(sessions.map((id) => turnsOn(plain.baseUrl, [id], TRANSCRIPT_TURNS)));
    const turnSeconds = (performance.now() - turnsStarted) / 1000;
    await sleep(2_000);
    const growth = duBytes(plain.dataDir) - duBefore;
    const budget = TRANSCRIPT_SESSIONS * TRANSCRIPT_MAX_BYTES * LEVELDB_SLACK;
    const unloaded = await readPhase(plain, sessions[0], 0);
    const live = await readPhase(plain, sessions[0], READERS);
    await (await fetch(`${plain.baseUrl}/sessions/${sessions[0]}`, { method: 'DELETE' })).body?.cancel();
    const ended = await readPhase(plain, sessions[0], READERS);
    out.transcripts = {
      sessions: TRANSCRIPT_SESSIONS,
      turns_per_session: TRANSCRIPT_TURNS,
      turns_per_s: round((TRANSCRIPT_SESSIONS * TRANSCRIPT_TURNS) / turnSeconds),
      data_dir_growth_mb: round(growth / 1e6, 2),
      data_dir_budget_mb: round(budget / 1e6, 2),
      data_dir_growth_ratio: round(growth / budget, 2),
      reads_unloaded: unloaded,
      reads_live: live,
      reads_ended: ended,
      healthz_p95_worst_ms: Math.max(live.healthz_p95_ms, ended.healthz_p95_ms),
    };
    console.log(
      `  transcripts: data dir +${round(growth / 1e6, 2)} MB (budget ${round(budget / 1e6, 2)}), /healthz p95 ${live.healthz_p95_ms} / ${ended.healthz_p95_ms} ms`,
    );
    await plain.stop();
    if (OUTBOX_TURNS === 0) return out;

    // The outbox with a dead receiver.
    const port = await deadPort();
    const hooksEnv = { ...env, SERVICE_WEBHOOK_URL: `http://127.0.0.1:${port}/hook`, SERVICE_WEBHOOK_SECRET: SECRET };
    const hooked = await startServiceProcess({ env: hooksEnv, avatarsDir });
    services.push(hooked);
    const hookSessions = await Promise.all(Array.from({ length: OUTBOX_SESSIONS }, () => openSession(hooked.baseUrl)));
    let rssMax = 0;
    const sampler = setInterval(() => (rssMax = Math.max(rssMax, sampleTree(hooked.pid).rootRss)), 500);
    const started = performance.now();
    let done = 0;
    await turnsOn(hooked.baseUrl, hookSessions, OUTBOX_TURNS, () => {
      if (++done % 1000 === 0) console.log(`  outbox: ${done} turns`);
    });
    const seconds = (performance.now() - started) / 1000;
    await sleep(2_000);
    clearInterval(sampler);
    // Idle: the sessions are ended, nothing arrives; only the dead receiver's deliveries wait.
    for (const id of hookSessions)
      await (await fetch(`${hooked.baseUrl}/sessions/${id}`, { method: 'DELETE' })).body?.cancel();
    await sleep(2_000);
    const idle = await idleCpuPercent(hooked.pid);
    const rssIdle = sampleTree(hooked.pid).rootRss;
    await hooked.stop();
    const disk = await outboxOnDisk(hooked.dataDir);
    const restarted = await startServiceProcess({ env: hooksEnv, avatarsDir, dataDir: hooked.dataDir });
    services.push(restarted);
    await sleep(2_000);
    const idleAfterRestart = await idleCpuPercent(restarted.pid);
    const rssAfterRestart = sampleTree(restarted.pid).rootRss;
    await restarted.stop();
    out.outbox = {
      turns: OUTBOX_TURNS,
      turns_per_s: round(OUTBOX_TURNS / seconds),
      rss_max_mb: round(rssMax / 1e6),
      rss_idle_mb: round(rssIdle / 1e6),
      outbox_entries: disk.entries,
      outbox_body_mb: round(disk.body_bytes / 1e6, 2),
      outbox_budget_mb: round(WEBHOOK_OUTBOX_MAX_BYTES / 1e6, 2),
      leveldb_mb: round(disk.db_bytes / 1e6, 2),
      idle_cpu_percent: idle,
      idle_cpu_percent_after_restart: idleAfterRestart,
      rss_after_restart_mb: round(rssAfterRestart / 1e6),
    };
    out.load_average = loadAverage();
    return out;
  } finally {
    for (const service of services) await service.stop().catch(() => undefined);
    for (const service of services) await fs.rm(service.dataDir, { recursive: true, force: true });
    await fs.rm(avatarsDir, { recursive: true, force: true });
  }
}

if (process.env.BENCH_KEPT_READ_URL && process.send) {
  const env = process.env;
  const result = await readInChild(
    env.BENCH_KEPT_READ_URL!,
    Number(env.BENCH_KEPT_READERS),
    Number(env.BENCH_KEPT_READ_MS),
  );
  process.send(result, () => process.exit(0));
} else if (import.meta.url === `file://${process.argv[1]}`) {
  console.log(JSON.stringify(await benchKeptBytes(), null, 2));
  process.exit(0);
}
