/**
 * Every multipart route refuses a malformed body with the documented 4xx `{detail}` (no filesystem
 * path in it), and the same keep-alive connection then answers the next request promptly. The app
 * logs through the service logger into a capture, and no line may carry the repository or a temp path.
 */
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../src/logger.ts';
import { UNREAD_BODY_DRAIN_BYTES } from '../src/http/multipart.ts';
import { startTestApp, type TestApp } from './helpers/app.ts';
import { openSession, type LiveSession } from './helpers/conversation.ts';
import { keepAliveExchange, type KeepAliveExchange, type RawRequest } from './helpers/raw-http.ts';

const REPOSITORY_ROOT = path.resolve(import.meta.dirname, '..');
const BOUNDARY = 'edge-test-7d1f0c';
const MULTIPART = `multipart/form-data; boundary=${BOUNDARY}`;
/** A follow-up GET /health on an idle loopback server answers in a few ms; a stalled socket never does. */
const FOLLOW_UP_MS = 2_000;
/** Sent after too many fields, so most of the body is still unread when the form is refused. */
const BODY_AFTER_REFUSAL_BYTES = 3 * 1024 * 1024;
/** Absolute-looking paths: a '/' opening a word and followed by at least one more segment. */
const PATH_IN_TEXT = /(^|[\s'"(=:])\/[\w.@-]+\//;

interface MultipartRoute {
  label: string;
  path: (sessionId: string) => string;
  fileField: string;
  /** The route's per-file bound and how it refuses one byte more, or an oversized field (the clone routes answer 400, as spec 7 asks). */
  maxFileBytes: number;
  oversizeStatus: number;
  oversizeDetail: RegExp;
}

const MB = 1024 * 1024;
const ROUTES: MultipartRoute[] = [
  {
    label: 'POST /avatars/custom',
    path: () => '/avatars/custom',
    fileField: 'image',
    maxFileBytes: 10 * MB,
    oversizeStatus: 413,
    oversizeDetail: /10 MB/,
  },
  {
    label: 'POST /sessions/{id}/transcribe',
    path: (id) => `/sessions/${id}/transcribe`,
    fileField: 'audio',
    maxFileBytes: 25 * MB,
    oversizeStatus: 413,
    oversizeDetail: /25 MB/,
  },
  {
    label: 'POST /sessions/{id}/speak_audio',
    path: (id) => `/sessions/${id}/speak_audio`,
    fileField: 'audio',
    maxFileBytes: 25 * MB,
    oversizeStatus: 413,
    oversizeDetail: /25 MB/,
  },
  {
    label: 'POST /sessions/{id}/speak_rt_audio',
    path: (id) => `/sessions/${id}/speak_rt_audio`,
    fileField: 'audio',
    maxFileBytes: 25 * MB,
    oversizeStatus: 413,
    oversizeDetail: /25 MB/,
  },
  {
    label: 'POST /sessions/{id}/customize/reference',
    path: (id) => `/sessions/${id}/customize/reference`,
    fileField: 'audio',
    maxFileBytes: 12 * MB,
    oversizeStatus: 400,
    oversizeDetail: /12 MB/,
  },
  {
    label: 'POST /customize/reference',
    path: () => '/customize/reference',
    fileField: 'audio',
    maxFileBytes: 12 * MB,
    oversizeStatus: 400,
    oversizeDetail: /12 MB/,
  },
  {
    label: 'POST /voices/clone',
    path: () => '/voices/clone',
    fileField: 'audio',
    maxFileBytes: 12 * MB,
    oversizeStatus: 400,
    oversizeDetail: /12 MB/,
  },
];

function field(name: string, value: string): Buffer {
  return Buffer.from(`--${BOUNDARY}\r\nContent-Disposition: form-data; name="${name}"\r\n\r\n${value}\r\n`, 'latin1');
}

function fileHeader(name: string): Buffer {
  return Buffer.from(
    `--${BOUNDARY}\r\nContent-Disposition: form-data; name="${name}"; filename="upload.bin"\r\nContent-Type: application/octet-stream\r\n\r\n`,
    'latin1',
  );
}

function file(name: string, bytes: Buffer): Buffer {
  return Buffer.concat([fileHeader(name), bytes, Buffer.from('\r\n')]);
}

const CLOSING = Buffer.from(`--${BOUNDARY}--\r\n`, 'latin1');

interface MalformedCase {
  name: string;
  headers: Record<string, string>;
  body: Buffer;
  status: number;
  detail: RegExp;
}

function malformedCases(route: MultipartRoute): MalformedCase[] {
  const sample = Buffer.alloc(4_000, 0x11);
  return [
    {
      name: 'a body cut off inside the file, before the closing boundary',
      headers: { 'content-type': MULTIPART },
      body: Buffer.concat([field('name', 'x'), fileHeader(route.fileField), sample]),
      status: 400,
      detail: /malformed multipart body: .*closing boundary/,
    },
    {
      name: 'a Content-Type without a boundary',
      headers: { 'content-type': 'multipart/form-data' },
      body: Buffer.concat([field('name', 'x'), file(route.fileField, sample), CLOSING]),
      status: 400,
      detail: /boundary/,
    },
    {
      name: 'a boundary longer than 70 characters',
      headers: { 'content-type': `multipart/form-data; boundary=${'b'.repeat(300)}` },
      body: Buffer.concat([field('name', 'x'), CLOSING]),
      status: 400,
      detail: /boundary/,
    },
    {
      name: 'a text/plain body',
      headers: { 'content-type': 'text/plain' },
      body: Buffer.from('audio=hello'),
      status: 400,
      detail: /multipart\/form-data/,
    },
    {
      name: 'an application/octet-stream body',
      headers: { 'content-type': 'application/octet-stream' },
      body: sample,
      status: 415,
      detail: /Unsupported Media Type/,
    },
    {
      name: 'headers and an empty body',
      headers: { 'content-type': MULTIPART },
      body: Buffer.alloc(0),
      status: 400,
      detail: /closing boundary/,
    },
    {
      name: 'part headers and nothing after them',
      headers: { 'content-type': MULTIPART },
      body: fileHeader(route.fileField),
      status: 400,
      detail: /closing boundary/,
    },
    {
      name: '40 fields followed by a 3 MB file (most of the body unread when refused)',
      headers: { 'content-type': MULTIPART },
      body: Buffer.concat([
        ...Array.from({ length: 40 }, (_, i) => field(`extra_${i}`, 'v')),
        file(route.fileField, Buffer.alloc(BODY_AFTER_REFUSAL_BYTES, 0x22)),
        CLOSING,
      ]),
      status: 400,
      detail: /too many fields/,
    },
    {
      name: 'two files',
      headers: { 'content-type': MULTIPART },
      body: Buffer.concat([file(route.fileField, sample), file(route.fileField, sample), CLOSING]),
      status: 400,
      detail: /too many files/,
    },
    {
      name: 'a field over 64 KiB',
      headers: { 'content-type': MULTIPART },
      body: Buffer.concat([field('name', 'n'.repeat(64 * 1024 + 1)), file(route.fileField, sample), CLOSING]),
      status: route.oversizeStatus,
      detail: /64 KiB/,
    },
    {
      name: 'a file one byte over the limit, with 1 MB of form still to come',
      headers: { 'content-type': MULTIPART },
      body: Buffer.concat([
        file(route.fileField, Buffer.alloc(route.maxFileBytes + 1, 0x33)),
        field('padding', 'p'.repeat(MB)),
        CLOSING,
      ]),
      status: route.oversizeStatus,
      detail: route.oversizeDetail,
    },
  ];
}

function expectPromptKeepAlive(exchange: KeepAliveExchange, what: string): void {
  if (exchange.closedAfterFirst) return;
  expect(exchange.followUp?.status, `${what}: follow-up on the same socket`).toBe(200);
  expect(exchange.followUpMs!, `${what}: follow-up latency`).toBeLessThan(FOLLOW_UP_MS);
}

describe('multipart routes refuse malformed bodies at the edge', () => {
  let t: TestApp;
  let s: LiveSession;
  const logLines: string[] = [];

  beforeAll(async () => {
    const logger = createLogger('debug', { write: (line: string) => void logLines.push(line) });
    // transcribe checks that a recognizer is configured before it reads the form; nothing is ever sent to it.
    t = await startTestApp({ env: { SERVICE_ASR_BASE_URL: 'http://127.0.0.1:9/v1' }, logger });
    s = await openSession(t);
  });

  afterAll(async () => {
    s?.close();
    await t?.close();
  });

  for (const route of ROUTES) {
    it(`${route.label}: every malformed body is a 4xx {detail} without a path, and the connection carries the next request`, async () => {
      for (const bad of malformedCases(route)) {
        const request: RawRequest = {
          method: 'POST',
          path: route.path(s.sessionId),
          headers: bad.headers,
          body: bad.body,
        };
        const exchange = await keepAliveExchange(
          t.baseUrl,
          request,
          { method: 'GET', path: '/health' },
          FOLLOW_UP_MS * 3,
        );
        expect(exchange.first.status, `${bad.name}: ${exchange.first.body}`).toBe(bad.status);
        const { detail } = JSON.parse(exchange.first.body) as { detail: string };
        expect(detail, bad.name).toMatch(bad.detail);
        expect(detail, bad.name).not.toMatch(PATH_IN_TEXT);
        expectPromptKeepAlive(exchange, bad.name);
      }
    }, 120_000);
  }

  it('a refusal with more than the drain bound still to come answers 400 with Connection: close, and fetch sees the 400', async () => {
    const body = Buffer.concat([
      ...Array.from({ length: 40 }, (_, i) => field(`extra_${i}`, 'v')),
      file('audio', Buffer.alloc(UNREAD_BODY_DRAIN_BYTES + 4 * MB, 0x44)),
      CLOSING,
    ]);
    const exchange = await keepAliveExchange(
      t.baseUrl,
      { method: 'POST', path: '/voices/clone', headers: { 'content-type': MULTIPART }, body },
      { method: 'GET', path: '/health' },
    );
    expect(exchange.first.status).toBe(400);
    expect(exchange.first.headers.connection).toBe('close');
    expect(exchange.closedAfterFirst).toBe(true);
    const viaFetch = await fetch(`${t.baseUrl}/voices/clone`, {
      method: 'POST',
      headers: { 'content-type': MULTIPART },
      body,
    });
    expect(viaFetch.status).toBe(400);
    expect((await viaFetch.json()).detail).toMatch(/too many fields/);
  });

  it('a well-formed form still reaches the route (its own 400 for a missing field), with an epilogue after the closing boundary', async () => {
    const body = Buffer.concat([
      field('unrelated', 'x'),
      CLOSING,
      Buffer.from('epilogue text that parsers ignore\r\n'),
    ]);
    const exchange = await keepAliveExchange(
      t.baseUrl,
      { method: 'POST', path: '/voices/clone', headers: { 'content-type': MULTIPART }, body },
      { method: 'GET', path: '/health' },
    );
    expect(exchange.first.status).toBe(400);
    expect(JSON.parse(exchange.first.body).detail).toBe('audio file is required');
    expectPromptKeepAlive(exchange, 'epilogue');
  });

  it('no log line written during these refusals carries the repository, data, avatars or temp directory path', () => {
    expect(logLines.length).toBeGreaterThan(0);
    const forbidden = [REPOSITORY_ROOT, t.dataDir, t.avatarsDir, `${os.tmpdir()}${path.sep}`];
    const offending = logLines.filter((line) => forbidden.some((dir) => line.includes(dir)));
    expect(offending).toEqual([]);
  });
});
