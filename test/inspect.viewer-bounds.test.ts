/**
 * Issue 25 row 7: 200 `/inspect/events` viewers that never read held +160 MB until they left. Viewers are now
 * capped (503 {detail} past the cap), one whose unsent backlog passes the bound has its socket destroyed (an
 * `end()` would wait behind the very backlog it never reads), and a stream sent nothing for long is ended.
 */
import http from 'node:http';
import net from 'node:net';
import { Writable } from 'node:stream';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import type { InspectionEvent } from 'xstate';
import {
  INSPECT_MAX_BACKLOG_BYTES,
  INSPECT_MAX_VIEWERS,
  INSPECT_VIEWER_IDLE_MS,
  InspectionHub,
} from '../src/inspect/inspection-hub.ts';
import { SSE_KEEPALIVE_MS } from '../src/sessions/event-hub.ts';
import { eventually } from './helpers/conversation.ts';
import { startTestApp, type TestApp } from './helpers/app.ts';

/** What XState hands the inspector for one delivered event: about 300 bytes once it is a record. */
function deliveredEvent(index: number): InspectionEvent {
  const actorRef = { id: 'session', sessionId: 'x:0' };
  return {
    type: '@xstate.event',
    actorRef,
    rootId: 'x:0',
    sourceRef: undefined,
    event: { type: 'llm.delta', text: `${index} ${'lorem ipsum '.repeat(20)}` },
  } as unknown as InspectionEvent;
}

/** Floods `hub` with records of session `sessionId` until `bytes` of SSE text were produced. */
function flood(hub: InspectionHub, sessionId: string, bytes: number): void {
  const observe = hub.inspectorFor(sessionId)!;
  for (let index = 0, produced = 0; produced < bytes; index++) {
    observe(deliveredEvent(index));
    produced += 300;
  }
}

/** A viewer that never reads: its buffer fills and stays full. */
function stalledViewer(): Writable {
  return new Writable({ highWaterMark: 1024, write: () => undefined });
}

/** A viewer that reads everything, counting bytes. */
function readingViewer(): Writable & { received: () => number } {
  let received = 0;
  const stream = new Writable({
    write(chunk: Buffer, _encoding, callback) {
      received += chunk.length;
      callback();
    },
  });
  return Object.assign(stream, { received: () => received });
}

describe('the inspection hub with a viewer that stops reading', () => {
  afterEach(() => vi.useRealTimers());

  it('destroys that viewer once its unsent backlog passes the bound, and keeps streaming to the others', () => {
    const hub = new InspectionHub(true);
    const stalled = stalledViewer();
    const reading = readingViewer();
    hub.attach(stalled, null);
    hub.attach(reading, null);
    flood(hub, 's1', INSPECT_MAX_BACKLOG_BYTES * 2);
    expect(stalled.destroyed).toBe(true);
    expect(reading.destroyed).toBe(false);
    expect(hub.viewerCount).toBe(1);
    const before = reading.received();
    flood(hub, 's1', 3_000);
    expect(reading.received()).toBeGreaterThan(before);
    hub.close();
  });

  it('ends a stream that was sent no record for the idle time, but not one still fed', () => {
    vi.useFakeTimers({ now: 1_000_000 });
    const hub = new InspectionHub(true);
    const quiet = readingViewer();
    const fed = readingViewer();
    hub.attach(quiet, 'quiet-session');
    hub.attach(fed, 'busy-session');
    for (let elapsed = 0; elapsed <= INSPECT_VIEWER_IDLE_MS + 2 * SSE_KEEPALIVE_MS; elapsed += SSE_KEEPALIVE_MS) {
      flood(hub, 'busy-session', 300);
      vi.advanceTimersByTime(SSE_KEEPALIVE_MS);
    }
    expect(quiet.writableEnded).toBe(true);
    expect(fed.writableEnded).toBe(false);
    expect(hub.viewerCount).toBe(1);
    hub.close();
  });
});

/** Opens `GET /inspect/events` on a raw socket that never reads what it is sent. */
function nonReadingViewer(baseUrl: string): Promise<net.Socket> {
  const { hostname, port } = new URL(baseUrl);
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host: hostname, port: Number(port) }, () => {
      socket.write(`GET /inspect/events HTTP/1.1\r\nHost: ${hostname}:${port}\r\n\r\n`);
      socket.pause();
      resolve(socket);
    });
    socket.on('error', reject);
  });
}

/** Opens a reading viewer; resolves with its status, headers and body once the head arrived (the body keeps coming). */
function viewer(
  baseUrl: string,
): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: () => string; close: () => void }> {
  return new Promise((resolve, reject) => {
    const request = http.get(`${baseUrl}/inspect/events`, (response) => {
      let body = '';
      response.on('data', (chunk: Buffer) => (body += chunk.toString()));
      response.on('error', () => undefined);
      resolve({
        status: response.statusCode ?? 0,
        headers: response.headers,
        body: () => body,
        close: () => request.destroy(),
      });
    });
    request.on('error', reject);
  });
}

function connectionsOf(server: http.Server): Promise<number> {
  return new Promise((resolve, reject) =>
    server.getConnections((error, count) => (error ? reject(error) : resolve(count))),
  );
}

describe('GET /inspect/events over real sockets', () => {
  let t: TestApp;

  beforeAll(async () => {
    // The inspector is opt-in on some configurations; this test needs it on.
    t = await startTestApp({ env: { SERVICE_INSPECTOR: 'on' } });
  });
  afterAll(async () => {
    await t?.close();
  });

  it(`streams to ${INSPECT_MAX_VIEWERS} viewers, refuses the next with 503 {detail} and Retry-After, and admits one again when a viewer leaves`, async () => {
    const open = await Promise.all(Array.from({ length: INSPECT_MAX_VIEWERS }, () => viewer(t.baseUrl)));
    try {
      expect(open.map((one) => one.status)).toEqual(Array(INSPECT_MAX_VIEWERS).fill(200));
      const refused = await viewer(t.baseUrl);
      open.push(refused);
      expect(refused.status).toBe(503);
      expect(refused.headers['retry-after']).toMatch(/^\d+$/u);
      await eventually(() => refused.body().length > 0, 5_000);
      expect(JSON.parse(refused.body()).detail).toMatch(/already streams to \d+ viewers/u);

      open.shift()!.close();
      expect(await eventually(() => t.services.inspection.viewerCount < INSPECT_MAX_VIEWERS, 5_000)).toBe(true);
      const admitted = await viewer(t.baseUrl);
      expect(admitted.status).toBe(200);
      open.push(admitted);
    } finally {
      for (const one of open) one.close();
    }
  });

  it('documents the 503 in OpenAPI', async () => {
    const doc = await (await fetch(`${t.baseUrl}/openapi.json`)).json();
    expect(Object.keys(doc.paths['/inspect/events'].get.responses)).toContain('503');
  });

  it('closes the connection of a viewer that never reads once its backlog passes the bound', async () => {
    expect(await eventually(() => t.services.inspection.viewerCount === 0, 5_000)).toBe(true);
    const server = t.app.server;
    const idleConnections = await connectionsOf(server);
    const socket = await nonReadingViewer(t.baseUrl);
    try {
      expect(await eventually(() => t.services.inspection.viewerCount === 1, 5_000)).toBe(true);
      // Far more than the kernel's socket buffers on loopback and the backlog bound together.
      for (let round = 0; round < 40 && t.services.inspection.viewerCount > 0; round++) {
        flood(t.services.inspection, 'x:0', INSPECT_MAX_BACKLOG_BYTES);
        await new Promise((resolve) => setImmediate(resolve));
      }
      expect(t.services.inspection.viewerCount).toBe(0);
      // Destroyed, not ended behind a backlog nobody reads: the server holds no connection for it any more.
      let connections = Infinity;
      for (let waited = 0; waited < 5_000 && connections > idleConnections; waited += 50) {
        connections = await connectionsOf(server);
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      expect(connections).toBeLessThanOrEqual(idleConnections);
    } finally {
      socket.destroy();
    }
  });
});
