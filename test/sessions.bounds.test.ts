import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { json, makeAvatarBundle, post, startTestApp, tempDir, type TestApp } from './helpers/app.ts';

describe('bounds on sessions that are created but not started', () => {
  let t: TestApp;
  beforeAll(async () => {
    const avatarsDir = await tempDir('bounds-');
    await makeAvatarBundle(avatarsDir, 'card');
    t = await startTestApp({
      avatarsDir,
      env: { SERVICE_MAX_PENDING_SESSIONS: '2', SERVICE_START_TIMEOUT_MS: '1500' },
    });
  });
  afterAll(async () => t?.close());

  it('answers 503 with Retry-After beyond SERVICE_MAX_PENDING_SESSIONS; starting one makes room', async () => {
    const a = (await json(await post(t.baseUrl, '/sessions', { avatar_id: 'card', model: 'mock' }))).session_id;
    const b = (await json(await post(t.baseUrl, '/sessions', { avatar_id: 'card', model: 'mock' }))).session_id;
    const full = await post(t.baseUrl, '/sessions', { avatar_id: 'card', model: 'mock' });
    expect(full.status).toBe(503);
    expect(full.headers.get('retry-after')).toMatch(/^\d+$/);
    expect((await json(full)).detail).toMatch(/not started/);
    expect((await post(t.baseUrl, `/sessions/${a}/start`)).status).toBe(200);
    const c = await post(t.baseUrl, '/sessions', { avatar_id: 'card', model: 'mock' });
    expect(c.status).toBe(200);
    for (const id of [a, b, (await json(c)).session_id])
      await fetch(`${t.baseUrl}/sessions/${id}`, { method: 'DELETE' });
  });

  it('terminates a session nobody starts within SERVICE_START_TIMEOUT_MS, and keeps started ones', async () => {
    const idle = (await json(await post(t.baseUrl, '/sessions', { avatar_id: 'card', model: 'mock' }))).session_id;
    const started = (await json(await post(t.baseUrl, '/sessions', { avatar_id: 'card', model: 'mock' }))).session_id;
    await post(t.baseUrl, `/sessions/${started}/start`);
    await new Promise((r) => setTimeout(r, 2_500));
    const reaped = await json(await fetch(`${t.baseUrl}/sessions/${idle}`));
    expect(reaped).toMatchObject({ state: 'terminated', terminated_reason: 'not started in time' });
    expect((await json(await fetch(`${t.baseUrl}/sessions/${started}`))).state).toBe('running');
    expect(t.services.supervisor.liveCount).toBe(1);
    await fetch(`${t.baseUrl}/sessions/${started}`, { method: 'DELETE' });
  });
});
