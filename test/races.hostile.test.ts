/**
 * Issue 25 row 3: races a hostile client can start with ordinary requests. Each one is run many times with
 * `Promise.all`, so the interleavings that used to answer 5xx (ENOENT on a rename, a vanished bundle, a
 * recording attached to a session already closing) come up; the answers must be the documented 2xx/4xx sets.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { json, makeAvatarBundle, post, startTestApp, tempDir, type TestApp } from './helpers/app.ts';

const ROUNDS = 20;
/** POST /sessions calls racing each avatar delete: enough for some to land on each side of it. */
const CREATES_PER_DELETE = 6;
/** DELETEs racing each other on one avatar. */
const CONCURRENT_DELETES = 3;

let app: TestApp;
beforeAll(async () => {
  const avatarsDir = await tempDir('race-avatars-');
  await makeAvatarBundle(avatarsDir, 'race-mock', { model_type: 'mock', width: 128, height: 96 });
  // Generous caps: the races, not the admission limits, are under test here.
  app = await startTestApp({ avatarsDir, env: { SERVICE_MAX_PENDING_SESSIONS: '200', SERVICE_MAX_SESSIONS: '50' } });
}, 60_000);
afterAll(() => app?.close());

const del = (p: string) => fetch(`${app.baseUrl}${p}`, { method: 'DELETE' });
const sorted = (statuses: number[]) => [...statuses].sort((a, b) => a - b);

/** A custom avatar as POST /avatars/custom leaves one (no face detection needed for the race). */
async function customAvatar(round: number): Promise<string> {
  const id = `custom-race-${Date.now()}${round}`;
  await makeAvatarBundle(app.avatarsDir, id, {
    model_type: 'mock',
    width: 128,
    height: 96,
    metadata: { custom_avatar: true, base_avatar_id: 'race-mock' },
  });
  app.services.catalog.invalidate();
  expect((await fetch(`${app.baseUrl}/avatars/${id}`)).status).toBe(200);
  return id;
}

describe('races that used to answer 5xx', () => {
  it('concurrent DELETEs of one custom avatar: exactly one 200, the rest 404', async () => {
    for (let round = 0; round < ROUNDS; round++) {
      const id = await customAvatar(round);
      const answers = await Promise.all(Array.from({ length: CONCURRENT_DELETES }, () => del(`/avatars/${id}`)));
      const bodies = await Promise.all(answers.map(json));
      expect(sorted(answers.map((r) => r.status)), JSON.stringify(bodies)).toEqual([
        200,
        ...Array(CONCURRENT_DELETES - 1).fill(404),
      ]);
      for (const body of bodies) expect(body.deleted === true || typeof body.detail === 'string').toBe(true);
      expect((await fetch(`${app.baseUrl}/avatars/${id}`)).status).toBe(404);
    }
  }, 120_000);

  it('POST /sessions racing the delete of its custom avatar: 200 (it loaded in time) or 400 (it is gone), never 5xx', async () => {
    const created: string[] = [];
    try {
      for (let round = 0; round < ROUNDS; round++) {
        const id = await customAvatar(round);
        const creates = Array.from({ length: CREATES_PER_DELETE }, () =>
          post(app.baseUrl, '/sessions', { avatar_id: id, model: 'mock' }),
        );
        const [deleted, ...answers] = await Promise.all([del(`/avatars/${id}`), ...creates]);
        expect(deleted.status).toBe(200);
        for (const answer of answers) {
          const body = await json(answer);
          expect([200, 400], JSON.stringify(body)).toContain(answer.status);
          if (answer.status === 200) created.push(body.session_id);
          else expect(body.detail).toBe(`avatar_id "${id}" does not exist`);
        }
      }
    } finally {
      await Promise.all(created.map((sessionId) => del(`/sessions/${sessionId}`)));
    }
  }, 180_000);

  it('rt-recording/start racing DELETE /sessions: 200 or 409, and the tombstone never reads recording; stop answers 409', async () => {
    for (let round = 0; round < ROUNDS; round++) {
      const created = await post(app.baseUrl, '/sessions', { avatar_id: 'race-mock', model: 'mock' });
      expect(created.status).toBe(200);
      const { session_id: id } = await json(created);
      expect((await post(app.baseUrl, `/sessions/${id}/start`)).status).toBe(200);

      const [start, deleted] = await Promise.all([
        post(app.baseUrl, `/sessions/${id}/rt-recording/start`),
        del(`/sessions/${id}`),
      ]);
      expect([200, 409], JSON.stringify(await json(start))).toContain(start.status);
      expect(deleted.status).toBe(200);

      const status = await json(await fetch(`${app.baseUrl}/sessions/${id}/rt-recording`));
      expect(status.state).not.toBe('recording');
      expect((await json(await fetch(`${app.baseUrl}/sessions/${id}`))).state).toBe('terminated');
      const stop = await post(app.baseUrl, `/sessions/${id}/rt-recording/stop`);
      expect(stop.status, JSON.stringify(await json(stop))).toBe(409);
    }
  }, 180_000);
});
