import path from 'node:path';
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

/**
 * An error's text for a log field. Node's fs errors put absolute paths into `message`
 * ("ENOENT: no such file or directory, open '/srv/data/…'"), and logs never carry filesystem
 * paths, so those are reduced to their code, system call and file name.
 */
export function errorForLog(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  const { code, syscall, path: filePath } = error as NodeJS.ErrnoException;
  if (code && filePath) return `${code}: ${syscall ? `${syscall} ` : ''}${path.basename(filePath)}`;
  return error.message;
}
