import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from './helpers/app.ts';

/** `render` on POST /sessions (issue 47): server by default, client for the CPU models only, reported by GET. */
describe('the session option render', () => {
  let app: TestApp;

  beforeAll(async () => {
    app = await startTestApp();
  });
  afterAll(async () => {
    await app?.close();
  });

  async function create(body: Record<string, unknown>) {
    const res = await app.app.inject({ method: 'POST', url: '/sessions', payload: body });
    return { status: res.statusCode, body: res.json() as Record<string, unknown> };
  }

  async function describeSession(id: string) {
    return (await app.app.inject({ method: 'GET', url: `/sessions/${id}` })).json() as Record<string, unknown>;
  }

  it('defaults to server rendering and GET reports it', async () => {
    const created = await create({ avatar_id: 'astronaut', model: 'lipsync' });
    expect(created.status).toBe(200);
    expect((await describeSession(created.body.session_id as string)).render).toBe('server');
  });

  it.each([
    ['astronaut', 'lipsync'],
    ['demo-rt', 'rt'],
    ['demo-rt-head', 'rt_head'],
  ])('accepts render "client" for %s with the CPU model %s and GET reports it', async (avatar, model) => {
    const created = await create({ avatar_id: avatar, model, render: 'client' });
    expect(created.status).toBe(200);
    expect((await describeSession(created.body.session_id as string)).render).toBe('client');
  });

  it.each([
    ['astronaut', 'lipsync_b'],
    ['astronaut', 'lipsync_c'],
    ['astronaut', 'mock'],
  ])(
    'refuses render "client" with %s on the server-only model %s, naming the models that can',
    async (avatar, model) => {
      const created = await create({ avatar_id: avatar, model, render: 'client' });
      expect(created.status).toBe(400);
      expect(created.body.detail).toContain(`model "${model}" renders on the server only`);
      expect(created.body.detail).toContain('lipsync, rt, rt_head');
    },
  );

  it.each(['gpu', '', 'CLIENT', 1, null])('refuses an unknown render value %j with 400 {detail}', async (render) => {
    const created = await create({ avatar_id: 'astronaut', model: 'lipsync', render });
    expect(created.status).toBe(400);
    expect(typeof created.body.detail).toBe('string');
  });

  it("keeps the render mode in a deleted session's tombstone", async () => {
    const created = await create({ avatar_id: 'demo-rt', model: 'rt', render: 'client' });
    const id = created.body.session_id as string;
    expect((await app.app.inject({ method: 'DELETE', url: `/sessions/${id}` })).statusCode).toBe(200);
    const info = await describeSession(id);
    expect(info.state).toBe('terminated');
    expect(info.render).toBe('client');
  });
});
