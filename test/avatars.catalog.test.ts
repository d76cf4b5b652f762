import fs from 'node:fs/promises';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { json, makeAvatarBundle, rawRequest, startTestApp, tempDir, type TestApp } from './helpers/app.ts';

describe('avatar catalog over SERVICE_AVATARS_DIR', () => {
  let t: TestApp;

  beforeAll(async () => {
    const avatarsDir = await tempDir('catalog-');
    await makeAvatarBundle(avatarsDir, 'good-rt', { model_type: 'rt' });
    await makeAvatarBundle(avatarsDir, '图像-avatar', { model_type: 'mock' });
    await makeAvatarBundle(avatarsDir, 'secret', { model_type: 'rt', metadata: { hidden: true } });
    await makeAvatarBundle(avatarsDir, 'custom-x-1', {
      model_type: 'lipsync',
      metadata: { custom_avatar: true, base_avatar_id: 'good-rt' },
    });
    // Broken bundles: each must be skipped without taking the catalog down.
    await fs.mkdir(path.join(avatarsDir, 'no-manifest'));
    const badJson = await makeAvatarBundle(avatarsDir, 'bad-json');
    await fs.writeFile(path.join(badJson, 'manifest.json'), '{ not json');
    await makeAvatarBundle(avatarsDir, 'bad-model', { model_type: 'hologram' });
    const noFrame = await makeAvatarBundle(avatarsDir, 'no-frame');
    await fs.rm(path.join(noFrame, 'frames'), { recursive: true });
    const mismatch = await makeAvatarBundle(avatarsDir, 'mismatch');
    const manifest = JSON.parse(await fs.readFile(path.join(mismatch, 'manifest.json'), 'utf8'));
    await fs.writeFile(path.join(mismatch, 'manifest.json'), JSON.stringify({ ...manifest, id: 'other' }));
    const oddSize = await makeAvatarBundle(avatarsDir, 'odd-size');
    await fs.writeFile(
      path.join(oddSize, 'manifest.json'),
      JSON.stringify({ ...manifest, id: 'odd-size', width: 127 }),
    );
    const noPreview = await makeAvatarBundle(avatarsDir, 'no-preview');
    await fs.rm(path.join(noPreview, 'preview.png'));
    await fs.writeFile(path.join(avatarsDir, 'stray-file.txt'), 'not a bundle');
    await fs.mkdir(path.join(avatarsDir, '.tmp-in-progress'));
    t = await startTestApp({ avatarsDir });
  });
  afterAll(async () => t?.close());

  it('lists valid, visible bundles only, as AvatarSummary', async () => {
    const res = await fetch(`${t.baseUrl}/avatars`);
    expect(res.status).toBe(200);
    const list = await json(res);
    expect(list.map((a: { id: string }) => a.id).sort()).toEqual(
      ['custom-x-1', 'good-rt', 'no-preview', '图像-avatar'].sort(),
    );
    const custom = list.find((a: { id: string }) => a.id === 'custom-x-1');
    expect(custom).toEqual({
      id: 'custom-x-1',
      name: 'custom-x-1',
      model_type: 'lipsync',
      width: 128,
      height: 128,
      is_custom: true,
      animated: false,
    });
  });

  it('serves the full manifest, hidden avatars included, and 404 for unknown ids', async () => {
    const hidden = await json(await fetch(`${t.baseUrl}/avatars/secret`));
    expect(hidden.metadata.hidden).toBe(true);
    expect(hidden).toMatchObject({ id: 'secret', model_type: 'rt', fps: 25, sample_rate: 16000, version: '1.0.0' });
    const cjk = await fetch(`${t.baseUrl}/avatars/${encodeURIComponent('图像-avatar')}`);
    expect(cjk.status).toBe(200);
    const missing = await fetch(`${t.baseUrl}/avatars/bad-json`);
    expect(missing.status).toBe(404);
    expect(await json(missing)).toHaveProperty('detail');
  });

  it('serves preview.png and 404s when the avatar or its preview is missing', async () => {
    const res = await fetch(`${t.baseUrl}/avatars/good-rt/preview`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('image/png');
    const bytes = Buffer.from(await res.arrayBuffer());
    expect(bytes.subarray(1, 4).toString()).toBe('PNG');
    expect((await fetch(`${t.baseUrl}/avatars/no-preview/preview`)).status).toBe(404);
    expect((await fetch(`${t.baseUrl}/avatars/unknown/preview`)).status).toBe(404);
  });

  it.each([
    '..%2F..%2Fetc%2Fpasswd',
    '%2e%2e',
    '..',
    '.tmp-in-progress',
    'good-rt%00',
    'a%2Fb',
    'stray-file.txt',
    '%5C..%5Cwindows',
  ])('never reaches outside the catalog for id %s', async (id) => {
    for (const suffix of ['', '/preview']) {
      const res = await rawRequest(t.baseUrl, 'GET', `/avatars/${id}${suffix}`);
      expect([400, 404]).toContain(res.status);
      expect(JSON.parse(res.body)).toHaveProperty('detail');
    }
    const del = await rawRequest(t.baseUrl, 'DELETE', `/avatars/${id}`);
    expect([400, 404]).toContain(del.status);
    // Nothing outside the catalog was touched.
    expect((await json(await fetch(`${t.baseUrl}/avatars/good-rt`))).id).toBe('good-rt');
  });

  it('refuses to delete built-in and hidden avatars (403) and unknown ones (404), deletes custom ones', async () => {
    expect((await fetch(`${t.baseUrl}/avatars/good-rt`, { method: 'DELETE' })).status).toBe(403);
    expect((await fetch(`${t.baseUrl}/avatars/secret`, { method: 'DELETE' })).status).toBe(403);
    expect((await fetch(`${t.baseUrl}/avatars/nope`, { method: 'DELETE' })).status).toBe(404);
    const res = await fetch(`${t.baseUrl}/avatars/custom-x-1`, { method: 'DELETE' });
    expect(res.status).toBe(200);
    expect(await json(res)).toEqual({ deleted: true });
    await expect(fs.access(path.join(t.avatarsDir, 'custom-x-1'))).rejects.toThrow();
    const list = await json(await fetch(`${t.baseUrl}/avatars`));
    expect(list.some((a: { id: string }) => a.id === 'custom-x-1')).toBe(false);
    expect((await fetch(`${t.baseUrl}/avatars/custom-x-1`, { method: 'DELETE' })).status).toBe(404);
  });
});
