/**
 * Cluster mode figures (docs/scaling.md): two real service nodes on a real redis-server on this machine.
 *
 * - Redis traffic of one session and of one turn, counted exactly: each node reaches Redis through its own
 *   counting proxy (bench/redis-proxy.ts), which records every command each connection sends with its
 *   request and reply bytes; MONITOR adds how many commands each script call ran inside Redis. A step (create, events, start, a speak turn, a status read, delete) counts
 *   the commands the service's own connection sent during it, without the heartbeat ticks that fell in it
 *   (a tick is the heartbeat script followed by the expiry query), and without BullMQ's connections,
 *   which poll all the time whatever the sessions do. Both routings are measured: every request sent to
 *   a node that does not own the session (round-robin balancer), and every request sent to the owner
 *   (the slot-routing balancer of docs/scaling.md).
 * - Background per node over an idle window: heartbeat ticks, and BullMQ's polling and stalled checks.
 * - Sizes (`MEMORY USAGE`) of a directory record, a tombstone, a node hash and a slot key.
 * - Forwarding overhead: `GET /sessions/{id}` answered by the owner directly and through the other node
 *   (one forwarding hop), alternated so both see the same load; p50/p95 of each and of the difference.
 *   Only meaningful on a quiet machine: the load average is reported with it.
 */
import { createHash } from 'node:crypto';
import os from 'node:os';
import { Redis } from 'ioredis';
import { nodeIdOf } from '../src/cluster/node.ts';
import {
  AVATARS_KEY,
  BEATS_KEY,
  EXPIRED_LUA,
  HEARTBEAT_LUA,
  NODES_KEY,
  PLACE_LUA,
  REAP_LUA,
  SLOT_CLAIM_LUA,
  SLOT_RELEASE_LUA,
  VOICE_CREATE_LUA,
  nodeKey,
  sessionKey,
  slotKey,
} from '../src/cluster/scripts.ts';
import { startRedis } from '../test/helpers/redis-server.ts';
import { startServiceProcess, type ServiceProcess } from '../test/helpers/service-process.ts';
import { SseClient } from '../test/helpers/sse.ts';
import { startCountingProxy, type CountingProxy, type ProxiedCommand, type ProxiedConnection } from './redis-proxy.ts';
import { percentile } from './stats.ts';

/** Requests per path: enough for a stable p95 in a few seconds. */
const SAMPLES = 400;
/** The default TTL: the heartbeat ticks every TTL/3. */
const NODE_TTL_S = 10;
/** The idle window for the background rates: nine heartbeat ticks per node and several BullMQ stalled checks. */
const IDLE_WINDOW_MS = 30_000;
/** After a step: its load publication (setImmediate) and the last replies arrive well within this on loopback. */
const SETTLE_MS = 300;
/** A mock speak turn of one sentence takes ~2 s; this is a hang. */
const TURN_TIMEOUT_MS = 60_000;
/** Cluster sizes the placement script is timed at (docs/scaling.md's table). */
const PLACEMENT_CLUSTER_SIZES = [10, 100, 1000];
/** Placements timed per cluster size: enough for a stable mean of Redis's own per-call time. */
const PLACEMENT_CALLS = 200;
/** The reservation TTL the service uses (src/cluster/node.ts RESERVATION_TTL_MS). */
const PLACEMENT_RESERVATION_MS = 30_000;

const sha1 = (text: string) => createHash('sha1').update(text).digest('hex');
/** The service's scripts by SHA (ioredis sends EVALSHA of the script text's SHA1). */
const SCRIPTS = new Map<string, string>(
  Object.entries({
    place: PLACE_LUA,
    heartbeat: HEARTBEAT_LUA,
    reap: REAP_LUA,
    expired: EXPIRED_LUA,
    slot_claim: SLOT_CLAIM_LUA,
    slot_release: SLOT_RELEASE_LUA,
    voice_create: VOICE_CREATE_LUA,
  }).map(([name, lua]) => [sha1(lua), name]),
);
/** A key as a pattern: session ids and node ids replaced, so the lists read the same on every run. */
const keyPattern = (key: string) =>
  key
    .replace(/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/gu, '<session>')
    .replace(/\b[0-9a-f]{16}\b/gu, '<node>');
const commandName = (command: ProxiedCommand) => {
  if (command.sha) return `script:${SCRIPTS.get(command.sha) ?? 'bullmq'}`;
  return command.key !== null && command.key.startsWith('avs')
    ? `${command.name} ${keyPattern(command.key)}`
    : command.name;
};

/** The service's own connection: the one that runs the service's scripts (the others are BullMQ's and the subscriber). */
const isService = (connection: ProxiedConnection) =>
  !connection.subscriber && connection.commands.some((command) => command.sha !== null && SCRIPTS.has(command.sha));
const isBullmq = (connection: ProxiedConnection) => !connection.subscriber && !isService(connection);

interface Traffic {
  /** Commands sent (a script call is one). */
  commands: number;
  /** Commands Redis executed: those sent plus the ones scripts ran inside Redis. */
  executed: number;
  bytesIn: number;
  bytesOut: number;
  /** Command names in order (scripts by name). */
  names: string[];
}

const empty = (): Traffic => ({ commands: 0, executed: 0, bytesIn: 0, bytesOut: 0, names: [] });
function add(total: Traffic, command: ProxiedCommand): void {
  total.commands++;
  total.executed += 1 + command.inner;
  total.bytesIn += command.bytesIn;
  total.bytesOut += command.bytesOut;
  total.names.push(command.inner > 0 ? `${commandName(command)}(+${command.inner})` : commandName(command));
}

/** Heartbeat ticks on a service connection: each expiry query and the heartbeat just before it (same tick). */
function tickCommands(connection: ProxiedConnection): Set<ProxiedCommand> {
  const ticks = new Set<ProxiedCommand>();
  connection.commands.forEach((command, i) => {
    if (commandName(command) !== 'script:expired') return;
    ticks.add(command);
    for (let j = i - 1; j >= 0; j--) {
      if (commandName(connection.commands[j]) === 'script:heartbeat') {
        ticks.add(connection.commands[j]);
        break;
      }
    }
  });
  return ticks;
}

/** What one node's service connection sent in [from, to), heartbeat ticks left out (and counted). */
function serviceTraffic(proxy: CountingProxy, from: number, to: number): Traffic & { ticks: number } {
  const total = { ...empty(), ticks: 0 };
  for (const connection of proxy.connections.filter(isService)) {
    const ticks = tickCommands(connection);
    for (const command of connection.commands) {
      if (command.at < from || command.at >= to) continue;
      if (ticks.has(command)) {
        if (commandName(command) === 'script:expired') total.ticks++;
        continue;
      }
      add(total, command);
    }
  }
  return total;
}

/** Everything a node's connections of one kind sent in [from, to) (ticks included). */
function trafficOf(
  proxy: CountingProxy,
  which: (connection: ProxiedConnection) => boolean,
  from: number,
  to: number,
): Traffic {
  const total = empty();
  for (const connection of proxy.connections.filter(which)) {
    for (const command of connection.commands) if (command.at >= from && command.at < to) add(total, command);
  }
  return total;
}

/** A script call seen by MONITOR, with the commands it ran inside Redis (the `lua` lines that follow it). */
interface MonitoredScript {
  inner: number;
}

/**
 * Watches MONITOR: per client address, every script call (EVAL, EVALSHA) in order with its inner command
 * count. Redis 7 prints a script's own commands (source `lua`) right after the call, and nothing else runs
 * while a script does, so they belong to the last call printed.
 */
/** `redis.monitor()` opens a connection of its own; `stop()` closes it. */
async function watchScripts(redis: Redis): Promise<{ byAddress: Map<string, MonitoredScript[]>; stop(): void }> {
  const byAddress = new Map<string, MonitoredScript[]>();
  let last: MonitoredScript | null = null;
  const monitor = await redis.monitor();
  monitor.on('monitor', (_time: string, args: string[], source: string) => {
    if (source === 'lua') {
      if (last) last.inner++;
      return;
    }
    const name = (args[0] ?? '').toLowerCase();
    last = null;
    if (name !== 'eval' && name !== 'evalsha') return;
    last = { inner: 0 };
    if (!byAddress.has(source)) byAddress.set(source, []);
    byAddress.get(source)!.push(last);
  });
  return { byAddress, stop: () => monitor.disconnect() };
}

/**
 * Gives every proxied script call its inner command count. A connection's calls and MONITOR's lines for
 * its address are in the same order; they are paired from the end, because an EVALSHA refused with
 * NOSCRIPT (a script's first use in the cluster, before any measured step) may be missing from MONITOR.
 */
function attachInner(proxies: CountingProxy[], byAddress: Map<string, MonitoredScript[]>): void {
  for (const connection of proxies.flatMap((proxy) => proxy.connections)) {
    const seen = byAddress.get(`127.0.0.1:${connection.upstreamPort}`) ?? [];
    const calls = connection.commands.filter((command) => command.sha !== null);
    for (let i = 1; i <= Math.min(seen.length, calls.length); i++)
      calls[calls.length - i].inner = seen[seen.length - i].inner;
  }
}

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

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * The placement script's cost in Redis as the cluster grows: N registered node hashes (with room, so
 * every node is scored), then PLACEMENT_CALLS placements. `INFO commandstats` gives Redis's own time per
 * call (no network) and the commands each call ran inside Redis. Run on an emptied Redis after the nodes stopped.
 */
async function placementCost(
  redis: Redis,
): Promise<Array<{ nodes: number; usec_per_call: number; inner_commands_per_call: number }>> {
  const stat = async () => {
    const text = await redis.info('commandstats');
    const of = (command: string) => {
      const match = new RegExp(`^cmdstat_${command}:calls=(\\d+),usec=(\\d+)`, 'mu').exec(text);
      return { calls: Number(match?.[1] ?? 0), usec: Number(match?.[2] ?? 0) };
    };
    const inner = ['time', 'smembers', 'hmget', 'zremrangebyscore', 'zcard', 'zadd', 'pexpire'].reduce(
      (sum, command) => sum + of(command).calls,
      0,
    );
    return { evalsha: of('evalsha'), inner };
  };
  const out: Array<{ nodes: number; usec_per_call: number; inner_commands_per_call: number }> = [];
  redis.defineCommand('benchPlace', { numberOfKeys: 0, lua: PLACE_LUA });
  const place = (token: string) =>
    (redis as unknown as { benchPlace(...args: Array<string | number>): Promise<string | null> }).benchPlace(
      token,
      PLACEMENT_RESERVATION_MS,
      '',
      '',
    );
  for (const size of PLACEMENT_CLUSTER_SIZES) {
    await redis.flushall();
    const setup = redis.pipeline();
    for (let i = 0; i < size; i++) {
      const id = i.toString(16).padStart(16, '0');
      setup.hset(nodeKey(id), {
        url: `http://10.0.${i >> 8}.${i & 255}:8000`,
        maxActive: 12,
        maxPending: 12 * PLACEMENT_CALLS,
        active: 0,
        pending: 0,
        draining: 0,
      });
      setup.sadd(NODES_KEY, id);
    }
    await setup.exec();
    await place('warm-up'); // loads the script (EVALSHA refused once, then EVAL)
    const before = await stat();
    for (let i = 0; i < PLACEMENT_CALLS; i++) {
      if (!(await place(`bench-${size}-${i}`))) throw new Error('placement found no node');
    }
    const after = await stat();
    const calls = after.evalsha.calls - before.evalsha.calls;
    out.push({
      nodes: size,
      usec_per_call: Math.round(((after.evalsha.usec - before.evalsha.usec) / calls) * 10) / 10,
      inner_commands_per_call: Math.round((after.inner - before.inner) / calls),
    });
  }
  return out;
}

interface StepFigure {
  step: string;
  /** Commands sent by the two nodes (a script call is one). */
  commands: number;
  /** Commands Redis executed for them (the scripts' inner commands too). */
  executed: number;
  bytes_in: number;
  bytes_out: number;
  /** Commands of the node the client sent the request to, and of the owner (none listed when it is the same node). */
  entry: string[];
  owner: string[];
  /** Heartbeat ticks that fell in the step (left out of the counts). */
  ticks_left_out: number;
}

/** A client step's time window and the nodes involved; its figure is read once MONITOR's counts are attached. */
interface StepWindow {
  step: string;
  entry: ServiceProcess;
  owner: ServiceProcess;
  from: number;
  to: number;
}

export async function benchCluster(): Promise<Record<string, unknown>> {
  const redisServer = await startRedis();
  const redis = new Redis(redisServer.url);
  const scripts = await watchScripts(redis);
  const proxies: CountingProxy[] = [];
  const nodes: ServiceProcess[] = [];
  try {
    for (let i = 0; i < 2; i++) proxies.push(await startCountingProxy(redisServer.port, sha1));
    const env = (i: number) => ({
      SERVICE_REDIS_URL: `redis://127.0.0.1:${proxies[i].port}`,
      SERVICE_NODE_TTL_S: String(NODE_TTL_S),
      SERVICE_NODE_SLOT: String(i),
      SERVICE_LOG_LEVEL: 'warn',
    });
    nodes.push(await startServiceProcess({ env: env(0) }));
    nodes.push(await startServiceProcess({ env: env(1), avatarsDir: nodes[0].avatarsDir, dataDir: nodes[0].dataDir }));
    const proxyOf = (node: ServiceProcess) => proxies[nodes.indexOf(node)];
    const nodeById = (id: string) => nodes.find((node) => nodeIdOf(node.baseUrl) === id)!;
    const ownerOf = async (sessionId: string) =>
      nodeById(JSON.parse((await redis.get(sessionKey(sessionId)))!).node as string);

    // Warm-up: each node places, creates and deletes once, so each connection has sent every script it uses
    // once in full (ioredis sends a script's text on its first use on a connection, its SHA after that).
    for (const node of nodes) {
      const warm = (
        (await (await post(node.baseUrl, '/sessions', { avatar_id: 'astronaut', model: 'mock' })).json()) as {
          session_id: string;
        }
      ).session_id;
      await fetch(`${node.baseUrl}/sessions/${warm}`, { method: 'DELETE' });
    }
    // Background: every connection of each node over an idle window.
    await sleep(2_000);
    const idleFrom = performance.now();
    await sleep(IDLE_WINDOW_MS);
    const idleTo = performance.now();

    /** Runs one client step; the owner is read after it (a create learns it then). */
    const measure = async (
      step: string,
      entry: ServiceProcess,
      ownerAfter: () => Promise<ServiceProcess>,
      run: () => Promise<void>,
    ): Promise<StepWindow> => {
      const from = performance.now();
      await run();
      await sleep(SETTLE_MS);
      return { step, entry, owner: await ownerAfter(), from, to: performance.now() };
    };

    /** One session, every request sent to `entry`: create, events, start, one speak turn, one status read, delete. */
    const session = async (entry: ServiceProcess, expectOwner: (owner: ServiceProcess) => boolean) => {
      let id = '';
      let owner = entry;
      let sse: SseClient | null = null;
      const windows: StepWindow[] = [];
      windows.push(
        await measure(
          'create',
          entry,
          async () => (owner = await ownerOf(id)),
          async () => {
            const created = await post(entry.baseUrl, '/sessions', { avatar_id: 'astronaut', model: 'mock' });
            id = ((await created.json()) as { session_id: string }).session_id;
          },
        ),
      );
      if (!expectOwner(owner)) throw new Error('the session was not placed where the scenario needs it');
      const recordBytes = Number(await redis.memory('USAGE', sessionKey(id)));
      windows.push(
        await measure(
          'events stream opened',
          entry,
          async () => owner,
          async () => {
            sse = await SseClient.open(`${entry.baseUrl}/sessions/${id}/events`);
          },
        ),
      );
      windows.push(
        await measure(
          'start',
          entry,
          async () => owner,
          async () => {
            if ((await post(entry.baseUrl, `/sessions/${id}/start`)).status !== 200) throw new Error('start failed');
          },
        ),
      );
      windows.push(
        await measure(
          'speak turn (until status idle on the stream)',
          entry,
          async () => owner,
          async () => {
            const from = sse!.events.length;
            if ((await post(entry.baseUrl, `/sessions/${id}/speak`, { text: 'One short sentence.' })).status !== 200)
              throw new Error('speak failed');
            await sse!.waitFor(
              (e) => e.type === 'status' && e.data.stage === 'idle',
              TURN_TIMEOUT_MS,
              'the turn to end',
              from,
            );
          },
        ),
      );
      windows.push(
        await measure(
          'status read (GET /sessions/{id})',
          entry,
          async () => owner,
          async () => {
            await (await fetch(`${entry.baseUrl}/sessions/${id}`)).arrayBuffer();
          },
        ),
      );
      windows.push(
        await measure(
          'delete',
          entry,
          async () => owner,
          async () => {
            if ((await fetch(`${entry.baseUrl}/sessions/${id}`, { method: 'DELETE' })).status !== 200)
              throw new Error('delete failed');
            await sse!.waitFor((e) => e.type === 'session.terminated', TURN_TIMEOUT_MS, 'session.terminated');
          },
        ),
      );
      (sse as SseClient | null)?.close();
      const tombstoneBytes = Number(await redis.memory('USAGE', sessionKey(id)));
      return { windows, recordBytes, tombstoneBytes, ownerNode: owner };
    };

    // Round-robin: a ballast session on one node makes placement choose the other, and every request of the
    // measured session goes to the node that does not own it.
    const ballast = (
      (await (await post(nodes[0].baseUrl, '/sessions', { avatar_id: 'astronaut', model: 'mock' })).json()) as {
        session_id: string;
      }
    ).session_id;
    const ballastOwner = await ownerOf(ballast);
    await sleep(SETTLE_MS);
    const roundRobin = await session(ballastOwner, (owner) => owner !== ballastOwner);
    // Slot routing: every request goes to the owner (placement keeps the session where it was asked: the other node holds the ballast).
    const sticky = await session(roundRobin.ownerNode, (owner) => owner === roundRobin.ownerNode);
    await fetch(`${ballastOwner.baseUrl}/sessions/${ballast}`, { method: 'DELETE' });

    const sizes = {
      directory_record_bytes: roundRobin.recordBytes,
      tombstone_bytes: roundRobin.tombstoneBytes,
      node_hash_bytes: Number(await redis.memory('USAGE', nodeKey(nodeIdOf(nodes[0].baseUrl)))),
      slot_key_bytes: Number(await redis.memory('USAGE', slotKey(0))),
      nodes_set_bytes: Number(await redis.memory('USAGE', NODES_KEY)),
      beats_zset_bytes: Number(await redis.memory('USAGE', BEATS_KEY)),
      avatars_hash_bytes: Number(await redis.memory('USAGE', AVATARS_KEY)),
      avatars_in_hash: await redis.hlen(AVATARS_KEY),
    };

    // MONITOR's lines of the last steps have arrived: the script calls get their inner counts.
    await sleep(SETTLE_MS);
    attachInner(proxies, scripts.byAddress);
    scripts.stop();

    const figure = (window: StepWindow): StepFigure => {
      const ofEntry = serviceTraffic(proxyOf(window.entry), window.from, window.to);
      const ofOwner =
        window.entry === window.owner
          ? { ...empty(), ticks: 0 }
          : serviceTraffic(proxyOf(window.owner), window.from, window.to);
      return {
        step: window.step,
        commands: ofEntry.commands + ofOwner.commands,
        executed: ofEntry.executed + ofOwner.executed,
        bytes_in: ofEntry.bytesIn + ofOwner.bytesIn,
        bytes_out: ofEntry.bytesOut + ofOwner.bytesOut,
        entry: ofEntry.names,
        owner: ofOwner.names,
        ticks_left_out: ofEntry.ticks + ofOwner.ticks,
      };
    };
    const totalOf = (steps: StepFigure[]) => ({
      commands: steps.reduce((sum, step) => sum + step.commands, 0),
      executed: steps.reduce((sum, step) => sum + step.executed, 0),
      bytes_in: steps.reduce((sum, step) => sum + step.bytes_in, 0),
      bytes_out: steps.reduce((sum, step) => sum + step.bytes_out, 0),
    });
    const perNodePerS = (which: (connection: ProxiedConnection) => boolean) => {
      const totals = proxies.map((proxy) => trafficOf(proxy, which, idleFrom, idleTo));
      const seconds = ((idleTo - idleFrom) / 1000) * nodes.length;
      const rate = (key: 'commands' | 'executed' | 'bytesIn' | 'bytesOut', digits: number) =>
        Math.round((totals.reduce((sum, t) => sum + t[key], 0) / seconds) * 10 ** digits) / 10 ** digits;
      return {
        commands_per_s: rate('commands', 2),
        executed_per_s: rate('executed', 2),
        bytes_in_per_s: rate('bytesIn', 0),
        bytes_out_per_s: rate('bytesOut', 0),
        commands: [...new Set(totals.flatMap((t) => t.names))].sort(),
      };
    };
    const roundRobinSteps = roundRobin.windows.map(figure);
    const stickySteps = sticky.windows.map(figure);

    // Forwarding overhead on a live session.
    const loadBefore = os.loadavg()[0];
    const live = await post(nodes[0].baseUrl, '/sessions', { avatar_id: 'astronaut', model: 'mock' });
    const liveId = ((await live.json()) as { session_id: string }).session_id;
    const direct = await ownerOf(liveId);
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
    const loadAfter = os.loadavg()[0];
    // The placement script alone, at cluster sizes this machine cannot run: the nodes stop, Redis is emptied.
    await Promise.all(nodes.map((node) => node.stop()));
    const placement = await placementCost(redis);
    const round = (v: number) => Math.round(v * 100) / 100;
    const p50Direct = percentile(directMs, 50);
    const p95Direct = percentile(directMs, 95);
    const p50Forwarded = percentile(forwardedMs, 50);
    const p95Forwarded = percentile(forwardedMs, 95);
    return {
      redis: {
        round_robin_session: totalOf(roundRobinSteps),
        round_robin_steps: roundRobinSteps,
        slot_routed_session: totalOf(stickySteps),
        slot_routed_steps: stickySteps,
        background_per_node: { heartbeat: perNodePerS(isService), bullmq: perNodePerS(isBullmq) },
        sizes,
        placement_script: placement,
      },
      forwarding: {
        samples: SAMPLES,
        load_average_1m_before: round(loadBefore),
        load_average_1m_after: round(loadAfter),
        direct_p50_ms: round(p50Direct),
        direct_p95_ms: round(p95Direct),
        forwarded_p50_ms: round(p50Forwarded),
        forwarded_p95_ms: round(p95Forwarded),
        overhead_p50_ms: round(p50Forwarded - p50Direct),
        overhead_p95_ms: round(p95Forwarded - p95Direct),
      },
    };
  } finally {
    scripts.stop();
    await Promise.all(nodes.map((node) => node.stop()));
    redis.disconnect();
    await Promise.all(proxies.map((proxy) => proxy.close()));
    await redisServer.stop();
  }
}
