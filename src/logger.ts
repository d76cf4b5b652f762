import { readdirSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import pino, { type DestinationStream, type Logger } from 'pino';

/**
 * The service logger: JSON lines, static messages with structured fields. Upstream keys and request
 * bodies are redacted wherever they might appear, and errors (under `err` or `error`, or passed as the
 * only argument) are serialised with every filesystem path reduced by `scrubPaths`.
 */
export function createLogger(level: string, destination?: DestinationStream): Logger {
  const options: pino.LoggerOptions = {
    level,
    redact: {
      paths: ['req.headers.authorization', 'req.headers.cookie', '*.apiKey', '*.api_key', 'apiKey', 'headers.authorization'],
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
        return method.apply(this, args.map((arg) => (typeof arg === 'string' ? scrubPaths(arg) : arg)) as Parameters<typeof method>);
      },
    },
  };
  return destination ? pino(options, destination) : pino(options);
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
  return new RegExp(`(?:file://|(?<![\\w.~/-]))/(?:${roots.join('|')})(?![\\w.-])(?:/[^\\s'"\`()<>\\[\\]{},;:]*)*`, 'g');
}

/**
 * Removes filesystem paths from text bound for a log line or a response: a path inside the repository
 * becomes relative to it (`src/routes/multipart.ts`), any other path (data, avatars, temp dirs) its
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
