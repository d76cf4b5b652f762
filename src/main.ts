import fs from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { ConfigError, loadConfig, type ServiceConfig } from './config.ts';
import { createLogger, scrubPaths, type LogFormat } from './logger.ts';
import { buildApp } from './app.ts';
import { RequestGate, handleShutdownSignals } from './shutdown.ts';

/** sysexits EX_CONFIG: the configuration is wrong. */
const EXIT_CONFIG = 78;
/** Any other start-up failure (port taken, data directory unusable). */
const EXIT_STARTUP_FAILED = 1;
/**
 * A service that built everything and then could not listen closes what it started (engine processes,
 * render workers, LevelDB) before it exits; past this bound it exits anyway rather than hang.
 */
const STARTUP_ABORT_CLOSE_MS = 5_000;

/** A start-up failure a person can fix: told in one sentence, without a stack trace. */
class StartupFailure extends Error {}

async function main(): Promise<void> {
  let config: ServiceConfig;
  try {
    config = loadConfig();
  } catch (error) {
    if (error instanceof ConfigError) {
      process.stderr.write(`${error.message}\n`);
      process.exit(EXIT_CONFIG);
    }
    throw error;
  }
  const logger = createLogger(config.logLevel, undefined, logFormatFor(config));
  await ensureWritableDataDir(config.dataDir);
  let built;
  try {
    built = await buildApp(config, logger);
  } catch (error) {
    if (isLockedDatabase(error)) {
      throw new StartupFailure(
        `the data directory ${shownPath(config.dataDir)} is in use by another instance of the service — stop it or set SERVICE_DATA_DIR`,
      );
    }
    throw error;
  }
  const { app, services } = built;
  // In front of Fastify before the first connection, so every request is counted and can be refused while draining.
  const gate = new RequestGate(app.server);
  handleShutdownSignals({ app, services, gate, logger });
  try {
    await app.listen({ host: config.host, port: config.port });
  } catch (error) {
    const sentence = listenFailure(error, config);
    if (!sentence) throw error;
    await closeWithin(() => app.close(), STARTUP_ABORT_CLOSE_MS);
    throw new StartupFailure(sentence);
  }
  const address = app.server.address() as AddressInfo;
  logger.info(
    { host: address.address, port: address.port, maxConnections: config.maxConnections },
    'service listening',
  );
  process.stdout.write(`${readyLine(address)}\n`);
}

/** Pretty lines for a person at a terminal, JSON for everything else, unless SERVICE_LOG_FORMAT says which. */
function logFormatFor(config: ServiceConfig): LogFormat {
  if (config.logFormat !== 'auto') return config.logFormat;
  return process.stdout.isTTY ? 'pretty' : 'json';
}

/**
 * The one line a newcomer needs: where to point the browser. A wildcard bind is reachable on loopback
 * too, so that is the address shown.
 */
function readyLine(address: AddressInfo): string {
  const wildcard = address.address === '0.0.0.0' || address.address === '::';
  const host = wildcard ? '127.0.0.1' : address.family === 'IPv6' ? `[${address.address}]` : address.address;
  const url = `http://${host}:${address.port}`;
  return `Avatar service ready at ${url} — open it in a browser${wildcard ? ' (it listens on all interfaces)' : ''}`;
}

/** Creates the data directory if needed and checks it can be written, before anything is stored in it. */
async function ensureWritableDataDir(dataDir: string): Promise<void> {
  try {
    await fs.mkdir(dataDir, { recursive: true });
  } catch (error) {
    throw new StartupFailure(
      `the data directory ${shownPath(dataDir)} cannot be created (${codeOf(error)}) — check the path or set SERVICE_DATA_DIR`,
    );
  }
  try {
    await fs.access(dataDir, fs.constants.W_OK);
  } catch (error) {
    throw new StartupFailure(
      `the data directory ${shownPath(dataDir)} is not writable (${codeOf(error)}) — fix its permissions or set SERVICE_DATA_DIR`,
    );
  }
}

/** LevelDB refuses a second opener of the same directory: `LEVEL_LOCKED` (or its `LOCK: already held` text) somewhere in the cause chain. */
function isLockedDatabase(error: unknown): boolean {
  for (let current = error, depth = 0; current instanceof Error && depth < 5; current = current.cause, depth++) {
    if ((current as NodeJS.ErrnoException).code === 'LEVEL_LOCKED') return true;
    if (/\bLOCK\b.*already held/u.test(current.message)) return true;
  }
  return false;
}

function listenFailure(error: unknown, config: ServiceConfig): string | undefined {
  switch (codeOf(error)) {
    case 'EADDRINUSE':
      return `port ${config.port} is already in use — stop the other process or set SERVICE_PORT`;
    case 'EACCES':
      return `port ${config.port} needs elevated privileges on this machine — use a port above 1023 or set SERVICE_PORT`;
    case 'EADDRNOTAVAIL':
    case 'ENOTFOUND':
      return `address ${config.host} does not belong to this machine — set SERVICE_HOST (127.0.0.1, or 0.0.0.0 for all interfaces)`;
    default:
      return undefined;
  }
}

function codeOf(error: unknown): string {
  return (error as NodeJS.ErrnoException | undefined)?.code ?? 'unknown error';
}

/** Relative to the working directory: enough to recognise the directory, and no absolute path on the console. */
function shownPath(dir: string): string {
  const relative = path.relative(process.cwd(), dir);
  if (relative === '') return '.';
  return relative.startsWith('..') ? relative : `./${relative}`;
}

async function closeWithin(close: () => Promise<unknown>, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([
    close().catch(() => undefined),
    new Promise<void>((resolve) => (timer = setTimeout(resolve, ms))),
  ]);
  clearTimeout(timer);
}

main().catch((error) => {
  if (error instanceof StartupFailure) {
    process.stderr.write(`${error.message}\n`);
    process.exit(EXIT_STARTUP_FAILED);
  }
  // Anything else is a defect: its stack helps whoever fixes it, with filesystem paths reduced.
  process.stderr.write(`fatal: ${scrubPaths((error as Error).stack ?? String(error))}\n`);
  process.exit(EXIT_STARTUP_FAILED);
});
