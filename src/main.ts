import { ConfigError, loadConfig } from './config.ts';
import { createLogger, errorForLog } from './logger.ts';
import { buildApp } from './app.ts';

/** Upper bound on a graceful shutdown; past it the process exits anyway rather than hang a deploy. */
const SHUTDOWN_TIMEOUT_MS = 10_000;

async function main(): Promise<void> {
  let config;
  try {
    config = loadConfig();
  } catch (error) {
    if (error instanceof ConfigError) {
      process.stderr.write(`${error.message}\n`);
      process.exit(78);
    }
    throw error;
  }
  const logger = createLogger(config.logLevel);
  const { app } = await buildApp(config, logger);
  await app.listen({ host: config.host, port: config.port });
  logger.info({ host: config.host, port: config.port }, 'service listening');

  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    logger.info({ signal }, 'shutting down');
    const timer = setTimeout(() => {
      logger.error('shutdown timed out');
      process.exit(1);
    }, SHUTDOWN_TIMEOUT_MS);
    timer.unref();
    try {
      await app.close();
      logger.info('shutdown complete');
      process.exit(0);
    } catch (error) {
      logger.error({ err: errorForLog(error) }, 'shutdown failed');
      process.exit(1);
    }
  };
  process.on('SIGTERM', () => void stop('SIGTERM'));
  process.on('SIGINT', () => void stop('SIGINT'));
}

main().catch((error) => {
  process.stderr.write(`fatal: ${(error as Error).stack ?? error}\n`);
  process.exit(1);
});
