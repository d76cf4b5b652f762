import { readdirSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import pino, { type DestinationStream, type Logger } from 'pino';

/** `json`: one JSON object per line, for log collectors. `pretty`: one readable line per entry, for a person at a terminal. */
export type LogFormat = 'json' | 'pretty';

/**
 * The service logger: JSON lines, static messages with structured fields. Upstream keys and request
 * bodies are redacted wherever they might appear, and errors (under `err` or `error`, or passed as the
 * only argument) are serialised with every filesystem path reduced by `scrubPaths`. With `format:
 * 'pretty'` the same lines are rewritten for a terminal (`prettyDestination`) before they are written.
 */
export function createLogger(level: string, destination?: DestinationStream, format: LogFormat = 'json'): Logger {
  const options: pino.LoggerOptions = {
    level,
    redact: {
      paths: [
        'req.headers.authorization',
        'req.headers.cookie',
        '*.apiKey',
        '*.api_key',
        'apiKey',
        'headers.authorization',
      ],
      censor: '[redacted]',
    },
    serializers: { err: serializeErrorForLog, error: serializeErrorForLog },
    hooks: {
      logMethod(args, method) {
        // `log.error(error)` makes the error's message the line's `msg`, past the serialisers.
        const [first, ...rest] = args as unknown[];
        if (first instanceof Error && typeof rest[0] !== 'string') {
          return method.apply(this, [{ err: first }, scrubPaths(first.message)] as Parameters<typeof method>);
        }
        return method.apply(
          this,
          args.map((arg) => (typeof arg === 'string' ? scrubPaths(arg) : arg)) as Parameters<typeof method>,
        );
      },
    },
  };
  if (format === 'pretty')
    return pino(options, prettyDestination(destination ?? process.stdout, { color: shouldColor(destination) }));
  return destination ? pino(options, destination) : pino(options);
}

/** Colours only on a terminal, and never when the NO_COLOR convention (no-color.org) asks for none. */
function shouldColor(destination: DestinationStream | undefined): boolean {
  return destination === undefined && process.stdout.isTTY === true && !process.env.NO_COLOR;
}

const LEVEL_NAMES: Record<number, string> = {
  10: 'TRACE',
  20: 'DEBUG',
  30: 'INFO',
  40: 'WARN',
  50: 'ERROR',
  60: 'FATAL',
};
const LEVEL_COLORS: Record<number, string> = { 10: '90', 20: '36', 30: '32', 40: '33', 50: '31', 60: '35' };
/** Fields every line has, shown in the line's head (time, level, message) or not at all (pid, hostname). */
const HEAD_FIELDS = new Set(['level', 'time', 'msg', 'pid', 'hostname']);

/**
 * A destination that turns each pino JSON line into `12:04:05.123 INFO  service listening host=127.0.0.1 port=8000`.
 * Fastify's request fields are shortened to what a person reads (`GET /health 200 4ms`); an error shows its
 * type and message on the line and its (path-scrubbed) stack below. A line that is not JSON passes unchanged.
 */
export function prettyDestination(
  target: { write(text: string): unknown },
  options: { color: boolean },
): DestinationStream {
  const paint = (code: string, text: string) => (options.color ? `\u001b[${code}m${text}\u001b[0m` : text);
  return {
    write(line: string) {
      let entry: Record<string, unknown>;
      try {
        entry = JSON.parse(line) as Record<string, unknown>;
      } catch {
        target.write(line);
        return;
      }
      target.write(`${formatEntry(entry, paint)}\n`);
    },
  };
}

function formatEntry(entry: Record<string, unknown>, paint: (code: string, text: string) => string): string {
  const level = typeof entry.level === 'number' ? entry.level : 30;
  const time = new Date(typeof entry.time === 'number' ? entry.time : Date.now()).toTimeString().slice(0, 8);
  const head = `${paint('2', time)} ${paint(LEVEL_COLORS[level] ?? '0', (LEVEL_NAMES[level] ?? String(level)).padEnd(5))} ${String(entry.msg ?? '')}`;
  const fields: string[] = [];
  let stack: string | undefined;
  for (const [key, value] of Object.entries(entry)) {
    if (HEAD_FIELDS.has(key) || value === undefined) continue;
    if ((key === 'err' || key === 'error') && value && typeof value === 'object') {
      const error = value as { type?: string; message?: string; stack?: string };
      fields.push(`${key}=${JSON.stringify(`${error.type ?? 'Error'}: ${error.message ?? ''}`)}`);
      stack = error.stack;
    } else if (key === 'req' && value && typeof value === 'object') {
      const request = value as { method?: string; url?: string };
      fields.push(`${request.method ?? ''} ${request.url ?? ''}`.trim());
    } else if (key === 'res' && value && typeof value === 'object') {
      fields.push(String((value as { statusCode?: number }).statusCode ?? ''));
    } else if (key === 'responseTime' && typeof value === 'number') {
      fields.push(`${Math.round(value)}ms`);
    } else {
      fields.push(
        `${key}=${typeof value === 'string' && /^[\w.:/@+-]+$/u.test(value) ? value : JSON.stringify(value)}`,
      );
    }
  }
  const body = fields.length > 0 ? `${head} ${paint('2', fields.join(' '))}` : head;
  if (!stack || level < 50) return body;
  const frames = stack
    .split('\n')
    .slice(1)
    .map((frame) => `    ${frame.trim()}`);
  return frames.length > 0 ? `${body}\n${paint('2', frames.join('\n'))}` : body;
}

/**
 * An error's text for a log field. Node's fs errors put absolute paths into `message`
 * ("ENOENT: no such file or directory, open '/srv/data/…'"), and logs never carry filesystem
 * paths, so those are reduced to their code, system call and file name; any other message has its
 * paths scrubbed.
 */
export function errorForLog(error: unknown): string {
  if (!(error instanceof Error)) return scrubPaths(String(error));
  const { code, syscall, path: filePath } = error as NodeJS.ErrnoException;
  if (code && filePath) return `${code}: ${syscall ? `${syscall} ` : ''}${path.basename(filePath)}`;
  return scrubPaths(error.message);
}

/**
 * pino's standard error serialisation (type, message, stack, code, cause…) with every string in it
 * passed through `scrubPaths`: stack frames become repository-relative (`src/routes/x.ts:12:3`), and
 * data or temp paths shrink to their file name. Plain strings are scrubbed as well.
 */
export function serializeErrorForLog(value: unknown): unknown {
  if (typeof value === 'string') return scrubPaths(value);
  if (!(value instanceof Error)) return value;
  return scrubStrings(pino.stdSerializers.err(value), MAX_SCRUB_DEPTH);
}

/** Nested causes deeper than this are cut; a real cause chain is two or three long. */
const MAX_SCRUB_DEPTH = 6;

function scrubStrings(value: unknown, depth: number): unknown {
  if (typeof value === 'string') return scrubPaths(value);
  if (value === null || typeof value !== 'object') return value;
  if (depth === 0) return '[nested too deep]';
  if (Array.isArray(value)) return value.map((item) => scrubStrings(item, depth - 1));
  const out: Record<string, unknown> = {};
  for (const [key, item] of Object.entries(value)) out[key] = scrubStrings(item, depth - 1);
  return out;
}

/** The repository root: source locations inside it are kept, relative to it, because they carry no deployment detail. */
const REPOSITORY_ROOT = path.resolve(import.meta.dirname, '..');

/**
 * A path is absolute when it starts with one of this machine's top-level directories (`/tmp`, `/srv`,
 * `/home`…), read once at start-up. That keeps URL paths such as `/sessions/{id}/start` in messages
 * intact, which a bare "starts with /" rule would mangle.
 */
const ABSOLUTE_PATH = buildAbsolutePathPattern();

function buildAbsolutePathPattern(): RegExp | null {
  let roots: string[];
  try {
    roots = readdirSync('/', { withFileTypes: true })
      .filter((entry) => entry.isDirectory() || entry.isSymbolicLink())
      .map((entry) => entry.name.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'));
  } catch {
    return null;
  }
  if (roots.length === 0) return null;
  // Path characters stop at whitespace, quotes, brackets and ':' so a stack frame keeps its ':line:column'.
  return new RegExp(
    `(?:file://|(?<![\\w.~/-]))/(?:${roots.join('|')})(?![\\w.-])(?:/[^\\s'"\`()<>\\[\\]{},;:]*)*`,
    'g',
  );
}

/**
 * Removes filesystem paths from text bound for a log line or a response: a path inside the repository
 * becomes relative to it (`src/http/multipart.ts`), any other path (data, avatars, temp dirs) its
 * last segment (`manifest.json`).
 */
export function scrubPaths(text: string): string {
  if (!ABSOLUTE_PATH || !text.includes('/')) return text;
  return text.replace(ABSOLUTE_PATH, (match) => {
    const filePath = match.startsWith('file://') ? fileUrlToPathOr(match) : match;
    const relative = path.relative(REPOSITORY_ROOT, filePath);
    if (relative === '') return '.';
    if (!relative.startsWith('..') && !path.isAbsolute(relative)) return relative;
    return path.basename(filePath) || '.';
  });
}

function fileUrlToPathOr(url: string): string {
  try {
    return fileURLToPath(url);
  } catch {
    return url.slice('file://'.length);
  }
}
