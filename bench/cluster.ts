/**
 * Cluster mode figures (docs/scaling.md): two real service nodes on a real redis-server on this machine.
 *
 * - forwarding overhead: `GET /sessions/{id}` answered by the owner directly and through the other node
 *   (one forwarding hop), alternated so both see the same load; p50/p95 of each and of the difference.
 * - Redis cost of one session (create, start, one speak turn, delete) and of one turn alone, counted with
 *   `INFO commandstats` (commands) and `INFO stats` (bytes in and out), with the heartbeats of an equally
 *   long idle interval subtracted; and the size of a directory record (`MEMORY USAGE`).
 */
import { Redis } from 'ioredis';
import { nodeIdOf } from '../src/cluster/node.ts';
import { NODES_KEY, sessionKey } from '../src/cluster/scripts.ts';
import { startRedis } from '../test/helpers/redis-server.ts';
import { startServiceProcess, type ServiceProcess } from '../test/helpers/service-process.ts';
import { percentile } from './stats.ts';

/** Requests per path: enough for a stable p95 in a few seconds. */
const SAMPLES = 400;
const NODE_TTL_S = 10;

interface RedisCounters {
  calls: number;
  bytesIn: number;
  bytesOut: number;
}

async function counters(redis: Redis): Promise<RedisCounters> {
  const commandstats = await redis.info('commandstats');
  let calls = 0;
  for (const match of commandstats.matchAll(/calls=(\d+)/gu)) calls += Number(match[1]);
  const stats = await redis.info('stats');
  const bytesIn = Number(/total_net_input_bytes:(\d+)/u.exec(stats)?.[1] ?? 0);
  const bytesOut = Number(/total_net_output_bytes:(\d+)/u.exec(stats)?.[1] ?? 0);
  // The two INFO calls of this reading count themselves; subtract them.
  return { calls: calls - 1, bytesIn, bytesOut };
}

const diff = (a: RedisCounters, b: RedisCounters): RedisCounters => ({ calls: b.calls - a.calls, bytesIn: b.bytesIn - a.bytesIn, bytesOut: b.bytesOut - a.bytesOut });
const minus = (a: RedisCounters, b: RedisCounters): RedisCounters => ({ calls: a.calls - b.calls, bytesIn: a.bytesIn - b.bytesIn, bytesOut: a.bytesOut - b.bytesOut });

async function post(base: string, route: string, body?: unknown): Promise<Response> {
  return fetch(`${base}${route}`, {
    method: 'POST',
    headers: body === undefined ? {} : { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
}

async function timedGet(url: string): Promise<number> {
  const started = performance.now();
  const res = await fetch(url);
  await res.arrayBuffer();
  if (!res.ok) throw new Error(`GET ${res.status}`);
  return performance.now() - started;
}

async function waitIdle(base: string, sessionId: string): Promise<void> {
  const deadline = Date.now() + 60_000;
  while (Date.now() < deadline) {
    const info = (await (await fetch(`${base}/sessions/${sessionId}`)).json()) as { pipeline: string };
    if (info.pipeline === 'idle') return;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  throw new Error('turn did not end');
}

export async function benchCluster(): Promise<Record<string, unknown>> {
  const redisServer = await startRedis();
  const redis = new Redis(redisServer.url);
  const nodes: ServiceProcess[] = [];
  try {
    const env = { SERVICE_REDIS_URL: redisServer.url, SERVICE_NODE_TTL_S: String(NODE_TTL_S), SERVICE_LOG_LEVEL: 'warn' };
    nodes.push(await startServiceProcess({ env }));
    nodes.push(await startServiceProcess({ env, avatarsDir: nodes[0].avatarsDir, dataDir: nodes[0].dataDir }));

    // Heartbeats of both nodes over an idle interval: the background to subtract.
    const idleMs = 5_000;
    const idleStart = await counters(redis);
    await new Promise((resolve) => setTimeout(resolve, idleMs));
    const idle = diff(idleStart, await counters(redis));
    const background = (ms: number): RedisCounters => ({
      calls: Math.round((idle.calls * ms) / idleMs),
      bytesIn: Math.round((idle.bytesIn * ms) / idleMs),
      bytesOut: Math.round((idle.bytesOut * ms) / idleMs),
    });

    // One whole session through the node that does not own it (the round-robin case).
    const sessionStarted = performance.now();
    const before = await counters(redis);
    const created = await post(nodes[0].baseUrl, '/sessions', { avatar_id: 'astronaut', model: 'mock' });
    const sessionId = ((await created.json()) as { session_id: string }).session_id;
    const owner = JSON.parse((await redis.get(sessionKey(sessionId)))!).node as string;
    const ownerNode = nodes.find((node) => nodeIdOf(node.baseUrl) === owner)!;
    const other = nodes.find((node) => node !== ownerNode)!;
    const recordBytes = Number(await redis.memory('USAGE', sessionKey(sessionId)));
    await post(other.baseUrl, `/sessions/${sessionId}/start`);
    const turnStarted = performance.now();
    const beforeTurn = await counters(redis);
    await post(other.baseUrl, `/sessions/${sessionId}/speak`, { text: 'One short sentence.' });
    // Polled on the owner (no Redis): the figure is the turn's own traffic through the forwarding node.
    await waitIdle(ownerNode.baseUrl, sessionId);
    const turn = minus(diff(beforeTurn, await counters(redis)), background(performance.now() - turnStarted));
    await fetch(`${other.baseUrl}/sessions/${sessionId}`, { method: 'DELETE' });
    await new Promise((resolve) => setTimeout(resolve, 200));
    const session = minus(diff(before, await counters(redis)), background(performance.now() - sessionStarted));
    const tombstoneBytes = Number(await redis.memory('USAGE', sessionKey(sessionId)));
    const nodeHashBytes = Number(await redis.memory('USAGE', `avs:node:${owner}`));
    const nodesSetBytes = Number(await redis.memory('USAGE', NODES_KEY));

    // Forwarding overhead on a live session.
    const live = await post(nodes[0].baseUrl, '/sessions', { avatar_id: 'astronaut', model: 'mock' });
    const liveId = ((await live.json()) as { session_id: string }).session_id;
    const liveOwner = JSON.parse((await redis.get(sessionKey(liveId)))!).node as string;
    const direct = nodes.find((node) => nodeIdOf(node.baseUrl) === liveOwner)!;
    const hop = nodes.find((node) => node !== direct)!;
    const directMs: number[] = [];
    const forwardedMs: number[] = [];
    for (let i = 0; i < 20; i++) {
      await timedGet(`${direct.baseUrl}/sessions/${liveId}`);
      await timedGet(`${hop.baseUrl}/sessions/${liveId}`);
    }
    for (let i = 0; i < SAMPLES; i++) {
      directMs.push(await timedGet(`${direct.baseUrl}/sessions/${liveId}`));
      forwardedMs.push(await timedGet(`${hop.baseUrl}/sessions/${liveId}`));
    }
    await fetch(`${direct.baseUrl}/sessions/${liveId}`, { method: 'DELETE' });
    const round = (v: number) => Math.round(v * 100) / 100;
    const p50Direct = percentile(directMs, 50);
    const p95Direct = percentile(directMs, 95);
    const p50Forwarded = percentile(forwardedMs, 50);
    const p95Forwarded = percentile(forwardedMs, 95);
    return {
      forwarding: {
        samples: SAMPLES,
        direct_p50_ms: round(p50Direct),
        direct_p95_ms: round(p95Direct),
        forwarded_p50_ms: round(p50Forwarded),
        forwarded_p95_ms: round(p95Forwarded),
        overhead_p50_ms: round(p50Forwarded - p50Direct),
        overhead_p95_ms: round(p95Forwarded - p95Direct),
      },
      redis: {
        heartbeat_calls_per_node_per_s: round((idle.calls / (idleMs / 1000)) / nodes.length),
        heartbeat_bytes_per_node_per_s: Math.round((idle.bytesIn + idle.bytesOut) / (idleMs / 1000) / nodes.length),
        session_calls: session.calls,
        session_bytes_in: session.bytesIn,
        session_bytes_out: session.bytesOut,
        turn_calls: turn.calls,
        turn_bytes_in: turn.bytesIn,
        turn_bytes_out: turn.bytesOut,
        directory_record_bytes: recordBytes,
        tombstone_bytes: tombstoneBytes,
        node_hash_bytes: nodeHashBytes,
        nodes_set_bytes: nodesSetBytes,
      },
    };
  } finally {
    await Promise.all(nodes.map((node) => node.stop()));
    redis.disconnect();
    await redisServer.stop();
  }
}
