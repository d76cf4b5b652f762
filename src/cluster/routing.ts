import type { FastifyPluginAsync, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import type http from 'node:http';
import type { Duplex } from 'node:stream';
import { createReadStream } from 'node:fs';
import { HttpError } from '../errors.ts';
import type { ClusterNode } from './index.ts';
import { FORWARDED_HEADER, RESERVATION_HEADER, forwardHttp, tunnelUpgrade } from './forward.ts';
import { signForward, verifyForward } from './internal-auth.ts';
import { finishedRecording } from '../recording/registry.ts';
import { NODE_LOST } from './scripts.ts';
import type { RequestOriginGuard } from '../security/request-origin.ts';

/** `/sessions/<uuid>` and everything under it: what the session's owner node serves. */
const SESSION_PATH = /^\/sessions\/([0-9a-fA-F-]{36})(?:\/|\?|$)/u;
/** Offline job status and downloads: any node serves them (the queue and the shared bundles directory). */
const OFFLINE_READ_PATH = /^\/sessions\/[0-9a-fA-F-]{36}\/rt-offline-bundle\/[^/?]+(?:\/download)?(?:\?|$)/u;
/** A recording's status and download: the owner serves them even after the session ended (its files are there). */
const RECORDING_READ_PATH = /^\/sessions\/[0-9a-fA-F-]{36}\/rt-recording(\/artifact)?(?:\?|$)/u;
/** A session's transcript: kept in its owner's LevelDB, so the owner serves it after the session ended too (while it lives). */
const TRANSCRIPT_READ_PATH = /^\/sessions\/[0-9a-fA-F-]{36}\/transcript(?:\?|$)/u;
/**
 * A create placed on a node that turns out unreachable (it died, its heartbeat has not expired yet) is
 * placed again without it, this many times in all; then the client gets 503.
 */
const MAX_PLACEMENTS = 3;
/** Retry-After of a full cluster, as of a full node. */
const CAPACITY_RETRY_AFTER_S = 5;

interface Target {
  nodeId: string;
  url: string;
}

/**
 * Where a request goes: forwarded to a live owner, answered from the owner's recording files on the shared
 * data directory (`lost`: the session ended because its owner was lost), or served here (null).
 */
type Route = { forward: Target } | { recordingOf: string; lost: boolean } | null;

/**
 * The artifact's 404 for a session whose node was lost: a recording in progress there was written by that
 * node's process alone, so nobody can finish it; the client is told so rather than just "no recording".
 */
const LOST_RECORDING_DETAIL = `no finished recording for this session: its node was lost (${NODE_LOST}), and a recording still in progress there cannot be finished`;

/** True when a node signed this request (FORWARDED_HEADER verified against the cluster secret). */
export function signedByNode(secret: string, method: string, url: string, headers: http.IncomingHttpHeaders): boolean {
  return verifyForward(secret, headers[FORWARDED_HEADER], method, url, headers[RESERVATION_HEADER]);
}

/** Drops the internal headers of a request that no node signed: it is routed as any client's request. */
function authenticate(secret: string, method: string, url: string, headers: http.IncomingHttpHeaders): boolean {
  if (headers[FORWARDED_HEADER] === undefined && headers[RESERVATION_HEADER] === undefined) return false;
  if (signedByNode(secret, method, url, headers)) return true;
  delete headers[FORWARDED_HEADER];
  delete headers[RESERVATION_HEADER];
  return false;
}

/**
 * Cluster routing (only registered in cluster mode). Every `/sessions/{id}/…` request is served here when
 * this node owns the session (or it is unknown or terminated) and otherwise forwarded to its owner:
 * HTTP and SSE by `forwardHttp`, WebSocket upgrades by a TCP tunnel in front of @fastify/websocket.
 * `POST /sessions` is placed by the placement script on the least-loaded node with room and forwarded
 * there with the reservation. A forwarded request (FORWARDED_HEADER) is always served where it lands.
 */
const clusterRouting: FastifyPluginAsync<{ node: ClusterNode; guard: RequestOriginGuard }> = async (
  app,
  { node, guard },
) => {
  const registry = node.registry;
  const retryAfterS = Math.ceil(node.cluster.nodeTtlMs / 1000);
  const tokens = new WeakMap<FastifyRequest, string>();
  /** Requests a node signed (FORWARDED_HEADER verified): served here, never forwarded again. */
  const fromNodes = new WeakSet<FastifyRequest>();
  const sign = (method: string, url: string, reservation?: string) =>
    signForward(node.secret, registry.id, method, url, reservation);

  /** Where a `/sessions/{id}/…` request is served: its live owner when that is another node, else here. */
  async function route(method: string, url: string, forwarded: boolean): Promise<Route> {
    if (forwarded) return null;
    const match = SESSION_PATH.exec(url);
    if (!match) return null;
    const record = await node.directory.lookup(match[1].toLowerCase());
    if (!record || record.node === registry.id) return null;
    // A recording outlives its session: once the session ended and the file is final on shared storage,
    // any node serves it; until then (finalising) it follows its owner while the owner lives.
    const recordingRead = method === 'GET' && RECORDING_READ_PATH.test(url);
    const transcriptRead = method === 'GET' && TRANSCRIPT_READ_PATH.test(url);
    if (record.state === 'terminated' && !transcriptRead) {
      if (!recordingRead) return null;
      // Lost with its node: answered from shared storage, never forwarded (a URL cached here may still name
      // the dead node). Should that node come back (a long pause), it finalises the file there itself.
      if (record.terminated_reason === NODE_LOST) return { recordingOf: record.node, lost: true };
      if (await finishedRecording(node.dataDirOf(record.node), match[1].toLowerCase()))
        return { recordingOf: record.node, lost: false };
    }
    const ownerUrl = await registry.urlOf(record.node);
    if (ownerUrl) return { forward: { nodeId: record.node, url: ownerUrl } };
    // Its heartbeat expired: its sessions become tombstones now (a live one as node_lost), and this node answers from those.
    await registry.reapIfLost(record.node);
    return recordingRead ? { recordingOf: record.node, lost: record.state !== 'terminated' } : null;
  }

  app.addHook('onRequest', async (request, reply) => {
    const url = request.raw.url ?? '/';
    if (authenticate(node.secret, request.method, url, request.raw.headers)) fromNodes.add(request);
    if (request.headers.upgrade) return; // WebSocket upgrades are routed before Fastify (below)
    if (request.method === 'GET' && OFFLINE_READ_PATH.test(url)) return;
    const where = await route(request.method, url, fromNodes.has(request));
    if (!where) return;
    const sessionId = SESSION_PATH.exec(url)![1].toLowerCase();
    if ('recordingOf' in where) {
      // The session ended (or its owner is gone): its recording is read from the owner's directory on shared storage.
      await node.supervisor?.describe(sessionId);
      const finished = await finishedRecording(node.dataDirOf(where.recordingOf), sessionId);
      const artifactUrl = `/sessions/${sessionId}/rt-recording/artifact`;
      if (!RECORDING_READ_PATH.exec(url)![1]) {
        return reply.send({
          state: finished ? 'complete' : 'idle',
          artifact_url: artifactUrl,
          duration_ms: finished?.durationMs ?? 0,
        });
      }
      if (!finished)
        throw new HttpError(404, where.lost ? LOST_RECORDING_DETAIL : 'no finished recording for this session');
      reply.header('content-type', 'video/mp4').header('content-length', finished.size);
      reply.header('content-disposition', `attachment; filename="recording-${sessionId}.mp4"`);
      return reply.send(createReadStream(finished.file));
    }
    const target = where.forward;
    const sse = request.method === 'GET' && /\/events(?:\?|$)/u.test(url);
    node.countForward('http');
    await forwardHttp(request, reply, target.url, {
      sign,
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
    if (fromNodes.has(request) && typeof reserved === 'string') {
      tokens.set(request, reserved);
      return;
    }
    const unreachable: string[] = [];
    /** After a forward attempt the reply is hijacked: Fastify no longer answers it, so errors are written here. */
    let hijacked = false;
    const refuse = (detail: string, retryAfter: number) => {
      if (!hijacked) throw new HttpError(503, detail, { 'retry-after': String(retryAfter) });
      const body = JSON.stringify({ detail });
      if (!reply.raw.headersSent && !reply.raw.destroyed) {
        reply.raw.writeHead(503, {
          'content-type': 'application/json; charset=utf-8',
          'retry-after': String(retryAfter),
          'content-length': Buffer.byteLength(body),
        });
        reply.raw.end(body);
      }
      return reply;
    };
    for (let attempt = 1; ; attempt++) {
      const placed = await registry.place(undefined, unreachable);
      if (!placed) {
        return refuse(
          'every node is at its limit of sessions created but not started; start or delete some, or retry later',
          CAPACITY_RETRY_AFTER_S,
        );
      }
      if (placed.nodeId === registry.id) {
        if (hijacked) {
          // Served here after all, but the reply is hijacked: the create goes through a signed loopback forward.
          const answered = await forwardHttp(request, reply, registry.url, {
            sign,
            retryAfterS,
            body: JSON.stringify(request.body),
            headers: { [RESERVATION_HEADER]: placed.token },
          });
          if (answered) return reply;
        }
        tokens.set(request, placed.token);
        return;
      }
      const ownerUrl = await registry.urlOf(placed.nodeId);
      if (!ownerUrl) {
        await registry.release(placed.nodeId, placed.token);
        unreachable.push(placed.nodeId);
      } else {
        node.countForward('create');
        hijacked = true;
        const answered = await forwardHttp(request, reply, ownerUrl, {
          sign,
          retryAfterS,
          body: JSON.stringify(request.body),
          headers: { [RESERVATION_HEADER]: placed.token },
          retryUnreachable: attempt < MAX_PLACEMENTS,
          onUnreachable: () => void registry.release(placed.nodeId, placed.token).catch(() => undefined),
        });
        if (answered) return reply;
        unreachable.push(placed.nodeId);
      }
      if (attempt >= MAX_PLACEMENTS) return refuse('the chosen nodes could not be reached; retry', 1);
    }
  });

  // Counts change with creates, starts and deletes: published at once, with the reservation now counted.
  app.addHook('onResponse', async (request) => {
    const token = tokens.get(request);
    if (token || (request.url.startsWith('/sessions') && request.method !== 'GET')) registry.publishSoon(token);
  });

  // WebSocket upgrades of sessions another node owns are tunnelled there; the rest go to @fastify/websocket.
  app.addHook('onReady', async () => {
    const server = app.server;
    const listeners = server.listeners('upgrade') as Array<
      (req: http.IncomingMessage, socket: Duplex, head: Buffer) => void
    >;
    server.removeAllListeners('upgrade');
    server.on('upgrade', (req: http.IncomingMessage, socket: Duplex, head: Buffer) => {
      socket.pause();
      const url = req.url ?? '/';
      const forwarded = authenticate(node.secret, req.method ?? 'GET', url, req.headers);
      // A foreign page's upgrade is refused here, before it could be tunnelled to another node.
      const refusal = guard.refusal(req.method ?? 'GET', req.headers, forwarded);
      if (refusal !== null) {
        refuseUpgrade(socket, refusal);
        return;
      }
      route(req.method ?? 'GET', url, forwarded)
        .catch(() => null)
        .then((where) => {
          if (where && 'forward' in where) {
            node.countForward('websocket');
            tunnelUpgrade(req, socket, head, where.forward.url, sign('GET', url));
            return;
          }
          socket.resume();
          for (const listener of listeners) listener.call(server, req, socket, head);
        });
    });
  });
};

/** Answers an upgrade that never reaches Fastify with 403 `{detail}` and closes the socket. */
function refuseUpgrade(socket: Duplex, detail: string): void {
  const body = JSON.stringify({ detail });
  socket.resume();
  socket.end(
    `HTTP/1.1 403 Forbidden\r\ncontent-type: application/json; charset=utf-8\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`,
  );
}

export default fp(clusterRouting, { name: 'cluster-routing' });
