import { describe, expect, it } from 'vitest';
import { json, makeAvatarBundle, post, startTestApp, tempDir } from './helpers/app.ts';

describe('sessions after a restart', () => {
  it('reports live sessions as terminated and keeps tombstones, both answering 409 to start', async () => {
    const dataDir = await tempDir('restart-data-');
    const avatarsDir = await tempDir('restart-avatars-');
    await makeAvatarBundle(avatarsDir, 'card');
    const first = await startTestApp({ dataDir, avatarsDir });
    const running = (await json(await post(first.baseUrl, '/sessions', { avatar_id: 'card', model: 'mock' })))
      .session_id;
    await post(first.baseUrl, `/sessions/${running}/start`);
    const created = (await json(await post(first.baseUrl, '/sessions', { avatar_id: 'card', model: 'mock' })))
      .session_id;
    const deleted = (await json(await post(first.baseUrl, '/sessions', { avatar_id: 'card', model: 'mock' })))
      .session_id;
    await fetch(`${first.baseUrl}/sessions/${deleted}`, { method: 'DELETE' });
    // A crash would skip the graceful path; drop the process state without terminating sessions.
    await first.services.store.close();
    await first.app.close().catch(() => undefined);

    const second = await startTestApp({ dataDir, avatarsDir });
    try {
      for (const id of [running, created, deleted]) {
        const info = await json(await fetch(`${second.baseUrl}/sessions/${id}`));
        expect(info.state).toBe('terminated');
        expect(info.avatar_id).toBe('card');
        expect((await post(second.baseUrl, `/sessions/${id}/start`)).status).toBe(409);
      }
      const restarted = await json(await fetch(`${second.baseUrl}/sessions/${running}`));
      expect(restarted.terminated_reason).toBe('service restarted');
      expect(restarted.expires_at).toBeDefined();
    } finally {
      await second.close();
    }
  });

  it('forgets tombstones whose retention has passed', async () => {
    const dataDir = await tempDir('restart-data-');
    const avatarsDir = await tempDir('restart-avatars-');
    await makeAvatarBundle(avatarsDir, 'card');
    const first = await startTestApp({ dataDir, avatarsDir, env: { SERVICE_SESSION_TOMBSTONE_MS: '0' } });
    const id = (await json(await post(first.baseUrl, '/sessions', { avatar_id: 'card', model: 'mock' }))).session_id;
    await fetch(`${first.baseUrl}/sessions/${id}`, { method: 'DELETE' });
    await first.close();
    const second = await startTestApp({ dataDir, avatarsDir });
    try {
      expect((await fetch(`${second.baseUrl}/sessions/${id}`)).status).toBe(404);
    } finally {
      await second.close();
    }
  });
});
