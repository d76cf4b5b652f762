import type { FastifyPluginAsync, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import type http from 'node:http';
import type { Duplex } from 'node:stream';
import { HttpError } from '../errors.ts';
import type { ClusterNode } from './index.ts';
import { FORWARDED_HEADER, RESERVATION_HEADER, forwardHttp, tunnelUpgrade } from './forward.ts';

/** `/sessions/<uuid>` and everything under it: what the session's owner node serves. */
const SESSION_PATH = /^\/sessions\/([0-9a-fA-F-]{36})(?:\/|\?|$)/u;
/** Offline job status and downloads: any node serves them (the queue and the shared bundles directory). */
const OFFLINE_READ_PATH = /^\/sessions\/[0-9a-fA-F-]{36}\/rt-offline-bundle\/[^/?]+(?:\/download)?(?:\?|$)/u;
/** Retry-After of a full cluster, as of a full node. */
const CAPACITY_RETRY_AFTER_S = 5;

interface Target {
  nodeId: string;
  url: string;
}

/**
 * Cluster routing (only registered in cluster mode). Every `/sessions/{id}/…` request is served here when
 * this node owns the session (or it is unknown or terminated) and otherwise forwarded to its owner:
 * HTTP and SSE by `forwardHttp`, WebSocket upgrades by a TCP tunnel in front of @fastify/websocket.
 * `POST /sessions` is placed by the placement script on the least-loaded node with room and forwarded
 * there with the reservation. A forwarded request (FORWARDED_HEADER) is always served where it lands.
 */
const clusterRouting: FastifyPluginAsync<{ node: ClusterNode }> = async (app, { node }) => {
  const registry = node.registry;
  const retryAfterS = Math.ceil(node.cluster.nodeTtlMs / 1000);
  const tokens = new WeakMap<FastifyRequest, string>();

  /** The live owner of a session when it is another node; null when this node serves the request. */
  async function remoteOwner(url: string, forwarded: boolean): Promise<Target | null> {
    if (forwarded) return null;
    const match = SESSION_PATH.exec(url);
    if (!match) return null;
    const record = await node.directory.lookup(match[1].toLowerCase());
    if (!record || record.node === registry.id || record.state === 'terminated') return null;
    const ownerUrl = await registry.urlOf(record.node);
    if (ownerUrl) return { nodeId: record.node, url: ownerUrl };
    // Its heartbeat expired: its sessions become tombstones now, and this node answers from those.
    await registry.reapIfLost(record.node);
    return null;
  }

  app.addHook('onRequest', async (request, reply) => {
    if (request.headers.upgrade) return; // WebSocket upgrades are routed before Fastify (below)
    const url = request.raw.url ?? '/';
    if (request.method === 'GET' && OFFLINE_READ_PATH.test(url)) return;
    const target = await remoteOwner(url, request.headers[FORWARDED_HEADER] !== undefined);
    if (!target) return;
    const sse = request.method === 'GET' && /\/events(?:\?|$)/u.test(url);
    const sessionId = SESSION_PATH.exec(url)![1].toLowerCase();
    await forwardHttp(request, reply, target.url, {
      selfId: registry.id,
      retryAfterS,
      onUnreachable: () => void registry.reapIfLost(target.nodeId).catch(() => undefined),
      // The owner died under a client's event stream: the client is told the session ended once the
      // cluster has declared it lost (within the node TTL), then the stream closes.
      onLostMidStream: sse
        ? (res) => {
            void node.awaitFate(sessionId, target.nodeId, 2 * node.cluster.nodeTtlMs).then((ended) => {
              if (ended && !res.destroyed) res.write('event: session.terminated\ndata: {}\n\n');
              res.end();
            });
          }
        : undefined,
    });
    return reply;
  });

  app.addHook('preHandler', async (request, reply) => {
    if (request.method !== 'POST' || request.routeOptions.url !== '/sessions') return;
    const reserved = request.headers[RESERVATION_HEADER];
    if (request.headers[FORWARDED_HEADER] !== undefined && typeof reserved === 'string') {
      tokens.set(request, reserved);
      return;
    }
    const placed = await registry.place();
    if (!placed) {
      throw new HttpError(503, 'every node is at its limit of sessions created but not started; start or delete some, or retry later', {
        'retry-after': String(CAPACITY_RETRY_AFTER_S),
      });
    }
    if (placed.nodeId === registry.id) {
      tokens.set(request, placed.token);
      return;
    }
    const ownerUrl = await registry.urlOf(placed.nodeId);
    if (!ownerUrl) {
      await registry.release(placed.nodeId, placed.token);
      throw new HttpError(503, 'the chosen node left the cluster; retry', { 'retry-after': '1' });
    }
    await forwardHttp(request, reply, ownerUrl, {
      selfId: registry.id,
      retryAfterS,
      body: JSON.stringify(request.body),
      headers: { [RESERVATION_HEADER]: placed.token },
      onUnreachable: () => void registry.release(placed.nodeId, placed.token).catch(() => undefined),
    });
    return reply;
  });

  // Counts change with creates, starts and deletes: published at once, with the reservation now counted.
  app.addHook('onResponse', async (request) => {
    const token = tokens.get(request);
    if (token || (request.url.startsWith('/sessions') && request.method !== 'GET')) registry.publishSoon(token);
  });

  // WebSocket upgrades of sessions another node owns are tunnelled there; the rest go to @fastify/websocket.
  app.addHook('onReady', async () => {
    const server = app.server;
    const listeners = server.listeners('upgrade') as Array<(req: http.IncomingMessage, socket: Duplex, head: Buffer) => void>;
    server.removeAllListeners('upgrade');
    server.on('upgrade', (req: http.IncomingMessage, socket: Duplex, head: Buffer) => {
      socket.pause();
      remoteOwner(req.url ?? '/', req.headers[FORWARDED_HEADER] !== undefined)
        .catch(() => null)
        .then((target) => {
          if (target) {
            tunnelUpgrade(req, socket, head, target.url, registry.id);
            return;
          }
          socket.resume();
          for (const listener of listeners) listener.call(server, req, socket, head);
        });
    });
  });
};

export default fp(clusterRouting, { name: 'cluster-routing' });
