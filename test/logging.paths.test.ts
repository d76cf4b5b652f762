/**
 * No answer and no log line carries a filesystem path: `scrubPaths` keeps repository source locations
 * relative and cuts every other path to its file name, the service logger's error serialiser applies it,
 * and the error plugin applies it to every `detail` and logged error whichever logger the app uses.
 */
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import Fastify, { type FastifyInstance } from 'fastify';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HttpError } from '../src/errors.ts';
import { createLogger, errorForLog, scrubPaths } from '../src/logger.ts';
import errorPlugin from '../src/plugins/app/errors.ts';
import { UpstreamError } from '../actors/upstream/errors.ts';

const REPOSITORY_ROOT = path.resolve(import.meta.dirname, '..');

let dataDir: string;
/** A real fs error: its message and `path` hold the absolute path of a file in the temp data dir. */
let enoent: NodeJS.ErrnoException;

beforeAll(async () => {
  dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'paths-test-'));
  enoent = await fs.readFile(path.join(dataDir, 'voices', 'missing.wav')).then(
    () => {
      throw new Error('the file should not exist');
    },
    (error: NodeJS.ErrnoException) => error,
  );
});

afterAll(async () => {
  await fs.rm(dataDir, { recursive: true, force: true });
});

function expectNoPath(text: string): void {
  expect(text).not.toContain(REPOSITORY_ROOT);
  expect(text).not.toContain(dataDir);
}

describe('scrubPaths', () => {
  it('makes stack frames repository-relative and cuts other paths to their file name', () => {
    const stack = `Error: boom\n    at readMultipart (${REPOSITORY_ROOT}/src/routes/multipart.ts:20:22)\n    at file://${REPOSITORY_ROOT}/node_modules/x/y.js:1:2`;
    expect(scrubPaths(stack)).toBe(
      'Error: boom\n    at readMultipart (src/routes/multipart.ts:20:22)\n    at node_modules/x/y.js:1:2',
    );
    expect(scrubPaths(`open '${dataDir}/voices/a.wav' failed`)).toBe("open 'a.wav' failed");
  });

  it('leaves URL paths and URLs alone', () => {
    for (const text of [
      'call POST /sessions/{session_id}/start first',
      'GET http://127.0.0.1:9/tmp/x → 502',
      'expected multipart/form-data',
    ]) {
      expect(scrubPaths(text)).toBe(text);
    }
  });
});

describe('errorForLog', () => {
  it('reduces an fs error to code, call and file name, and scrubs paths out of any other message', () => {
    expect(errorForLog(enoent)).toBe('ENOENT: open missing.wav');
    const wrapped = new Error(`cannot convert ${dataDir}/voices/upload.mp3: ffmpeg exited with 1`);
    expect(errorForLog(wrapped)).toBe('cannot convert upload.mp3: ffmpeg exited with 1');
  });
});

describe('createLogger', () => {
  it('serialises errors under err and error, and an error passed alone, without any path', () => {
    const lines: string[] = [];
    const logger = createLogger('info', { write: (line: string) => void lines.push(line) });
    logger.error({ err: enoent }, 'bundle unreadable');
    logger.warn(
      { error: new Error(`worker failed at ${REPOSITORY_ROOT}/actors/render/worker.ts`) },
      'render worker failed',
    );
    logger.error(enoent);
    expect(lines).toHaveLength(3);
    for (const line of lines) expectNoPath(line);
    const first = JSON.parse(lines[0]);
    expect(first.err.code).toBe('ENOENT');
    expect(first.err.path).toBe('missing.wav');
    expect(first.err.stack).toMatch(/ENOENT/);
    expect(JSON.parse(lines[2]).msg).toMatch(/missing\.wav/);
  });
});

describe('error plugin', () => {
  let app: FastifyInstance;
  const lines: string[] = [];

  beforeAll(async () => {
    // A plain pino, as the tests use: the plugin must scrub on its own.
    app = Fastify({
      loggerInstance: pino({ level: 'info' }, { write: (line: string) => void lines.push(line) }),
    }) as unknown as FastifyInstance;
    await app.register(errorPlugin);
    app.get('/crash', async () => {
      throw enoent;
    });
    app.get('/refused', async () => {
      throw new HttpError(400, `cannot read ${dataDir}/avatars/x/manifest.json`);
    });
    app.get('/upstream', async () => {
      throw new UpstreamError(`local provider wrote ${dataDir}/voices/out.wav but it is empty`, 500);
    });
    await app.ready();
  });

  afterAll(async () => {
    await app?.close();
  });

  it('an unexpected fs error is a 500 with a generic detail, logged without the path', async () => {
    const res = await app.inject({ method: 'GET', url: '/crash' });
    expect(res.statusCode).toBe(500);
    expect(res.json()).toEqual({ detail: 'internal server error' });
    const logged = lines.find((line) => line.includes('unhandled error'));
    expect(logged).toBeDefined();
    expect(logged).toMatch(/missing\.wav/);
    for (const line of lines) expectNoPath(line);
  });

  it('4xx and 502 details have their paths cut to file names', async () => {
    const refused = await app.inject({ method: 'GET', url: '/refused' });
    expect(refused.statusCode).toBe(400);
    expect(refused.json()).toEqual({ detail: 'cannot read manifest.json' });
    const upstream = await app.inject({ method: 'GET', url: '/upstream' });
    expect(upstream.statusCode).toBe(502);
    expect(upstream.json()).toEqual({ detail: 'local provider wrote out.wav but it is empty' });
  });
});
