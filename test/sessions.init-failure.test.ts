import fs from 'node:fs/promises';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { json, makeAvatarBundle, post, startTestApp, tempDir, type TestApp } from './helpers/app.ts';

describe('POST /sessions when the rendering backend fails during initialization', () => {
  let t: TestApp;
  beforeAll(async () => {
    const avatarsDir = await tempDir('init-failure-');
    await makeAvatarBundle(avatarsDir, 'good', { model_type: 'rt' });
    const broken = await makeAvatarBundle(avatarsDir, 'broken-frame', { model_type: 'rt' });
    // A valid manifest whose frame is not an image: the catalog lists it, the renderer cannot prepare it.
    await fs.writeFile(path.join(broken, 'frames', 'frame_00000.png'), 'not a png at all');
    t = await startTestApp({ avatarsDir });
  });
  afterAll(async () => t?.close());

  it('answers 502 with {detail}, keeps no session, and the model recovers for good bundles', async () => {
    const res = await post(t.baseUrl, '/sessions', { avatar_id: 'broken-frame', model: 'mock' });
    expect(res.status).toBe(502);
    const { detail } = await json(res);
    expect(detail).toMatch(/rendering backend failed during initialization/);
    expect(detail).not.toContain(t.avatarsDir);
    expect(t.services.supervisor.liveCount).toBe(0);
    const ok = await post(t.baseUrl, '/sessions', { avatar_id: 'good', model: 'mock' });
    expect(ok.status).toBe(200);
    const { models } = await json(await fetch(`${t.baseUrl}/models`));
    expect(models.find((m: { id: string }) => m.id === 'mock')).toMatchObject({ connected: true, status: 'connected' });
  });

  it('never shows server paths when the bundle disappeared after listing', async () => {
    const gone = path.join(t.avatarsDir, 'good');
    await t.services.catalog.refresh();
    const entry = await t.services.catalog.get('good');
    expect(entry).toBeDefined();
    await fs.rm(path.join(gone, 'frames'), { recursive: true });
    // The catalog still holds the entry it scanned; the renderer finds no frame.
    const res = await post(t.baseUrl, '/sessions', { avatar_id: 'good', model: 'mock' });
    expect([400, 502]).toContain(res.status);
    expect((await json(res)).detail).not.toContain(t.avatarsDir);
  });
});
