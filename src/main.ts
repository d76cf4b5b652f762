import { ConfigError, loadConfig } from './config.ts';
import { createLogger } from './logger.ts';
import { buildApp } from './app.ts';
import { RequestGate, handleShutdownSignals } from './shutdown.ts';

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
  const { app, services } = await buildApp(config, logger);
  // In front of Fastify before the first connection, so every request is counted and can be refused while draining.
  const gate = new RequestGate(app.server);
  handleShutdownSignals({ app, services, gate, logger });
  await app.listen({ host: config.host, port: config.port });
  logger.info({ host: config.host, port: config.port }, 'service listening');
}

main().catch((error) => {
  process.stderr.write(`fatal: ${(error as Error).stack ?? error}\n`);
  process.exit(1);
});
