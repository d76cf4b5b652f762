import { STATUS_CODES, type IncomingMessage, type ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';

/**
 * The answers given before any route or error handler runs, in the service's `{detail}` shape (spec 7):
 * Fastify's router refusing a URL (`frameworkErrors`) and Node's HTTP parser refusing a request
 * (`clientErrorHandler`). Both are Fastify constructor options, wired in `src/app.ts`, as is Node's refusal of
 * an `Expect` it does not know (`expectationFailed`). The details are fixed texts: the client's URL may be
 * kilobytes long and is not echoed back.
 */

/**
 * How long a refused connection keeps reading (and discarding) what the client still sends after the answer.
 * Closing a socket with unread input makes the kernel send a reset, which a client still writing a 100 KB head
 * sees instead of its 431; a second is enough for such a head to arrive on any link that could send it, and
 * short enough that refused connections cannot pile up (each one also counts against the connection cap).
 */
export const REFUSED_CONNECTION_LINGER_MS = 1_000;

const ROUTER_DETAILS: Record<string, string> = {
  FST_ERR_BAD_URL: 'the URL path is not validly percent-encoded',
  FST_ERR_MAX_PARAM_LENGTH: 'a path parameter is too long',
};

export function frameworkErrors(error: FastifyError, _request: FastifyRequest, reply: FastifyReply): void {
  const status =
    typeof error.statusCode === 'number' && error.statusCode >= 400 && error.statusCode < 500 ? error.statusCode : 400;
  reply.code(status).send({ detail: ROUTER_DETAILS[error.code] ?? 'the request URL cannot be routed' });
}

/**
 * Like Fastify's default client error handler (answer if the socket can take it, then close it), with `{detail}`
 * and a lingering close: the answer goes out with a FIN, the rest of the request is read and dropped (Node's
 * parser, already failed, discards it and calls here again, which is ignored) until the client closes or
 * `REFUSED_CONNECTION_LINGER_MS` passes.
 */
export function clientErrorHandler(error: NodeJS.ErrnoException, socket: Duplex): void {
  if (error.code === 'ECONNRESET' || socket.destroyed) return;
  if (socket.writableEnded) return;
  const [status, detail] =
    error.code === 'ERR_HTTP_REQUEST_TIMEOUT'
      ? [408, 'request timed out']
      : error.code === 'HPE_HEADER_OVERFLOW'
        ? [431, 'request line or headers too large']
        : [400, 'malformed HTTP request'];
  if (!socket.writable) {
    socket.destroy(error);
    return;
  }
  const body = JSON.stringify({ detail });
  socket.end(
    `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nContent-Length: ${Buffer.byteLength(body)}\r\n` +
      `Content-Type: application/json; charset=utf-8\r\nConnection: close\r\n\r\n${body}`,
  );
  const linger = setTimeout(() => socket.destroy(), REFUSED_CONNECTION_LINGER_MS).unref();
  socket.once('close', () => clearTimeout(linger));
}

/**
 * Node's answer to an `Expect` other than `100-continue` (a `checkExpectation` listener on the server replaces
 * its bare 417 with an empty chunked body): 417 with `{detail}`, and the connection closed, since the request's
 * body (if any) was never read.
 */
export function expectationFailed(_request: IncomingMessage, response: ServerResponse): void {
  const body = JSON.stringify({
    detail: 'the Expect header names an expectation this service does not support; only 100-continue is',
  });
  response.writeHead(417, {
    'content-type': 'application/json; charset=utf-8',
    'content-length': Buffer.byteLength(body),
    connection: 'close',
  });
  response.end(body);
}
