/**
 * Cluster mode end to end: a real `redis-server` on a random port (test/helpers/redis-server.ts) and three
 * real service processes sharing it, one data directory and one avatars directory. Sessions are placed
 * by the placement script, so each scenario reads the directory (Redis) to learn which node owns what and
 * then talks to a node that does not own it, so every request crosses a forwarding hop.
 */
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { nodeIdOf } from '../src/cluster/node.ts';
import { sessionKey } from '../src/cluster/scripts.ts';
import { PORTRAIT_FIXTURE } from './helpers/fixtures.ts';
import { ReceivingPeer } from './helpers/peer.ts';
import { SseClient } from './helpers/sse.ts';
import { AudioStreamClient } from './helpers/ws-audio.ts';
import { startRedis, type RedisProcess } from './helpers/redis-server.ts';
import { startServiceProcess, type ServiceProcess } from './helpers/service-process.ts';
import { tone } from './helpers/conversation.ts';

/** Short enough for the loss scenarios to finish quickly, long enough that a busy start-up keeps its heartbeat. */
const NODE_TTL_S = 5;
/** Per node; the cluster's cap on created-but-unstarted sessions is three times this. */
const MAX_PENDING = 4;
const NODE_COUNT = 3;
/** Offline job segments of 10 s of video each (1 s of speech, 9 s of pause). */
const OFFLINE_SEGMENTS = 6;
/** A client polling the job: often enough to see its progress before the kill, too. */
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

function post(base: string, route: string, body?: unknown): Promise<Response> {
  return fetch(`${base}${route}`, {
    method: 'POST',
    headers: body === undefined ? {} : { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
}

async function getJson(base: string, route: string): Promise<any> {
  const res = await fetch(`${base}${route}`, { signal: AbortSignal.timeout(5_000) });
  if (!res.ok) throw new Error(`${route}: ${res.status}`);
  return res.json();
}

describe('a cluster of three nodes on one redis-server', () => {
  let redis: RedisProcess;
  let client: Redis;
  let dataDir: string;
  const nodes: ServiceProcess[] = [];
  const byId = new Map<string, ServiceProcess>();

  const env = () => ({
    SERVICE_REDIS_URL: redis.url,
    SERVICE_NODE_TTL_S: String(NODE_TTL_S),
    SERVICE_MAX_PENDING_SESSIONS: String(MAX_PENDING),
    SERVICE_MAX_SESSIONS: String(MAX_PENDING),
  });
  const alive = () => nodes.filter((node) => node.exitStatus() === null);
  const ownerOf = async (sessionId: string): Promise<ServiceProcess> => {
    const raw = await client.get(sessionKey(sessionId));
    if (!raw) throw new Error('session not in the directory');
    return byId.get(JSON.parse(raw).node)!;
  };
  const notOwner = async (sessionId: string): Promise<ServiceProcess> => {
    const owner = await ownerOf(sessionId);
    return alive().find((node) => node !== owner)!;
  };

  beforeAll(async () => {
    redis = await startRedis();
    client = new Redis(redis.url);
    dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'cluster-data-'));
    // The first node copies the repository's avatars to a temp directory; the others share it.
    for (let i = 0; i < NODE_COUNT; i++) {
      const node = await startServiceProcess({ dataDir, avatarsDir: nodes[0]?.avatarsDir, env: env() });
      nodes.push(node);
      byId.set(nodeIdOf(node.baseUrl), node);
    }
  }, 180_000);

  afterAll(async () => {
    await Promise.all(nodes.map((node) => node.stop()));
    client?.disconnect();
    await redis?.stop();
    if (dataDir) await fs.rm(dataDir, { recursive: true, force: true });
  }, 60_000);

  it('a session created through node A is started, spoken to, streamed (SSE, wrtc peer, audio WebSocket) and deleted through another node', async () => {
    const [a] = nodes;
    const created = await post(a.baseUrl, '/sessions', { avatar_id: 'astronaut', model: 'mock' });
    expect(created.status).toBe(200);
    const sessionId = (await created.json()).session_id as string;
    const owner = await ownerOf(sessionId);
    const b = await notOwner(sessionId);
    expect(b).not.toBe(owner);

    const sse = await SseClient.open(`${b.baseUrl}/sessions/${sessionId}/events`);
    expect(sse.contentType).toContain('text/event-stream');
    const peer = await ReceivingPeer.connect(b.baseUrl, sessionId);
    try {
      expect((await post(b.baseUrl, `/sessions/${sessionId}/start`)).status).toBe(200);
      expect((await getJson(b.baseUrl, `/sessions/${sessionId}`)).state).toBe('running');
      const spoke = await post(b.baseUrl, `/sessions/${sessionId}/speak`, { text: 'Hello from another node.' });
      expect(spoke.status).toBe(200);
      await sse.waitFor(
        (e) => e.type === 'tts' && e.data.stage === 'first_audio',
        60_000,
        'first audio over SSE through the forwarding node',
      );
      await sse.waitFor((e) => e.type === 'status' && e.data.stage === 'idle', 60_000, 'the turn to end');
      expect(sse.of('frame').length).toBeGreaterThan(0);
      await until(
        async () => peer.frames.length > 0 && peer.audio.length > 0,
        'frames and audio on the wrtc peer',
        30_000,
      );

      // The audio WebSocket is tunnelled to the owner: it opens and the owner answers a malformed control message.
      const ws = AudioStreamClient.connect(b.baseUrl, sessionId);
      await ws.waitOpen(10_000);
      ws.sendText('{not json');
      await until(
        async () => ws.messages.length > 0 || ws.closed !== null,
        'an answer from the owner over the tunnel',
        10_000,
      );
      expect(ws.closed?.code ?? 1000).not.toBe(1006);
      ws.socket.close();

      const deleted = await fetch(`${b.baseUrl}/sessions/${sessionId}`, { method: 'DELETE' });
      expect(deleted.status).toBe(200);
      await sse.waitFor((e) => e.type === 'session.terminated', 10_000, 'session.terminated over SSE');
      const after = await getJson(a.baseUrl, `/sessions/${sessionId}`);
      expect(after.state).toBe('terminated');
      expect(after.terminated_reason).toBe('deleted by client');
      expect((await post(b.baseUrl, `/sessions/${sessionId}/start`)).status).toBe(409);
    } finally {
      sse.close();
      peer.close();
    }
  }, 180_000);

  it('30 concurrent creates across the three nodes never exceed the cluster cap, and every node takes a share', async () => {
    const cap = MAX_PENDING * NODE_COUNT;
    const results = await Promise.all(
      Array.from({ length: 30 }, (_, i) =>
        post(nodes[i % NODE_COUNT].baseUrl, '/sessions', { avatar_id: 'astronaut', model: 'mock' }),
      ),
    );
    const bodies = await Promise.all(results.map((res) => res.json()));
    const ok = bodies.filter((_, i) => results[i].status === 200).map((body) => body.session_id as string);
    const refused = results.filter((res) => res.status !== 200);
    expect(ok.length).toBeLessThanOrEqual(cap);
    expect(ok.length).toBeGreaterThan(0);
    for (const res of refused) {
      expect(res.status).toBe(503);
      expect(res.headers.get('retry-after')).toMatch(/^\d+$/u);
    }
    // Per node too: the directory holds at most MAX_PENDING created sessions on each.
    const perNode = new Map<ServiceProcess, number>();
    for (const id of ok) {
      const owner = await ownerOf(id);
      perNode.set(owner, (perNode.get(owner) ?? 0) + 1);
    }
    for (const count of perNode.values()) expect(count).toBeLessThanOrEqual(MAX_PENDING);
    expect(perNode.size).toBe(NODE_COUNT);
    // A full cluster keeps refusing until a slot frees.
    expect((await post(nodes[0].baseUrl, '/sessions', { avatar_id: 'astronaut', model: 'mock' })).status).toBe(
      ok.length === cap ? 503 : 200,
    );
    for (const id of ok)
      expect((await fetch(`${nodes[1].baseUrl}/sessions/${id}`, { method: 'DELETE' })).status).toBe(200);
    // The cluster counts catch up (each node publishes its load after a delete): the freed slots are placeable again.
    await until(
      async () => {
        const res = await post(nodes[2].baseUrl, '/sessions', { avatar_id: 'astronaut', model: 'mock' });
        if (res.status !== 200) return false;
        const id = (await res.json()).session_id;
        await fetch(`${nodes[2].baseUrl}/sessions/${id}`, { method: 'DELETE' });
        return true;
      },
      'a create to be placed again',
      10_000,
    );
  }, 120_000);

  it('an avatar made on node A is listed (and usable) on node C', async () => {
    const [a, , c] = nodes;
    const form = new FormData();
    form.append('name', 'Shared');
    form.append('base_avatar_id', 'astronaut');
    form.append(
      'image',
      new Blob([new Uint8Array(await fs.readFile(PORTRAIT_FIXTURE))], { type: 'image/png' }),
      'portrait.png',
    );
    const made = await fetch(`${a.baseUrl}/avatars/custom`, { method: 'POST', body: form });
    expect(made.status).toBe(200);
    const avatarId = (await made.json()).id as string;
    const listed = await getJson(c.baseUrl, '/avatars');
    expect(listed.map((avatar: any) => avatar.id)).toContain(avatarId);
    const created = await post(c.baseUrl, '/sessions', { avatar_id: avatarId, model: 'mock' });
    expect(created.status).toBe(200);
    const id = (await created.json()).session_id;
    expect((await fetch(`${c.baseUrl}/sessions/${id}`, { method: 'DELETE' })).status).toBe(200);
  }, 120_000);

  it('an offline job submitted on node A survives kill -9 of the node running it and completes on another; progress never goes backwards', async () => {
    const [a] = nodes;
    const created = await post(a.baseUrl, '/sessions', { avatar_id: 'astronaut', model: 'mock' });
    const sessionId = (await created.json()).session_id as string;
    const bundle = `/sessions/${sessionId}/rt-offline-bundle`;
    const pcm = (ms: number) => Buffer.from(tone(16000, ms, 300).buffer).toString('base64');
    // 60 s of video: seconds of rendering for the mock (~20× real time, docs/performance.md), many times the
    // ~0.1 s between the progress write that triggers the kill and the kill; the re-render stays short.
    const segments = Array.from({ length: OFFLINE_SEGMENTS }, () => ({
      audio_base64: pcm(1000),
      pause_after_ms: 9000,
    }));
    const submitted = await post(a.baseUrl, bundle, { segments });
    expect(submitted.status).toBe(200);
    const jobId = (await submitted.json()).job_id as string;
    const jobKey = `avs-bull:offline:${jobId}`;

    const runner = await until(
      async () => {
        // BullMQ keeps the worker name (the node id) in the job hash as `pb`.
        const [processedBy, progress] = await client.hmget(jobKey, 'pb', 'progress');
        return processedBy && Number(progress ?? 0) > 0 ? byId.get(processedBy) : undefined;
      },
      'a node to be rendering the job',
      60_000,
      20,
    );
    const observer = alive().find((node) => node !== runner)!;

    // A client polling the job through a node that survives.
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
    await runner.kill();
    const done = await until(
      async () => seen.find((job) => job.status === 'complete' || job.status === 'failed'),
      'the job to finish on another node',
      180_000,
      POLL_MS,
    );
    polling = false;
    await poller;
    expect(done.status).toBe('complete');

    const order = ['pending', 'running', 'complete'];
    for (let i = 1; i < seen.length; i++) {
      expect(seen[i].progress, `poll ${i}`).toBeGreaterThanOrEqual(seen[i - 1].progress);
      expect(order.indexOf(seen[i].status), `poll ${i}`).toBeGreaterThanOrEqual(order.indexOf(seen[i - 1].status));
    }
    const finishedBy = await client.hget(jobKey, 'pb');
    expect(finishedBy).not.toBe(nodeIdOf(runner.baseUrl));

    // Downloads work from every surviving node (the artifact is on the shared data directory).
    for (const node of alive()) {
      const res = await fetch(`${node.baseUrl}${bundle}/${jobId}/download`);
      expect(res.status).toBe(200);
      expect(res.headers.get('content-type')).toBe('video/mp4');
      const bytes = Buffer.from(await res.arrayBuffer());
      expect(bytes.subarray(4, 8).toString('latin1')).toBe('ftyp');
    }
  }, 300_000);

  it('kill -9 of a node turns its sessions into terminated (node_lost) on the others within the heartbeat TTL; a client streaming through another node is told', async () => {
    const survivors = alive();
    expect(survivors.length).toBeGreaterThanOrEqual(2);
    const ids: string[] = [];
    for (let i = 0; i < 2 * survivors.length; i++) {
      const res = await post(survivors[i % survivors.length].baseUrl, '/sessions', {
        avatar_id: 'astronaut',
        model: 'mock',
      });
      expect(res.status).toBe(200);
      ids.push((await res.json()).session_id);
    }
    const victim = survivors[0];
    const theirs: string[] = [];
    for (const id of ids) if ((await ownerOf(id)) === victim) theirs.push(id);
    expect(theirs.length).toBeGreaterThan(0);
    const watcher = survivors[1];
    const sse = await SseClient.open(`${watcher.baseUrl}/sessions/${theirs[0]}/events`);
    expect((await post(watcher.baseUrl, `/sessions/${theirs[0]}/start`)).status).toBe(200);

    const killedAt = Date.now();
    await victim.kill();
    const states = await until(
      async () => {
        const all = await Promise.all(theirs.map((id) => getJson(watcher.baseUrl, `/sessions/${id}`)));
        return all.every((s) => s.state === 'terminated') ? all : undefined;
      },
      "the lost node's sessions to be terminated",
      4 * NODE_TTL_S * 1000,
      100,
    );
    const elapsedMs = Date.now() - killedAt;
    // Expiry is at most one TTL after the last heartbeat; a request finding the owner gone reaps it then.
    expect(elapsedMs).toBeLessThanOrEqual(NODE_TTL_S * 1000 + 1_500);
    for (const state of states) expect(state.terminated_reason).toBe('node_lost');
    await sse.waitFor(
      (e) => e.type === 'session.terminated',
      2 * NODE_TTL_S * 1000,
      'session.terminated through the watching node',
    );
    sse.close();
    // Every other node agrees, and the lost sessions answer as tombstones (409 on start).
    for (const node of alive()) {
      for (const id of theirs) expect((await getJson(node.baseUrl, `/sessions/${id}`)).state).toBe('terminated');
      expect((await post(node.baseUrl, `/sessions/${theirs[0]}/start`)).status).toBe(409);
    }
    for (const id of ids.filter((id) => !theirs.includes(id)))
      await fetch(`${watcher.baseUrl}/sessions/${id}`, { method: 'DELETE' });
  }, 120_000);
});
