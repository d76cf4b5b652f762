/**
 * Domain errors (`src/domain-errors.ts`) carry no HTTP: the error plugin's one table gives each its status.
 * A class missing from the table would answer a bare 500, so every exported class must be in it; and a
 * domain refusal that quotes client text is answered as itself, whatever the text says.
 */
import Fastify, { type FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as domainErrors from '../src/domain-errors.ts';
import { Overloaded, DomainError, InvalidSelection, NotAdmitted, SessionNotFound } from '../src/domain-errors.ts';
import errorPlugin, { DOMAIN_STATUSES } from '../src/plugins/app/errors.ts';

describe('error plugin: the domain errors table', () => {
  let app: FastifyInstance;
  const thrown = new Map<string, DomainError>([
    ['not-found', new SessionNotFound()],
    ['not-admitted', new NotAdmitted('session is not started')],
    ['full', new Overloaded('session capacity reached (2 active); retry later', 7)],
    ['emfile-named', new InvalidSelection('tts_provider "EMFILE" is unknown')],
  ]);

  beforeAll(async () => {
    app = Fastify();
    await app.register(errorPlugin);
    app.get('/throw/:which', async (request) => {
      throw thrown.get((request.params as { which: string }).which)!;
    });
    await app.ready();
  });

  afterAll(async () => {
    await app?.close();
  });

  it('has a status for every domain error class the service declares', () => {
    const declared = Object.values(domainErrors).filter(
      (value): value is typeof DomainError => typeof value === 'function' && value.prototype instanceof DomainError,
    );
    const mapped = new Set<unknown>(DOMAIN_STATUSES.map(([kind]) => kind));
    expect(declared.length).toBeGreaterThan(0);
    expect(declared.filter((kind) => !mapped.has(kind)).map((kind) => kind.name)).toEqual([]);
  });

  it('answers each domain error with its status and detail, and a capacity refusal with Retry-After', async () => {
    const notFound = await app.inject({ method: 'GET', url: '/throw/not-found' });
    expect({ status: notFound.statusCode, body: notFound.json() }).toEqual({
      status: 404,
      body: { detail: 'session not found' },
    });
    const refused = await app.inject({ method: 'GET', url: '/throw/not-admitted' });
    expect({ status: refused.statusCode, body: refused.json() }).toEqual({
      status: 409,
      body: { detail: 'session is not started' },
    });
    const full = await app.inject({ method: 'GET', url: '/throw/full' });
    expect(full.statusCode).toBe(503);
    expect(full.headers['retry-after']).toBe('7');
    expect(full.json()).toEqual({ detail: 'session capacity reached (2 active); retry later' });
  });

  it('answers a domain refusal quoting "EMFILE" from the client as itself, not as a descriptor shortage', async () => {
    const res = await app.inject({ method: 'GET', url: '/throw/emfile-named' });
    expect({ status: res.statusCode, body: res.json() }).toEqual({
      status: 400,
      body: { detail: 'tts_provider "EMFILE" is unknown' },
    });
  });
});
