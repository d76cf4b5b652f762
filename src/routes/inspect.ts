import fs from 'node:fs/promises';
import path from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import { Type } from '@sinclair/typebox';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { sessionMachine } from '../../machines/session.machine.ts';
import { machineToMermaid } from '../inspect/state-chart.ts';
import { forbidden, notFound } from '../errors.ts';
import { isLoopbackPeer } from '../security/loopback-peer.ts';

const PUBLIC_DIR = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'public');
/** mermaid's self-contained browser bundle: served from node_modules, so the inspector works offline. */
const MERMAID_BUNDLE = createRequire(import.meta.url).resolve('mermaid/dist/mermaid.min.js');
/** The chart never changes while the process runs: generated once from the machine definition. */
const SESSION_CHART = machineToMermaid(sessionMachine);

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
    handler: async () => ({ id: sessionMachine.id, mermaid: SESSION_CHART }),
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
        'Buffered records are replayed first. Optional `session_id` filters one session.',
      querystring: Type.Object({ session_id: Type.Optional(Type.String({ maxLength: 64 })) }),
      produces: ['text/event-stream'],
      response: { 200: Type.String({ description: 'text/event-stream' }) },
    },
    handler: async (request, reply) => {
      reply.hijack();
      const res = reply.raw;
      res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache, no-transform', 'x-accel-buffering': 'no' });
      res.write(': inspector\n\n');
      inspection.attach(res, request.query.session_id ?? null);
    },
  });
};

export default inspectRoutes;
