import fs from 'node:fs/promises';
import path from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import { Type } from '@sinclair/typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { sessionStateChart } from '../inspect/state-chart.ts';
import { HttpError, forbidden, notFound } from '../errors.ts';
import { errors } from '../schemas/common.ts';
import { INSPECT_MAX_BACKLOG_BYTES, INSPECT_MAX_VIEWERS, INSPECT_VIEWER_IDLE_MS } from '../inspect/inspection-hub.ts';
import { SSE_MAX_LAG_MS } from '../sessions/event-hub.ts';
import { isLoopbackPeer } from '../security/loopback-peer.ts';

const PUBLIC_DIR = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'public');
/** mermaid's self-contained browser bundle: served from node_modules, so the inspector works offline. */
const MERMAID_BUNDLE = createRequire(import.meta.url).resolve('mermaid/dist/mermaid.min.js');
/** Retry-After when every viewer slot is taken: a slot frees when a tab closes, so soon or not at all. */
const VIEWERS_FULL_RETRY_AFTER_S = 30;

/** The chart never changes while the process runs: generated once from the machine definition. */
const SESSION_CHART = sessionStateChart();

/**
 * The live state inspector (development tooling): a page that lists live sessions and, for one, draws the
 * session machine with its current state, the actor tree and an event log, fed by XState's `inspect` option.
 * Payloads carry user text and session ids (enough to speak into or end someone's session), so every route
 * answers 404 unless the inspector is enabled (SERVICE_INSPECTOR=on), and 403 to any peer but this machine
 * itself (a proxy's forwarded request included): reach it over an SSH tunnel (docs/security.md).
 */
const inspectRoutes: FastifyPluginAsyncTypebox = async (app) => {
  const { inspection } = app.services;

  app.addHook('onRequest', async (request) => {
    if (!inspection.enabled) throw notFound('the inspector is off (SERVICE_INSPECTOR=on enables it)');
    if (!isLoopbackPeer(request.socket.remoteAddress, request.headers)) {
      throw forbidden('the inspector answers only requests from this machine, not through a proxy (docs/security.md)');
    }
  });

  app.get('/inspect', { schema: { hide: true } }, async (_request, reply) => {
    reply.type('text/html; charset=utf-8').send(await fs.readFile(path.join(PUBLIC_DIR, 'inspect.html')));
  });
  app.get('/inspect/inspect.js', { schema: { hide: true } }, async (_request, reply) => {
    reply.type('application/javascript; charset=utf-8').send(await fs.readFile(path.join(PUBLIC_DIR, 'inspect.js')));
  });
  app.get('/inspect/mermaid.min.js', { schema: { hide: true } }, async (_request, reply) => {
    reply.type('application/javascript; charset=utf-8').header('cache-control', 'public, max-age=86400');
    return reply.send(await fs.readFile(MERMAID_BUNDLE));
  });

  app.get('/inspect/machine', {
    schema: {
      tags: ['inspector'],
      summary: 'Session state chart (mermaid)',
      description:
        'The session machine drawn from its definition as mermaid stateDiagram-v2 text. 404 when the inspector is off, 403 to a peer that is not loopback.',
      response: { 200: Type.Object({ id: Type.String(), mermaid: Type.String() }) },
    },
    handler: async () => SESSION_CHART,
  });

  app.get('/inspect/sessions', {
    schema: {
      tags: ['inspector'],
      summary: 'Sessions the inspector sees',
      description:
        'Live sessions (and those ended in the last minute) with their state value and child actors. 404 when the inspector is off, ' +
        '403 to a peer that is not loopback (or a request a proxy forwarded).',
      response: {
        200: Type.Object({
          sessions: Type.Array(
            Type.Object({
              session_id: Type.String(),
              value: Type.Unknown(),
              status: Type.String(),
              children: Type.Array(Type.String()),
              updated_at: Type.Integer(),
              terminated_at: Type.Union([Type.Integer(), Type.Null()]),
            }),
          ),
        }),
      },
    },
    handler: async () => ({ sessions: inspection.list() }),
  });

  app.get('/inspect/events', {
    schema: {
      tags: ['inspector'],
      summary: 'Inspection event stream',
      description:
        'text/event-stream of XState inspection records as JSON `data:` lines: {seq, at, session_id, type ' +
        '(@xstate.actor | @xstate.event | @xstate.snapshot), actor, source?, event?, payload?, value?, status?, children?}. ' +
        "Buffered records are replayed first (each message's `id` is its seq: a reconnect with `Last-Event-ID` gets only newer ones). " +
        `Optional \`session_id\` filters one session. At most ${INSPECT_MAX_VIEWERS} viewers at once: past that 503 {detail} with Retry-After. ` +
        `A viewer that stops reading is disconnected once it is ${SSE_MAX_LAG_MS / 1000} s or ${INSPECT_MAX_BACKLOG_BYTES / 1024} KiB behind, ` +
        `and a stream that was sent no record for ${INSPECT_VIEWER_IDLE_MS / 60_000} minutes is ended (EventSource reconnects).`,
      querystring: Type.Object({ session_id: Type.Optional(Type.String({ maxLength: 64 })) }),
      produces: ['text/event-stream'],
      response: { 200: Type.String({ description: 'text/event-stream' }), ...errors(503) },
    },
    handler: async (request, reply) => {
      if (inspection.full) {
        throw new HttpError(
          503,
          `the inspector already streams to ${INSPECT_MAX_VIEWERS} viewers; close one and try again`,
          {
            'retry-after': String(VIEWERS_FULL_RETRY_AFTER_S),
          },
        );
      }
      reply.hijack();
      const res = reply.raw;
      res.writeHead(200, {
        'content-type': 'text/event-stream; charset=utf-8',
        'cache-control': 'no-cache, no-transform',
        'x-accel-buffering': 'no',
      });
      res.write(': inspector\n\n');
      inspection.attach(res, request.query.session_id ?? null, lastEventSeq(request.headers['last-event-id']));
    },
  });
};

/** A reconnecting EventSource's Last-Event-ID: the seq of the last record it got (anything else: replay all). */
function lastEventSeq(header: string | string[] | undefined): number {
  const value = Array.isArray(header) ? header[0] : header;
  return value && /^\d{1,15}$/u.test(value) ? Number(value) : 0;
}

export default inspectRoutes;
