import fs from 'node:fs/promises';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { json, makeAvatarBundle, post, startTestApp, tempDir, type TestApp } from './helpers/app.ts';
import { sessionParts } from '../src/sessions/session.ts';

const CARD = { avatar_id: 'card', model: 'mock' };

/** POST /sessions responses, with the ids of those created kept for cleanup. */
const createdIds: string[] = [];
async function createMany(t: TestApp, n: number, body: object = CARD): Promise<Response[]> {
  const responses = await Promise.all(Array.from({ length: n }, () => post(t.baseUrl, '/sessions', body)));
  for (const res of responses) if (res.status === 200) createdIds.push((await json(res.clone())).session_id);
  return responses;
}

async function expectCapacityRefusal(res: Response): Promise<void> {
  expect(res.status).toBe(503);
  expect(res.headers.get('retry-after')).toMatch(/^\d+$/);
  const body = await json(res);
  expect(typeof body.detail).toBe('string');
  expect(body.detail.length).toBeGreaterThan(0);
}

describe('session admission under concurrency', () => {
  let t: TestApp;
  beforeAll(async () => {
    const avatarsDir = await tempDir('admission-');
    await makeAvatarBundle(avatarsDir, 'card');
    const broken = await makeAvatarBundle(avatarsDir, 'broken-frame');
    // Listed by the catalog, but the renderer cannot prepare it: POST /sessions answers 502.
    await fs.writeFile(path.join(broken, 'frames', 'frame_00000.png'), 'not a png at all');
    t = await startTestApp({ avatarsDir, env: { SERVICE_MAX_PENDING_SESSIONS: '16', SERVICE_MAX_SESSIONS: '3' } });
  });
  afterAll(async () => t?.close());
  afterEach(async () => {
    await Promise.all(createdIds.splice(0).map((id) => fetch(`${t.baseUrl}/sessions/${id}`, { method: 'DELETE' })));
    expect(t.services.supervisor.liveCount).toBe(0);
  });

  it('40 concurrent POST /sessions with a pending cap of 16: exactly 16 are created, the rest 503 {detail} + Retry-After', async () => {
    const responses = await createMany(t, 40);
    const created = responses.filter((r) => r.status === 200);
    const refused = responses.filter((r) => r.status !== 200);
    expect(created).toHaveLength(16);
    expect(refused).toHaveLength(24);
    for (const res of refused) await expectCapacityRefusal(res);
    const ids = await Promise.all(created.map(async (r) => (await json(r)).session_id as string));
    expect(new Set(ids).size).toBe(16);
    expect(t.services.supervisor.liveCount).toBe(16);
    expect(t.services.supervisor.pendingCount).toBe(16);
    // The cap holds once the burst is over, too.
    await expectCapacityRefusal((await createMany(t, 1))[0]);
  });

  it('concurrent starts of different sessions never exceed SERVICE_MAX_SESSIONS', async () => {
    const ids = await Promise.all((await createMany(t, 8)).map(async (r) => (await json(r)).session_id as string));
    const starts = await Promise.all(ids.map((id) => post(t.baseUrl, `/sessions/${id}/start`)));
    expect(starts.filter((r) => r.status === 200)).toHaveLength(3);
    const refused = starts.filter((r) => r.status !== 200);
    expect(refused).toHaveLength(5);
    for (const res of refused) await expectCapacityRefusal(res);
    expect(t.services.supervisor.activeCount).toBe(3);
    const queue = await json(await fetch(`${t.baseUrl}/queue/status`));
    expect(queue).toMatchObject({ capacity: 3, active: 3, available: 0 });
  });

  it('a failed create gives its pending slot back (renderer 502, validation 400), even when failures run concurrently', async () => {
    const failures = [
      ...(await createMany(t, 12, { avatar_id: 'broken-frame', model: 'mock' })),
      ...(await createMany(t, 12, { avatar_id: 'no-such-avatar', model: 'mock' })),
      ...(
        await Promise.all([
          createMany(t, 10, { avatar_id: 'broken-frame', model: 'mock' }),
          createMany(t, 10, { avatar_id: 'no-such-avatar', model: 'mock' }),
        ])
      ).flat(),
    ];
    // Concurrent failures hold slots while in flight (so some of the 20 may be refused with 503), but none keeps one.
    for (const res of failures) expect([400, 502, 503]).toContain(res.status);
    expect(failures.filter((r) => r.status === 502).length).toBeGreaterThanOrEqual(12);
    expect(failures.filter((r) => r.status === 400).length).toBeGreaterThanOrEqual(12);
    expect(t.services.supervisor.pendingCount).toBe(0);
    expect(t.services.supervisor.liveCount).toBe(0);
    const responses = await createMany(t, 16);
    expect(responses.map((r) => r.status)).toEqual(Array(16).fill(200));
    await expectCapacityRefusal((await createMany(t, 1))[0]);
  });

  it('created sessions cost nothing until started: no media clock, no frames, no CPU', async () => {
    const ids = await Promise.all((await createMany(t, 16)).map(async (r) => (await json(r)).session_id as string));
    expect(ids).toHaveLength(16);
    // Let anything the creations set off settle before measuring.
    await new Promise((r) => setTimeout(r, 300));
    const cpuBefore = process.cpuUsage();
    const wallBefore = performance.now();
    await new Promise((r) => setTimeout(r, 3_000));
    const cpu = process.cpuUsage(cpuBefore);
    const wallMs = performance.now() - wallBefore;
    const cpuMs = (cpu.user + cpu.system) / 1000;
    console.info(
      `16 created, unstarted sessions: ${cpuMs.toFixed(1)} ms CPU over ${Math.round(wallMs)} ms wall (${((100 * cpuMs) / wallMs).toFixed(2)} %)`,
    );
    for (const id of ids) {
      const session = t.services.supervisor.liveSession(id)!;
      expect(sessionParts(session).media.playout.mediaMs).toBe(0);
      expect(sessionParts(session).media.playout.sentFrames).toBe(0);
    }
    // The whole test process (render workers included) stays near idle: a ticking clock per session would not.
    expect(cpuMs / wallMs).toBeLessThan(0.05);

    // Starting one makes it (and only it) run.
    expect((await post(t.baseUrl, `/sessions/${ids[0]}/start`)).status).toBe(200);
    const started = t.services.supervisor.liveSession(ids[0])!;
    await expect.poll(() => sessionParts(started).media.playout.sentFrames, { timeout: 5_000 }).toBeGreaterThan(3);
    expect(sessionParts(t.services.supervisor.liveSession(ids[1])!).media.playout.mediaMs).toBe(0);
  });
});
