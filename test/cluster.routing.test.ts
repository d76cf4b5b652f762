/**
 * Cluster mode past the acceptance scenarios (test/cluster.acceptance.test.ts): a real `redis-server` and
 * three real service processes started with SERVICE_NODE_SLOT 0, 1, 2 (the order of the addresses in the
 * documented balancer snippets, docs/scaling.md).
 *
 * - Sticky routing saves the hop: session ids carry their owner's slot; the documented nginx map applied
 *   to each URL, Debian's nginx and Debian's HAProxy running the documented configs (`.ci/run` installs
 *   both), reach the owner with zero forwarded requests on every node (`avatar_cluster_forwarded_requests_total`).
 * - Internal headers cannot be forged: unsigned or wrongly signed ones are dropped, a node-signed one works.
 * - Avatars: the Redis catalog shows a create on another node at once, and a delete too.
 * - Recordings: downloadable through any node while the owner lives (forwarded), and from the shared data
 *   directory once the owner is lost; one still being written when its node is killed answers a bounded
 *   503 until the node is declared lost, then `idle` and a 404 that says why, from every node.
 * - Graceful shutdown (SIGTERM) during an offline job hands it back to the queue; another node completes it.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { nodeIdOf } from '../src/cluster/node.ts';
import { AVATARS_KEY, SECRET_KEY, sessionKey } from '../src/cluster/scripts.ts';
import { signForward } from '../src/cluster/internal-auth.ts';
import { FORWARD_CONNECT_TIMEOUT_MS } from '../src/cluster/forward.ts';
import { slotOfSessionId } from '../src/cluster/slots.ts';
import { PORTRAIT_FIXTURE } from './helpers/fixtures.ts';
import { SseClient } from './helpers/sse.ts';
import { AudioStreamClient } from './helpers/ws-audio.ts';
import { upgrade } from './helpers/ws-upgrade.ts';
import { startRedis, type RedisProcess } from './helpers/redis-server.ts';
import { freePort, startServiceProcess, type ServiceProcess } from './helpers/service-process.ts';
import { tone } from './helpers/conversation.ts';

const NODE_TTL_S = 5;
const MAX_PENDING = 3;
const NODE_COUNT = 3;
const UUID4 = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/u;
const DOCS = path.join(import.meta.dirname, '..', 'docs', 'scaling.md');
/** The node addresses of the documented snippets, in slot order. */
const DOC_ADDRESSES = ['10.0.0.11:8000', '10.0.0.12:8000', '10.0.0.13:8000'];

/** Debian's nginx binary (`nginx-light`); `.ci/run` installs the package when it is missing. */
const NGINX = ['/usr/sbin/nginx', '/usr/bin/nginx'].find((file) => spawnSync(file, ['-v']).status === 0);
/** Debian's HAProxy binary; `.ci/run` installs the package when it is missing. */
const HAPROXY = ['/usr/sbin/haproxy', '/usr/bin/haproxy'].find((file) => spawnSync(file, ['-v']).status === 0);
/** A stats-socket answer is local and immediate; this is a hang. */
const HAPROXY_STATS_TIMEOUT_MS = 5_000;
/** Creates sent through HAProxy: a multiple of the node count, so round-robin gives each node the same share. */
const BALANCED_CREATES = 2 * NODE_COUNT;
/** Offline job segments of 10 s of video each (1 s of speech, 9 s of pause). */
const OFFLINE_SEGMENTS = 6;
/** A client polling the job: often enough to see its progress before the SIGTERM, too. */
const POLL_MS = 50;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function until<T>(
  probe: () => Promise<T | undefined | null | false>,
  what: string,
  timeoutMs: number,
  stepMs = 100,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe().catch(() => undefined);
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(stepMs);
  }
}

function post(base: string, route: string, body?: unknown, headers: Record<string, string> = {}): Promise<Response> {
  return fetch(`${base}${route}`, {
    method: 'POST',
    headers: body === undefined ? headers : { 'content-type': 'application/json', ...headers },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(30_000),
  });
}

async function getJson(base: string, route: string, headers: Record<string, string> = {}): Promise<any> {
  const res = await fetch(`${base}${route}`, { headers, signal: AbortSignal.timeout(10_000) });
  if (!res.ok) throw new Error(`${route}: ${res.status}`);
  return res.json();
}

/** The node's forwarded-request counter, by kind (0 when it has not forwarded that kind yet). */
async function forwards(node: ServiceProcess): Promise<Record<'http' | 'websocket' | 'create', number>> {
  const text = await (await fetch(`${node.baseUrl}/metrics`, { signal: AbortSignal.timeout(10_000) })).text();
  const count = (kind: string) =>
    Number(
      new RegExp(`^avatar_cluster_forwarded_requests_total\\{kind="${kind}"\\} (\\d+)$`, 'mu').exec(text)?.[1] ?? 0,
    );
  return { http: count('http'), websocket: count('websocket'), create: count('create') };
}

/** SIGKILL a balancer started by a test and wait until it is gone (its port is free again). */
async function killAndWait(proc: ChildProcess): Promise<void> {
  if (proc.exitCode !== null || proc.signalCode !== null) return;
  const exited = new Promise((resolve) => proc.once('exit', resolve));
  proc.kill('SIGKILL');
  await exited;
}

/** The documented nginx snippet, and the balancer rule it encodes: path → upstream → its primary server. */
async function documentedNginx(): Promise<{ text: string; route(pathname: string): string }> {
  const docs = await fs.readFile(DOCS, 'utf8');
  const text = /```nginx\n([\s\S]*?)```/u.exec(docs)![1];
  const primaries = new Map<string, string>();
  for (const match of text.matchAll(/upstream\s+(\S+)\s*\{\s*server\s+([^\s;]+)\s*;/gu))
    primaries.set(match[1], match[2]);
  const mapBlock = /map \$uri \$avatar_upstream \{([\s\S]*?)\n\}/u.exec(text)![1];
  const rules: Array<{ re: RegExp; upstream: string }> = [];
  let fallback = '';
  for (const line of mapBlock.split('\n')) {
    const rule = /^\s*"~(\*?)([^"]+)"\s+(\S+);/u.exec(line);
    if (rule) rules.push({ re: new RegExp(rule[2], rule[1] ? 'iu' : 'u'), upstream: rule[3] });
    const other = /^\s*default\s+(\S+);/u.exec(line);
    if (other) fallback = other[1];
  }
  expect(rules.length).toBeGreaterThanOrEqual(NODE_COUNT);
  expect(primaries.get(fallback)).toBeDefined();
  return {
    text,
    route(pathname) {
      const upstream = rules.find((rule) => rule.re.test(pathname))?.upstream ?? fallback;
      return primaries.get(upstream)!;
    },
  };
}

/** The documented HAProxy snippet (docs/scaling.md), as written. */
async function documentedHaproxy(): Promise<string> {
  const docs = await fs.readFile(DOCS, 'utf8');
  return /```haproxy\n([\s\S]*?)```/u.exec(docs)![1];
}

/** `show stat` on HAProxy's stats socket: per backend, per server name, the requests it took and its status. */
async function haproxyStats(
  socketPath: string,
): Promise<Map<string, Map<string, { requests: number; status: string }>>> {
  const csv = await new Promise<string>((resolve, reject) => {
    const socket = net.connect(socketPath);
    let text = '';
    socket.setTimeout(HAPROXY_STATS_TIMEOUT_MS, () => socket.destroy(new Error('HAProxy stats socket did not answer')));
    socket.on('connect', () => socket.write('show stat\n'));
    socket.on('data', (chunk) => (text += chunk.toString()));
    socket.on('end', () => resolve(text));
    socket.on('error', reject);
  });
  const [header, ...rows] = csv.trim().split('\n');
  const columns = header.replace(/^# /u, '').split(',');
  const at = (name: string) => columns.indexOf(name);
  const stats = new Map<string, Map<string, { requests: number; status: string }>>();
  for (const row of rows) {
    const cells = row.split(',');
    const [backend, server] = [cells[at('pxname')], cells[at('svname')]];
    if (server === 'FRONTEND' || server === 'BACKEND') continue;
    if (!stats.has(backend)) stats.set(backend, new Map());
    stats.get(backend)!.set(server, { requests: Number(cells[at('req_tot')] || 0), status: cells[at('status')] });
  }
  return stats;
}

describe('cluster routing: slots, signed headers, shared avatars, recordings, graceful hand-over', () => {
  let redis: RedisProcess;
  let client: Redis;
  let dataDir: string;
  let avatarsDir: string;
  const nodes: ServiceProcess[] = [];
  const ports: number[] = [];
  const bySlot = new Map<number, ServiceProcess>();
  const byId = new Map<string, ServiceProcess>();

  const env = (slot: number) => ({
    SERVICE_REDIS_URL: redis.url,
    SERVICE_NODE_TTL_S: String(NODE_TTL_S),
    SERVICE_MAX_PENDING_SESSIONS: String(MAX_PENDING),
    SERVICE_MAX_SESSIONS: String(MAX_PENDING),
    SERVICE_NODE_SLOT: String(slot),
  });
  const alive = () => nodes.filter((node) => node.exitStatus() === null);
  const ownerOf = async (sessionId: string): Promise<ServiceProcess> => {
    const raw = await client.get(sessionKey(sessionId));
    if (!raw) throw new Error('session not in the directory');
    return byId.get(JSON.parse(raw).node)!;
  };
  const slotOf = (node: ServiceProcess) => nodes.indexOf(node);
  const create = async (base: string): Promise<string> => {
    const res = await post(base, '/sessions', { avatar_id: 'astronaut', model: 'mock' });
    expect(res.status).toBe(200);
    return (await res.json()).session_id;
  };
  const remove = (base: string, id: string) =>
    fetch(`${base}/sessions/${id}`, { method: 'DELETE', signal: AbortSignal.timeout(30_000) });
  const hops = async () => {
    let total = 0;
    for (const node of alive()) {
      const counts = await forwards(node);
      total += counts.http + counts.websocket;
    }
    return total;
  };

  beforeAll(async () => {
    redis = await startRedis();
    client = new Redis(redis.url);
    dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'cluster-routing-data-'));
    for (let slot = 0; slot < NODE_COUNT; slot++) {
      const port = await freePort();
      const node = await startServiceProcess({ dataDir, avatarsDir: nodes[0]?.avatarsDir, env: env(slot), port });
      nodes.push(node);
      ports.push(port);
      bySlot.set(slot, node);
      byId.set(nodeIdOf(node.baseUrl), node);
    }
    avatarsDir = nodes[0].avatarsDir;
  }, 180_000);

  afterAll(async () => {
    await Promise.all(nodes.map((node) => node.stop()));
    client?.disconnect();
    await redis?.stop();
    if (dataDir) await fs.rm(dataDir, { recursive: true, force: true });
  }, 60_000);

  it('session ids are UUID4 and carry their owner slot; the documented nginx map reaches the owner with zero forwarded requests', async () => {
    const nginx = await documentedNginx();
    const viaBalancer = (pathname: string) => {
      const address = nginx.route(pathname);
      const slot = DOC_ADDRESSES.indexOf(address);
      expect(slot, `documented address ${address}`).toBeGreaterThanOrEqual(0);
      return bySlot.get(slot)!.baseUrl;
    };

    const ids: string[] = [];
    for (let i = 0; i < 2 * NODE_COUNT; i++) ids.push(await create(nodes[i % NODE_COUNT].baseUrl));
    const owners = new Set<ServiceProcess>();
    for (const id of ids) {
      expect(id).toMatch(UUID4);
      const owner = await ownerOf(id);
      owners.add(owner);
      expect(slotOfSessionId(id)).toBe(slotOf(owner));
      // The rule the balancer applies picks exactly the owner.
      expect(viaBalancer(`/sessions/${id}/events`)).toBe(owner.baseUrl);
    }
    expect(owners.size).toBeGreaterThan(1);

    const before = await hops();
    const id = ids[0];
    const sse = await SseClient.open(`${viaBalancer(`/sessions/${id}/events`)}/sessions/${id}/events`);
    try {
      expect((await post(viaBalancer(`/sessions/${id}/start`), `/sessions/${id}/start`)).status).toBe(200);
      expect((await getJson(viaBalancer(`/sessions/${id}`), `/sessions/${id}`)).state).toBe('running');
      expect(
        (await post(viaBalancer(`/sessions/${id}/speak`), `/sessions/${id}/speak`, { text: 'Straight to the owner.' }))
          .status,
      ).toBe(200);
      await sse.waitFor((e) => e.type === 'status' && e.data.stage === 'idle', 60_000, 'the turn to end');
      const ws = AudioStreamClient.connect(viaBalancer(`/sessions/${id}/speak_audio_stream`), id);
      await ws.waitOpen(10_000);
      ws.socket.close();
      expect((await getJson(viaBalancer(`/sessions/${id}/rt-recording`), `/sessions/${id}/rt-recording`)).state).toBe(
        'idle',
      );
      for (const other of ids) expect((await remove(viaBalancer(`/sessions/${other}`), other)).status).toBe(200);
      await sse.waitFor((e) => e.type === 'session.terminated', 10_000, 'session.terminated');
    } finally {
      sse.close();
    }
    expect(await hops()).toBe(before);

    // The counter counts: a request sent to a node that does not own the session is one hop.
    const last = await create(nodes[0].baseUrl);
    const owner = await ownerOf(last);
    const other = alive().find((node) => node !== owner)!;
    const otherBefore = (await forwards(other)).http;
    expect((await getJson(other.baseUrl, `/sessions/${last}`)).state).toBe('created');
    expect((await forwards(other)).http).toBe(otherBefore + 1);
    expect((await remove(owner.baseUrl, last)).status).toBe(200);
  }, 180_000);

  it('Debian nginx running the documented config sends every request of a session to its owner (zero hops)', async () => {
    expect(NGINX, "no nginx binary: .ci/run installs Debian's nginx-light").toBeDefined();
    const nginxBinary = NGINX!;
    const nginx = await documentedNginx();
    const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'nginx-cluster-'));
    const port = await freePort();
    let config = nginx.text.replace('listen 443 ssl;', `listen 127.0.0.1:${port};`);
    DOC_ADDRESSES.forEach(
      (address, slot) => (config = config.replaceAll(address, new URL(bySlot.get(slot)!.baseUrl).host)),
    );
    const temp = ['client_body', 'proxy', 'fastcgi', 'uwsgi', 'scgi']
      .map((name) => `${name}_temp_path ${path.join(dir, name)};`)
      .join('\n  ');
    await fs.writeFile(
      path.join(dir, 'nginx.conf'),
      // One process (no master and worker): the SIGKILL at the end leaves no orphaned worker holding the port.
      `master_process off;\nworker_processes 1;\ndaemon off;\npid ${path.join(dir, 'nginx.pid')};\nerror_log ${path.join(dir, 'error.log')} warn;\n` +
        `events { worker_connections 256; }\nhttp {\n  access_log off;\n  ${temp}\n${config}\n}\n`,
    );
    const proc: ChildProcess = spawn(
      nginxBinary,
      ['-p', dir, '-e', path.join(dir, 'error.log'), '-c', path.join(dir, 'nginx.conf')],
      { stdio: 'ignore' },
    );
    const base = `http://127.0.0.1:${port}`;
    try {
      await until(async () => (await fetch(`${base}/healthz`)).ok, 'nginx to answer', 10_000);
      const before = await hops();
      const id = await create(base);
      expect(slotOfSessionId(id)).toBe(slotOf(await ownerOf(id)));
      const sse = await SseClient.open(`${base}/sessions/${id}/events`);
      try {
        expect((await post(base, `/sessions/${id}/start`)).status).toBe(200);
        expect((await post(base, `/sessions/${id}/speak`, { text: 'Through nginx.' })).status).toBe(200);
        await sse.waitFor(
          (e) => e.type === 'tts' && e.data.stage === 'first_audio',
          60_000,
          'first audio through nginx',
        );
        await sse.waitFor((e) => e.type === 'status' && e.data.stage === 'idle', 60_000, 'the turn to end');
        const ws = AudioStreamClient.connect(base, id);
        await ws.waitOpen(10_000);
        ws.sendText('{not json');
        await until(
          async () => ws.messages.length > 0 || ws.closed !== null,
          'an answer over the WebSocket through nginx',
          10_000,
        );
        ws.socket.close();
        expect((await remove(base, id)).status).toBe(200);
        await sse.waitFor((e) => e.type === 'session.terminated', 10_000, 'session.terminated through nginx');
      } finally {
        sse.close();
      }
      expect(await hops()).toBe(before);
    } finally {
      await killAndWait(proc);
      await fs.rm(dir, { recursive: true, force: true });
    }
  }, 120_000);

  it('Debian HAProxy running the documented config: every request of a session reaches its owner (zero hops, never a backup), SSE streams, POST /sessions is balanced', async () => {
    expect(HAPROXY, "no haproxy binary: .ci/run installs Debian's haproxy").toBeDefined();
    const snippet = await documentedHaproxy();
    // The documented TLS bind needs a certificate; the test binds plain HTTP. The rest is used as written.
    const documentedBind = 'bind :443 ssl crt /etc/haproxy/avatar.pem';
    expect(snippet).toContain(documentedBind);
    const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'haproxy-cluster-'));
    const port = await freePort();
    const statsSocket = path.join(dir, 'stats.sock');
    let config = snippet.replace(documentedBind, `bind 127.0.0.1:${port}`);
    DOC_ADDRESSES.forEach(
      (address, slot) => (config = config.replaceAll(address, new URL(bySlot.get(slot)!.baseUrl).host)),
    );
    // Only a stats socket is added (a global section, no routing): it tells which server took each request.
    const configFile = path.join(dir, 'haproxy.cfg');
    await fs.writeFile(configFile, `global\n    stats socket ${statsSocket} mode 600 level user\n${config}`);

    // What the documented text says: each server's node (by its address), which are backups, the default backend.
    const slotOfServer = new Map<string, number>();
    const backups = new Set<string>();
    let backend = '';
    for (const line of snippet.split('\n')) {
      const header = /^backend\s+(\S+)/u.exec(line);
      if (header) backend = header[1];
      const server = /^\s*server\s+(\S+)\s+(\S+)(.*)$/u.exec(line);
      if (!server) continue;
      slotOfServer.set(server[1], DOC_ADDRESSES.indexOf(server[2]));
      if (/\bbackup\b/u.test(server[3])) backups.add(`${backend}/${server[1]}`);
    }
    expect([...slotOfServer.values()].sort()).toEqual([0, 1, 2]);
    const defaultBackend = /^\s*default_backend\s+(\S+)/mu.exec(snippet)![1];

    const check = spawnSync(HAPROXY!, ['-c', '-f', configFile], { encoding: 'utf8' });
    expect(check.status, check.stderr + check.stdout).toBe(0);
    expect(`${check.stdout}${check.stderr}`).not.toMatch(/WARNING|ALERT/u);

    let output = '';
    const proc: ChildProcess = spawn(HAPROXY!, ['-db', '-f', configFile], { stdio: ['ignore', 'pipe', 'pipe'] });
    proc.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
    proc.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()));
    const base = `http://127.0.0.1:${port}`;
    /** Requests taken by each `backend/server` since `from`. */
    const taken = async (from: Map<string, number>) => {
      const now = new Map<string, number>();
      for (const [name, servers] of await haproxyStats(statsSocket)) {
        for (const [server, { requests }] of servers)
          now.set(`${name}/${server}`, requests - (from.get(`${name}/${server}`) ?? 0));
      }
      return now;
    };
    try {
      await until(
        async () =>
          [...(await haproxyStats(statsSocket)).values()].every((servers) =>
            [...servers.values()].every((server) => server.status === 'UP'),
          ),
        `HAProxy to see every node up (${output})`,
        20_000,
      );
      const hopsBefore = await hops();
      const start = await taken(new Map());

      // POST /sessions goes to the default backend, round-robin: each node receives the same share.
      const ids: string[] = [];
      for (let i = 0; i < BALANCED_CREATES; i++) ids.push(await create(base));
      const afterCreates = await taken(start);
      for (const server of slotOfServer.keys())
        expect(afterCreates.get(`${defaultBackend}/${server}`), server).toBe(BALANCED_CREATES / NODE_COUNT);

      // Requests of each session: counted per owner, to compare with what the owner's server took.
      const expected = new Map<number, number>();
      const owned = async (id: string) => {
        const slot = slotOf(await ownerOf(id));
        expect(slotOfSessionId(id)).toBe(slot);
        expected.set(slot, (expected.get(slot) ?? 0) + 1);
      };
      const slots = new Set<number>();
      for (const id of ids) {
        await owned(id);
        slots.add(slotOf(await ownerOf(id)));
        expect((await getJson(base, `/sessions/${id}`)).state).toBe('created');
      }
      expect(slots.size).toBeGreaterThan(1);

      const id = ids[0];
      await owned(id);
      const sse = await SseClient.open(`${base}/sessions/${id}/events`);
      try {
        await owned(id);
        expect((await post(base, `/sessions/${id}/start`)).status).toBe(200);
        await owned(id);
        expect((await post(base, `/sessions/${id}/speak`, { text: 'Through HAProxy.' })).status).toBe(200);
        // Streamed, not buffered: the turn's events arrive while the stream stays open.
        await sse.waitFor(
          (e) => e.type === 'tts' && e.data.stage === 'first_audio',
          60_000,
          'first audio through HAProxy',
        );
        await sse.waitFor((e) => e.type === 'status' && e.data.stage === 'idle', 60_000, 'the turn to end');
        expect(sse.closed).toBe(false);
        await owned(id);
        const ws = AudioStreamClient.connect(base, id);
        await ws.waitOpen(10_000);
        ws.sendText('{not json');
        await until(
          async () => ws.messages.length > 0 || ws.closed !== null,
          'an answer over the WebSocket through HAProxy',
          10_000,
        );
        ws.socket.close();
        for (const other of ids) {
          await owned(other);
          expect((await remove(base, other)).status).toBe(200);
        }
        await sse.waitFor((e) => e.type === 'session.terminated', 10_000, 'session.terminated through HAProxy');
      } finally {
        sse.close();
      }
      expect(await hops()).toBe(hopsBefore);

      // Every session request was taken by its owner's server, none by a backup.
      const sessionRequests = await taken(afterCreates);
      for (const [name, count] of sessionRequests) {
        if (name.startsWith(`${defaultBackend}/`)) continue;
        if (backups.has(name)) expect(count, name).toBe(0);
      }
      for (const [server, slot] of slotOfServer) {
        const byOwner = [...sessionRequests].filter(
          ([name]) => name.endsWith(`/${server}`) && !name.startsWith(`${defaultBackend}/`) && !backups.has(name),
        );
        expect(
          byOwner.reduce((sum, [, count]) => sum + count, 0),
          `requests taken by ${server} (slot ${slot})`,
        ).toBe(expected.get(slot) ?? 0);
      }
      for (const server of slotOfServer.keys())
        expect(sessionRequests.get(`${defaultBackend}/${server}`), server).toBe(0);
    } finally {
      await killAndWait(proc);
      await fs.rm(dir, { recursive: true, force: true });
    }
  }, 120_000);

  it('forged internal headers are dropped (the request is routed as a client request); a node-signed one is honoured', async () => {
    const id = await create(nodes[0].baseUrl);
    const owner = await ownerOf(id);
    const other = alive().find((node) => node !== owner)!;
    const secret = (await client.get(SECRET_KEY))!;
    expect(secret.length).toBeGreaterThanOrEqual(32);
    const forgeries = [
      { 'x-avs-forwarded': '1' },
      { 'x-avs-forwarded': nodeIdOf(other.baseUrl) },
      {
        'x-avs-forwarded': signForward(
          'not-the-cluster-secret',
          nodeIdOf(owner.baseUrl),
          'POST',
          `/sessions/${id}/start`,
        ),
      },
      // Signed for another URL: not this request's signature.
      { 'x-avs-forwarded': signForward(secret, nodeIdOf(owner.baseUrl), 'POST', `/sessions/${id}/pause`) },
    ];
    let count = (await forwards(other)).http;
    // Still forwarded to the owner, which starts it (served where it landed, the non-owner would not find it live).
    expect((await post(other.baseUrl, `/sessions/${id}/start`, undefined, forgeries[0])).status).toBe(200);
    expect((await forwards(other)).http).toBe(++count);
    for (const headers of forgeries) {
      expect((await getJson(other.baseUrl, `/sessions/${id}`, headers)).state).toBe('running');
      expect((await forwards(other)).http).toBe(++count);
    }
    // The WebSocket tunnel too.
    const wsBefore = (await forwards(other)).websocket;
    const ws = AudioStreamClient.connect(other.baseUrl, id);
    await ws.waitOpen(10_000);
    ws.socket.close();
    expect((await forwards(other)).websocket).toBe(wsBefore + 1);
    expect((await remove(owner.baseUrl, id)).status).toBe(200);

    // A reservation: with the node's signature a create is served where it lands (past its own cap: 503);
    // a client's forged one goes through placement, which finds room on another node.
    const target = nodes[1];
    const mine: string[] = [];
    for (let i = 0; i < MAX_PENDING; i++) {
      const token = `test-reservation-${i}`;
      const signed = {
        'x-avs-forwarded': signForward(secret, 'test', 'POST', '/sessions', token),
        'x-avs-reservation': token,
      };
      const res = await post(target.baseUrl, '/sessions', { avatar_id: 'astronaut', model: 'mock' }, signed);
      expect(res.status).toBe(200);
      const sid = (await res.json()).session_id;
      expect(await ownerOf(sid)).toBe(target);
      mine.push(sid);
    }
    const token = 'test-reservation-full';
    const signedFull = {
      'x-avs-forwarded': signForward(secret, 'test', 'POST', '/sessions', token),
      'x-avs-reservation': token,
    };
    expect(
      (await post(target.baseUrl, '/sessions', { avatar_id: 'astronaut', model: 'mock' }, signedFull)).status,
    ).toBe(503);
    const forged = await post(
      target.baseUrl,
      '/sessions',
      { avatar_id: 'astronaut', model: 'mock' },
      { 'x-avs-forwarded': 'x', 'x-avs-reservation': 'y' },
    );
    expect(forged.status).toBe(200);
    const placed = (await forged.json()).session_id;
    expect(await ownerOf(placed)).not.toBe(target);
    for (const sid of [...mine, placed]) expect((await remove(target.baseUrl, sid)).status).toBe(200);
  }, 120_000);

  it("a foreign page is refused on the node it reached, before any hop; the page of that node's own origin is forwarded and tunnelled to the owner", async () => {
    const id = await create(nodes[0].baseUrl);
    const owner = await ownerOf(id);
    const other = alive().find((node) => node !== owner)!;
    expect((await post(owner.baseUrl, `/sessions/${id}/start`)).status).toBe(200);
    const before = await forwards(other);
    const foreign = { origin: 'https://evil.example' };
    expect((await post(other.baseUrl, `/sessions/${id}/interrupt`, undefined, foreign)).status).toBe(403);
    const wsUrl = `${other.baseUrl.replace(/^http/u, 'ws')}/sessions/${id}/speak_audio_stream`;
    expect(await upgrade(wsUrl, foreign.origin)).toMatchObject({ opened: false, status: 403 });
    expect(await forwards(other)).toEqual(before);
    // Its own origin (by Host) on the node it reached; the owner sees another Host but the node's signature.
    const own = new URL(other.baseUrl).origin;
    expect((await post(other.baseUrl, `/sessions/${id}/interrupt`, undefined, { origin: own })).status).toBe(200);
    expect(await upgrade(wsUrl, own)).toEqual({ opened: true });
    expect(await forwards(other)).toMatchObject({ http: before.http + 1, websocket: before.websocket + 1 });
    expect((await remove(owner.baseUrl, id)).status).toBe(200);
  });

  it('an avatar created on A is listed on C at once, and deleted on B it is gone on A at once', async () => {
    const [a, b, c] = nodes;
    const form = new FormData();
    form.append('name', 'Everywhere');
    form.append('base_avatar_id', 'astronaut');
    form.append(
      'image',
      new Blob([new Uint8Array(await fs.readFile(PORTRAIT_FIXTURE))], { type: 'image/png' }),
      'portrait.png',
    );
    const made = await fetch(`${a.baseUrl}/avatars/custom`, { method: 'POST', body: form });
    expect(made.status).toBe(200);
    const avatarId = (await made.json()).id as string;
    // No wait, no retry: the entry is in Redis before A answers.
    expect((await getJson(c.baseUrl, '/avatars')).map((avatar: any) => avatar.id)).toContain(avatarId);
    expect((await getJson(c.baseUrl, `/avatars/${avatarId}`)).id).toBe(avatarId);
    expect(await client.hexists(AVATARS_KEY, avatarId)).toBe(1);
    const sid = await create(c.baseUrl);
    expect((await remove(c.baseUrl, sid)).status).toBe(200);

    const deleted = await fetch(`${b.baseUrl}/avatars/${avatarId}`, { method: 'DELETE' });
    expect(deleted.status).toBe(200);
    expect((await getJson(a.baseUrl, '/avatars')).map((avatar: any) => avatar.id)).not.toContain(avatarId);
    expect((await fetch(`${a.baseUrl}/avatars/${avatarId}`)).status).toBe(404);
    // An unknown avatar_id is a 400 on session create (as on one node).
    expect((await post(c.baseUrl, '/sessions', { avatar_id: avatarId, model: 'mock' })).status).toBe(400);
    expect(await client.hexists(AVATARS_KEY, avatarId)).toBe(0);
    const names = await fs.readdir(avatarsDir);
    expect(names).not.toContain(avatarId);
    expect(names.filter((name) => name.startsWith('.'))).toEqual([]);
  }, 120_000);

  it('a recording is downloadable through any node: forwarded while its session lives, from shared storage once it ended and after its owner is lost', async () => {
    const id = await create(nodes[0].baseUrl);
    const owner = await ownerOf(id);
    const other = alive().find((node) => node !== owner)!;
    /** A recording under way, its file being written on shared storage (the encoder opens its output once it has probed both inputs). */
    const recordingWritten = async (sessionId: string) => {
      await until(
        async () => (await getJson(other.baseUrl, `/sessions/${sessionId}/rt-recording`)).duration_ms > 0,
        'the recording to be under way',
        10_000,
        50,
      );
      const partial = path.join(
        dataDir,
        'nodes',
        nodeIdOf(owner.baseUrl),
        'recordings',
        sessionId,
        'recording.partial.mp4',
      );
      await until(
        async () => (await fs.stat(partial)).size > 0,
        'the recording file to be written on shared storage',
        10_000,
        50,
      );
    };
    expect((await post(other.baseUrl, `/sessions/${id}/start`)).status).toBe(200);
    expect((await post(other.baseUrl, `/sessions/${id}/rt-recording/start`)).status).toBe(200);
    await recordingWritten(id);
    const stopped = await post(other.baseUrl, `/sessions/${id}/rt-recording/stop`);
    expect(stopped.status).toBe(200);
    const duration = (await stopped.json()).duration_ms as number;
    expect(duration).toBeGreaterThan(0);

    const download = async (node: ServiceProcess) => {
      const res = await fetch(`${node.baseUrl}/sessions/${id}/rt-recording/artifact`, {
        signal: AbortSignal.timeout(10_000),
      });
      expect(res.status).toBe(200);
      expect(res.headers.get('content-type')).toBe('video/mp4');
      const bytes = Buffer.from(await res.arrayBuffer());
      expect(bytes.subarray(4, 8).toString('latin1')).toBe('ftyp');
      return bytes.length;
    };
    // The session lives: the owner serves its recording, through one hop.
    let before = (await forwards(other)).http;
    const size = await download(other);
    expect(await getJson(other.baseUrl, `/sessions/${id}/rt-recording`)).toMatchObject({
      state: 'complete',
      duration_ms: duration,
    });
    expect((await forwards(other)).http).toBe(before + 2);

    // Ended: the final file on shared storage is served by whichever node is asked, without a hop.
    expect((await remove(other.baseUrl, id)).status).toBe(200);
    before = (await forwards(other)).http;
    expect(await download(other)).toBe(size);
    expect(await getJson(other.baseUrl, `/sessions/${id}/rt-recording`)).toMatchObject({
      state: 'complete',
      duration_ms: duration,
    });
    expect((await forwards(other)).http).toBe(before);

    // Two more sessions on the same owner (placed there with a node-signed reservation): one deleted without a
    // recording, one recording when the owner dies.
    const secret = (await client.get(SECRET_KEY))!;
    const createOnOwner = async (token: string): Promise<string> => {
      const placed = await post(
        owner.baseUrl,
        '/sessions',
        { avatar_id: 'astronaut', model: 'mock' },
        {
          'x-avs-forwarded': signForward(secret, 'test', 'POST', '/sessions', token),
          'x-avs-reservation': token,
        },
      );
      expect(placed.status).toBe(200);
      const sessionId = (await placed.json()).session_id as string;
      expect(await ownerOf(sessionId)).toBe(owner);
      return sessionId;
    };
    const unrecordedId = await createOnOwner('test-reservation-unrecorded');
    expect((await remove(other.baseUrl, unrecordedId)).status).toBe(200);
    const recordingId = await createOnOwner('test-reservation-recording');
    expect((await post(other.baseUrl, `/sessions/${recordingId}/start`)).status).toBe(200);
    expect((await post(other.baseUrl, `/sessions/${recordingId}/rt-recording/start`)).status).toBe(200);
    await recordingWritten(recordingId);

    await owner.kill();
    // Until the owner's heartbeat expires it is still the owner: a bounded 503 with Retry-After, not a hang or a 5xx without a reason.
    const askedAt = Date.now();
    const early = await fetch(`${other.baseUrl}/sessions/${recordingId}/rt-recording`, {
      signal: AbortSignal.timeout(10_000),
    });
    expect(Date.now() - askedAt).toBeLessThan(FORWARD_CONNECT_TIMEOUT_MS + 1_000);
    expect(early.status).toBe(503);
    expect(early.headers.get('retry-after')).toMatch(/^\d+$/u);
    expect(typeof (await early.json()).detail).toBe('string');
    // Once it is declared lost (within the TTL), every node answers: nothing is being recorded, and the artifact 404 says why.
    for (const node of alive()) {
      await until(
        async () => (await getJson(node.baseUrl, `/sessions/${recordingId}`)).state === 'terminated',
        'the lost session to be terminated',
        4 * NODE_TTL_S * 1000,
      );
      expect(await getJson(node.baseUrl, `/sessions/${recordingId}`)).toMatchObject({
        state: 'terminated',
        terminated_reason: 'node_lost',
      });
      expect(await getJson(node.baseUrl, `/sessions/${recordingId}/rt-recording`)).toMatchObject({
        state: 'idle',
        duration_ms: 0,
      });
      const artifact = await fetch(`${node.baseUrl}/sessions/${recordingId}/rt-recording/artifact`, {
        signal: AbortSignal.timeout(10_000),
      });
      expect(artifact.status).toBe(404);
      expect((await artifact.json()).detail).toMatch(/node was lost \(node_lost\).*cannot be finished/u);
    }
    // The owner is lost: the finished file is read from its directory on the shared data directory.
    for (const node of alive()) {
      expect(await getJson(node.baseUrl, `/sessions/${id}/rt-recording`)).toMatchObject({
        state: 'complete',
        duration_ms: duration,
      });
      expect(await download(node)).toBe(size);
    }
    expect((await getJson(other.baseUrl, `/sessions/${id}`)).state).toBe('terminated');
    // A session its client deleted (never recorded) before its node was lost: a plain "no recording", not blamed
    // on the loss. Such a tombstone still follows its owner while a node has the owner's URL cached (a third of
    // the TTL): until then a 503 with Retry-After, so the answer is awaited within one TTL.
    for (const node of alive()) {
      const detail = await until(
        async () => {
          const artifact = await fetch(`${node.baseUrl}/sessions/${unrecordedId}/rt-recording/artifact`, {
            signal: AbortSignal.timeout(10_000),
          });
          if (artifact.status === 503) return undefined;
          expect(artifact.status).toBe(404);
          return (await artifact.json()).detail as string;
        },
        'the artifact of a deleted session on the lost node to answer 404',
        NODE_TTL_S * 1000,
      );
      expect(detail).toBe('no finished recording for this session');
    }
  }, 120_000);

  it('SIGTERM during an offline job hands the job back to the queue and another node completes it; progress never goes backwards', async () => {
    const survivors = alive();
    expect(survivors.length).toBeGreaterThanOrEqual(2);
    const id = await create(survivors[0].baseUrl);
    const bundle = `/sessions/${id}/rt-offline-bundle`;
    const pcm = (ms: number) => Buffer.from(tone(16000, ms, 300).buffer).toString('base64');
    // 60 s of video: seconds of rendering for the mock (~20× real time, docs/performance.md), many times the
    // ~0.1 s between the progress write that triggers the SIGTERM and the SIGTERM; the re-render stays short.
    const segments = Array.from({ length: OFFLINE_SEGMENTS }, () => ({
      audio_base64: pcm(1000),
      pause_after_ms: 9000,
    }));
    const submitted = await post(survivors[0].baseUrl, bundle, { segments });
    expect(submitted.status).toBe(200);
    const jobId = (await submitted.json()).job_id as string;
    const jobKey = `avs-bull:offline:${jobId}`;
    const runner = await until(
      async () => {
        const [processedBy, progress] = await client.hmget(jobKey, 'pb', 'progress');
        return processedBy && Number(progress ?? 0) > 0 ? byId.get(processedBy) : undefined;
      },
      'a node to be rendering the job',
      60_000,
      20,
    );
    const observer = survivors.find((node) => node !== runner)!;
    const seen: Array<{ status: string; progress: number }> = [];
    let polling = true;
    const poller = (async () => {
      while (polling) {
        try {
          const res = await fetch(`${observer.baseUrl}${bundle}/${jobId}`, { signal: AbortSignal.timeout(3_000) });
          if (res.ok) seen.push(await res.json());
          else await res.body?.cancel();
        } catch {
          // a slow answer: the next poll
        }
        await sleep(POLL_MS);
      }
    })();
    await until(
      async () => seen.some((job) => job.status === 'running' && job.progress > 0.05),
      'the job to be under way',
      60_000,
      10,
    );

    // Leftovers in the shared avatars directory: the runner's own (a crash's) and another node's upload in progress.
    const runnerId = nodeIdOf(runner.baseUrl);
    const own = path.join(avatarsDir, `.tmp-${runnerId}-leftover`);
    const theirs = path.join(avatarsDir, `.tmp-${nodeIdOf(observer.baseUrl)}-inprogress`);
    await fs.mkdir(own);
    await fs.mkdir(theirs);

    const exit = await runner.stop();
    expect(exit.signal ?? 'exited').not.toBe('SIGKILL');
    const done = await until(
      async () => seen.find((job) => job.status === 'complete' || job.status === 'failed'),
      'the job to finish on another node',
      180_000,
      POLL_MS,
    );
    polling = false;
    await poller;
    expect(done.status).toBe('complete');
    expect(seen.some((job) => job.status === 'failed')).toBe(false);
    const order = ['pending', 'running', 'complete'];
    for (let i = 1; i < seen.length; i++) {
      expect(seen[i].progress, `poll ${i}`).toBeGreaterThanOrEqual(seen[i - 1].progress);
      expect(order.indexOf(seen[i].status), `poll ${i}`).toBeGreaterThanOrEqual(order.indexOf(seen[i - 1].status));
    }
    expect(await client.hget(jobKey, 'pb')).toBe(nodeIdOf(observer.baseUrl));
    // Handed back, not lost to the stalled check: the job was never found stalled.
    expect(Number((await client.hget(jobKey, 'stc')) ?? 0)).toBe(0);
    const res = await fetch(`${observer.baseUrl}${bundle}/${jobId}/download`);
    expect(res.status).toBe(200);
    await res.arrayBuffer();

    // The node restarted under the same URL (same id) sweeps its own leftover, never the other node's upload.
    const slot = nodes.indexOf(runner);
    const restarted = await startServiceProcess({ dataDir, avatarsDir, env: env(slot), port: ports[slot] });
    nodes[slot] = restarted;
    bySlot.set(slot, restarted);
    byId.set(nodeIdOf(restarted.baseUrl), restarted);
    expect(nodeIdOf(restarted.baseUrl)).toBe(runnerId);
    await expect(fs.stat(own)).rejects.toThrow();
    expect((await fs.stat(theirs)).isDirectory()).toBe(true);
    await fs.rm(theirs, { recursive: true });
    const again = await create(restarted.baseUrl);
    expect((await remove(restarted.baseUrl, again)).status).toBe(200);
    expect((await remove(observer.baseUrl, id)).status).toBe(200);
  }, 300_000);
});
