import http from 'node:http';
import https from 'node:https';
import net from 'node:net';
import tls from 'node:tls';
import type { Duplex } from 'node:stream';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { SSE_KEEPALIVE_MS } from '../sessions/event-hub.ts';

/** A node that does not accept a connection within this is treated as unreachable (503, Retry-After). */
export const FORWARD_CONNECT_TIMEOUT_MS = 3_000;
/**
 * The owner answers within its own request bound (REQUEST_TIMEOUT_MS in src/app.ts, 120 s: a trickled
 * 12 MB upload) or not at all; 10 s more here. Not imported: app.ts imports this module.
 */
export const FORWARD_RESPONSE_TIMEOUT_MS = 130_000;
/** While a response streams, silence this long ends it: SSE sends a keepalive every SSE_KEEPALIVE_MS. */
export const FORWARD_IDLE_TIMEOUT_MS = 2 * SSE_KEEPALIVE_MS;
/** Open connections to one node at most (kept alive and reused); beyond it, requests wait for a free one. */
export const FORWARD_MAX_SOCKETS_PER_NODE = 256;
/**
 * Marks a request as forwarded by a node (its signature, src/cluster/internal-auth.ts): the receiver serves
 * it and never forwards it again. Unsigned or forged, it is dropped and the request routed as a client's.
 */
export const FORWARDED_HEADER = 'x-avs-forwarded';
/** The slot placement reserved on the receiving node for a forwarded `POST /sessions`. */
export const RESERVATION_HEADER = 'x-avs-reservation';

const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'transfer-encoding',
  'upgrade',
  'te',
  'trailer',
  'host',
]);
const httpAgent = new http.Agent({ keepAlive: true, maxSockets: FORWARD_MAX_SOCKETS_PER_NODE });
const httpsAgent = new https.Agent({ keepAlive: true, maxSockets: FORWARD_MAX_SOCKETS_PER_NODE });

/** Headers only nodes send: a client's copies are never passed on (the forwarding node sets its own). */
const INTERNAL = new Set([FORWARDED_HEADER, RESERVATION_HEADER]);

export interface ForwardOptions {
  /** Signs this request for the owner (FORWARDED_HEADER's value) given the reservation token it carries. */
  sign(method: string, url: string, reservation?: string): string;
  /** A body already parsed by Fastify (re-sent as JSON); otherwise the raw request stream is piped. */
  body?: string;
  headers?: Record<string, string>;
  /** Retry-After (s) of the 503 a client gets when the owner cannot be reached. */
  retryAfterS: number;
  /** The owner could not be reached before any byte of a response (the request was not served). */
  onUnreachable?(): void;
  /**
   * When the owner cannot be reached, answer nothing and resolve false, so the caller can try another node
   * (only with `body`: a piped request stream cannot be sent twice).
   */
  retryUnreachable?: boolean;
  /** The response had started (e.g. an SSE stream) and the owner went away before ending it. */
  onLostMidStream?(res: http.ServerResponse): void;
}

/**
 * Forwards a request to the node that owns its session and streams the answer back (SSE included),
 * with bounded connect, answer and idle times. Hijacks the reply: nothing after this may send it.
 */
export function forwardHttp(
  request: FastifyRequest,
  reply: FastifyReply,
  target: string,
  options: ForwardOptions,
): Promise<boolean> {
  reply.hijack();
  const res = reply.raw;
  const url = new URL(request.raw.url ?? '/', target);
  const headers: Record<string, string | string[]> = {};
  for (const [name, value] of Object.entries(request.headers)) {
    if (value === undefined || HOP_BY_HOP.has(name) || INTERNAL.has(name)) continue;
    headers[name] = value;
  }
  const remote = request.socket.remoteAddress;
  if (remote) headers['x-forwarded-for'] = [request.headers['x-forwarded-for'], remote].filter(Boolean).join(', ');
  Object.assign(headers, options.headers ?? {});
  const reservation = options.headers?.[RESERVATION_HEADER];
  // Signed as the owner will see it (the URL as sent, after WHATWG parsing).
  headers[FORWARDED_HEADER] = options.sign(request.method, url.pathname + url.search, reservation);
  if (options.body !== undefined) {
    headers['content-type'] = 'application/json';
    headers['content-length'] = String(Buffer.byteLength(options.body));
  }
  const secure = url.protocol === 'https:';
  return new Promise<boolean>((resolve) => {
    let settled = false;
    let started = false;
    let ended = false;
    const done = (answered = true) => {
      if (settled) return;
      settled = true;
      clearTimeout(connectTimer);
      resolve(answered);
    };
    const upstream = (secure ? https : http).request(url, {
      method: request.method,
      headers,
      agent: secure ? httpsAgent : httpAgent,
    });
    // The connect bound; a reused keep-alive socket is connected already.
    const connectTimer = setTimeout(() => upstream.destroy(new Error('connect timeout')), FORWARD_CONNECT_TIMEOUT_MS);
    upstream.on('socket', (socket) => {
      if (!socket.connecting) clearTimeout(connectTimer);
      else socket.once('connect', () => clearTimeout(connectTimer));
    });
    upstream.setTimeout(FORWARD_RESPONSE_TIMEOUT_MS, () =>
      upstream.destroy(new Error('owner node did not answer in time')),
    );
    upstream.on('response', (upstreamRes) => {
      started = true;
      upstream.setTimeout(FORWARD_IDLE_TIMEOUT_MS, () => upstream.destroy(new Error('owner node stream idle')));
      const out: Record<string, string | string[]> = {};
      for (const [name, value] of Object.entries(upstreamRes.headers)) {
        if (value === undefined || HOP_BY_HOP.has(name)) continue;
        out[name] = value;
      }
      res.writeHead(upstreamRes.statusCode ?? 502, out);
      res.flushHeaders();
      upstreamRes.on('data', (chunk: Buffer) => {
        if (!res.write(chunk)) {
          upstreamRes.pause();
          res.once('drain', () => upstreamRes.resume());
        }
      });
      upstreamRes.on('end', () => {
        ended = true;
        res.end();
        done();
      });
      upstreamRes.on('close', () => {
        if (ended) return;
        if (options.onLostMidStream && !res.destroyed) options.onLostMidStream(res);
        else res.destroy();
        done();
      });
    });
    upstream.on('error', () => {
      if (started) return; // the response's own close handler deals with it
      options.onUnreachable?.();
      if (options.retryUnreachable && options.body !== undefined && !res.destroyed) {
        done(false);
        return;
      }
      if (!res.headersSent && !res.destroyed) {
        const body = JSON.stringify({ detail: 'the node holding this session is unreachable; retry later' });
        res.writeHead(503, {
          'content-type': 'application/json; charset=utf-8',
          'retry-after': String(options.retryAfterS),
          'content-length': Buffer.byteLength(body),
        });
        res.end(body);
      } else {
        res.destroy();
      }
      done();
    });
    // The client left: stop the upstream request too (an SSE stream on the owner is released).
    res.on('close', () => {
      if (!res.writableFinished) upstream.destroy();
      done();
    });
    if (options.body !== undefined) upstream.end(options.body);
    else request.raw.pipe(upstream);
  });
}

/**
 * Tunnels a WebSocket upgrade to the owner node: the request head is replayed on a new TCP connection
 * and the two sockets are piped both ways. The owner's WebSocket route keeps its own bounds; here only
 * the connect is bounded, and either side closing closes both.
 */
export function tunnelUpgrade(
  req: http.IncomingMessage,
  socket: Duplex,
  head: Buffer,
  target: string,
  signature: string,
): void {
  const url = new URL(target);
  const port = Number(url.port || (url.protocol === 'https:' ? 443 : 80));
  const upstream: net.Socket =
    url.protocol === 'https:'
      ? tls.connect({ host: url.hostname, port, servername: url.hostname })
      : net.connect({ host: url.hostname, port });
  const connectTimer = setTimeout(() => upstream.destroy(new Error('connect timeout')), FORWARD_CONNECT_TIMEOUT_MS);
  const fail = () => {
    clearTimeout(connectTimer);
    upstream.destroy();
    if (!socket.destroyed) {
      socket.end('HTTP/1.1 503 Service Unavailable\r\nconnection: close\r\ncontent-length: 0\r\n\r\n');
    }
  };
  upstream.once('error', fail);
  upstream.once(url.protocol === 'https:' ? 'secureConnect' : 'connect', () => {
    clearTimeout(connectTimer);
    upstream.removeListener('error', fail);
    let headText = `${req.method ?? 'GET'} ${req.url ?? '/'} HTTP/1.1\r\n`;
    for (let i = 0; i < req.rawHeaders.length; i += 2) {
      const name = req.rawHeaders[i];
      const lower = name.toLowerCase();
      if (INTERNAL.has(lower)) continue;
      headText += `${name}: ${lower === 'host' ? url.host : req.rawHeaders[i + 1]}\r\n`;
    }
    headText += `${FORWARDED_HEADER}: ${signature}\r\n\r\n`;
    upstream.write(headText);
    if (head.length > 0) upstream.write(head);
    upstream.setKeepAlive(true);
    upstream.pipe(socket);
    socket.pipe(upstream);
    const close = () => {
      upstream.destroy();
      socket.destroy();
    };
    upstream.on('error', close);
    upstream.on('close', close);
    socket.on('error', close);
    socket.on('close', close);
  });
}
