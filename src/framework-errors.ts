import { STATUS_CODES } from 'node:http';
import type { Duplex } from 'node:stream';
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';

/**
 * The answers given before any route or error handler runs, in the service's `{detail}` shape (spec 7):
 * Fastify's router refusing a URL (`frameworkErrors`) and Node's HTTP parser refusing a request
 * (`clientErrorHandler`). Both are Fastify constructor options, wired in `src/app.ts`. The details are
 * fixed texts: the client's URL may be kilobytes long and is not echoed back.
 */

const ROUTER_DETAILS: Record<string, string> = {
  FST_ERR_BAD_URL: 'the URL path is not validly percent-encoded',
  FST_ERR_MAX_PARAM_LENGTH: 'a path parameter is too long',
};

export function frameworkErrors(error: FastifyError, _request: FastifyRequest, reply: FastifyReply): void {
  const status = typeof error.statusCode === 'number' && error.statusCode >= 400 && error.statusCode < 500 ? error.statusCode : 400;
  reply.code(status).send({ detail: ROUTER_DETAILS[error.code] ?? 'the request URL cannot be routed' });
}

/** Like Fastify's default client error handler (answer if the socket can take it, then destroy it), with `{detail}`. */
export function clientErrorHandler(error: NodeJS.ErrnoException, socket: Duplex): void {
  if (error.code === 'ECONNRESET' || socket.destroyed) return;
  const [status, detail] =
    error.code === 'ERR_HTTP_REQUEST_TIMEOUT'
      ? [408, 'request timed out']
      : error.code === 'HPE_HEADER_OVERFLOW'
        ? [431, 'request line or headers too large']
        : [400, 'malformed HTTP request'];
  const body = JSON.stringify({ detail });
  if (socket.writable) {
    socket.write(
      `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nContent-Length: ${Buffer.byteLength(body)}\r\n` +
        `Content-Type: application/json; charset=utf-8\r\nConnection: close\r\n\r\n${body}`,
    );
  }
  socket.destroy(error);
}
