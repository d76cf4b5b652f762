/**
 * Graceful shutdown on SIGTERM/SIGINT: stop admitting, end the sessions (SSE subscribers get
 * `session.terminated`), let requests in flight finish, close the app (offline jobs fail as interrupted,
 * recordings are finalised, LevelDB is flushed and closed), exit 0 — all within `SHUTDOWN_TIMEOUT_MS`.
 * A second signal exits at once.
 */
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import { constants } from 'node:os';
import type { Duplex } from 'node:stream';
import type { FastifyInstance } from 'fastify';
import type { Logger } from 'pino';
import type { Services } from './services.ts';
import { errorForLog } from './logger.ts';

/** Upper bound on a graceful shutdown; past it the process exits anyway rather than hang a deploy. */
export const SHUTDOWN_TIMEOUT_MS = 10_000;
/**
 * How long requests in flight (a clone, an upload) may still run once sessions have ended; the rest of
 * the budget is for closing the app (finalising recordings, closing the store).
 */
const REQUEST_DRAIN_MS = 5_000;
/** What a refused client is told to wait before retrying: about as long as a restart takes. */
const RETRY_AFTER_S = 10;
const DRAINING_DETAIL = 'service is shutting down; retry shortly';

type RequestListener = (request: IncomingMessage, response: ServerResponse) => void;
type UpgradeListener = (request: IncomingMessage, socket: Duplex, head: Buffer) => void;

/**
 * Admission at the edge of the HTTP server, in front of Fastify: counts requests in flight and, once
 * draining, answers each new request (and WebSocket upgrade) with 503 `{detail}` before any route runs.
 */
export class RequestGate {
  private draining = false;
  private inFlight = 0;
  private idleWaiters: Array<() => void> = [];

  constructor(server: Server) {
    const requestListeners = server.listeners('request') as RequestListener[];
    server.removeAllListeners('request');
    server.on('request', (request: IncomingMessage, response: ServerResponse) => {
      if (this.draining) return refuse(response);
      this.inFlight++;
      response.once('close', () => this.finished());
      for (const listener of requestListeners) listener.call(server, request, response);
    });
    const upgradeListeners = server.listeners('upgrade') as UpgradeListener[];
    server.removeAllListeners('upgrade');
    server.on('upgrade', (request: IncomingMessage, socket: Duplex, head: Buffer) => {
      if (this.draining) return refuseUpgrade(socket);
      for (const listener of upgradeListeners) listener.call(server, request, socket, head);
    });
  }

  get requestsInFlight(): number {
    return this.inFlight;
  }

  /** From now on every new request is refused. */
  drain(): void {
    this.draining = true;
  }

  /** Resolves true once no request is in flight, false if some still are after `timeoutMs`. */
  whenIdle(timeoutMs: number): Promise<boolean> {
    if (this.inFlight === 0) return Promise.resolve(true);
    return new Promise((resolve) => {
      const timer = setTimeout(() => resolve(false), timeoutMs);
      this.idleWaiters.push(() => {
        clearTimeout(timer);
        resolve(true);
      });
    });
  }

  private finished(): void {
    this.inFlight--;
    if (this.inFlight === 0) for (const wake of this.idleWaiters.splice(0)) wake();
  }
}

function refuse(response: ServerResponse): void {
  const body = JSON.stringify({ detail: DRAINING_DETAIL });
  response.writeHead(503, {
    'content-type': 'application/json; charset=utf-8',
    'content-length': Buffer.byteLength(body),
    'retry-after': String(RETRY_AFTER_S),
    connection: 'close',
  });
  response.end(body);
}

function refuseUpgrade(socket: Duplex): void {
  const body = JSON.stringify({ detail: DRAINING_DETAIL });
  socket.on('error', () => undefined);
  socket.end(
    `HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json; charset=utf-8\r\ncontent-length: ${Buffer.byteLength(body)}\r\n` +
      `retry-after: ${RETRY_AFTER_S}\r\nconnection: close\r\n\r\n${body}`,
  );
}

export interface GracefulShutdownDeps {
  app: FastifyInstance;
  services: Services;
  gate: RequestGate;
  logger: Logger;
  exit?: (code: number) => never;
}

/** Installs the SIGTERM/SIGINT handlers. */
export function handleShutdownSignals(deps: GracefulShutdownDeps): void {
  const exit = deps.exit ?? ((code: number) => process.exit(code));
  const { logger } = deps;
  let stopping = false;
  const onSignal = (signal: NodeJS.Signals) => {
    if (stopping) {
      logger.warn({ signal }, 'second signal: exiting at once');
      exit(128 + (constants.signals[signal] ?? 0));
    }
    stopping = true;
    const timer = setTimeout(() => {
      logger.error({ requestsInFlight: deps.gate.requestsInFlight }, 'shutdown timed out');
      exit(1);
    }, SHUTDOWN_TIMEOUT_MS);
    timer.unref();
    shutDown(deps, signal).then(
      () => exit(0),
      (error: unknown) => {
        logger.error({ err: errorForLog(error) }, 'shutdown failed');
        exit(1);
      },
    );
  };
  process.on('SIGTERM', onSignal);
  process.on('SIGINT', onSignal);
}

async function shutDown({ app, services, gate, logger }: GracefulShutdownDeps, signal: NodeJS.Signals): Promise<void> {
  const started = performance.now();
  logger.info({ signal, requestsInFlight: gate.requestsInFlight }, 'shutting down');
  gate.drain();
  // Sessions first: each SSE stream gets `session.terminated` and ends, WebSockets close.
  await services.supervisor.closeAll();
  const drained = await gate.whenIdle(REQUEST_DRAIN_MS);
  if (!drained)
    logger.warn({ requestsInFlight: gate.requestsInFlight }, 'requests still in flight at shutdown are cut off');
  // Closes the sockets and then the services: jobs fail as interrupted, recordings are finalised, the store is closed.
  await app.close();
  logger.info({ ms: Math.round(performance.now() - started) }, 'shutdown complete');
}
