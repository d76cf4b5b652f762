/**
 * The error plugin's safety net: a handler that read part of a request body, paused it and failed
 * would leave the keep-alive socket waiting behind unread bytes. The error answer closes the
 * connection instead, so the client gets its 4xx and the socket is released at once.
 */
import Fastify, { type FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HttpError } from '../src/errors.ts';
import errorPlugin from '../src/plugins/app/errors.ts';
import { keepAliveExchange } from './helpers/raw-http.ts';

/** Far below the ~60 s a stalled keep-alive socket waits for Node's header timeout. */
const ANSWER_WITHIN_MS = 3_000;

describe('error plugin: a request body left paused half-read', () => {
  let app: FastifyInstance;
  let baseUrl: string;

  beforeAll(async () => {
    app = Fastify();
    await app.register(errorPlugin);
    // A parser that leaves the body to the handler, as @fastify/multipart does.
    app.addContentTypeParser('application/x-stream', (_request, _payload, done) => done(null));
    app.post('/first-chunk-only', async (request) => {
      await new Promise<void>((resolve) => {
        request.raw.once('data', () => {
          request.raw.pause();
          resolve();
        });
      });
      throw new HttpError(400, 'refused after the first chunk');
    });
    await app.listen({ host: '127.0.0.1', port: 0 });
    const address = app.server.address();
    baseUrl = `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`;
  });

  afterAll(async () => {
    await app?.close();
  });

  it('answers the 400 with Connection: close instead of stalling the keep-alive socket', async () => {
    const exchange = await keepAliveExchange(
      baseUrl,
      {
        method: 'POST',
        path: '/first-chunk-only',
        headers: { 'content-type': 'application/x-stream' },
        body: Buffer.alloc(4 * 1024 * 1024, 0x55),
      },
      { method: 'GET', path: '/missing' },
      ANSWER_WITHIN_MS,
    );
    expect(exchange.first.status).toBe(400);
    expect(JSON.parse(exchange.first.body)).toEqual({ detail: 'refused after the first chunk' });
    expect(exchange.closedAfterFirst).toBe(true);
  });
});
