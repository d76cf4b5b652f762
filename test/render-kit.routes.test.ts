import fs from 'node:fs/promises';
import { gunzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { closeFaceDetector } from '../actors/faces/detector.ts';
import { CLIP_KIT_BUDGET_BYTES, PHOTO_KIT_BUDGET_BYTES } from '../actors/render/render-kit.ts';
import { unpackState } from '../actors/render/kit-state.ts';
import { uploadClip } from './helpers/clip-avatar.ts';
import { landscapeMp4 } from './helpers/clips.ts';
import { startTestApp, tempDir, type TestApp } from './helpers/app.ts';

/** A kit builds in a few seconds; a 10 s clip's creation and kit on a loaded 2-core host take longer. */
const KIT_TIMEOUT_MS = 120_000;
const CLIP_TIMEOUT_MS = 300_000;

describe('GET /avatars/{id}/render-kit (real app, kit thread, ffmpeg)', () => {
  let t: TestApp;
  let clips: string;

  beforeAll(async () => {
    t = await startTestApp();
    clips = await tempDir('kit-clips-');
  }, 60_000);

  afterAll(async () => {
    await t?.close();
    await closeFaceDetector();
    if (clips) await fs.rm(clips, { recursive: true, force: true });
  });

  /** Follows the plain URL's redirect; the kit's answer and where it lives. */
  async function fetchKit(avatarId: string, model?: string) {
    const plain = await t.app.inject({
      url: `/avatars/${avatarId}/render-kit${model ? `?model=${model}` : ''}`,
    });
    expect(plain.statusCode, plain.body).toBe(302);
    expect(plain.headers['cache-control']).toBe('no-cache');
    // The Location is relative to the plain URL, so a service behind a path-prefixing proxy keeps its prefix.
    const relative = String(plain.headers.location);
    expect(relative).toMatch(/^render-kit\//);
    const resolved = new URL(relative, `http://service/avatars/${avatarId}/render-kit`);
    const location = resolved.pathname + resolved.search;
    const kit = await t.app.inject({ url: location });
    return { location, kit };
  }

  it('an unknown avatar has no render kit: 404 {detail}, at the plain and the hashed URL', async () => {
    for (const url of ['/avatars/nobody/render-kit', '/avatars/nobody/render-kit/0123456789abcdef']) {
      const res = await t.app.inject({ url });
      expect(res.statusCode, url).toBe(404);
      expect(res.json().detail).toBe('avatar not found');
    }
  });

  it('a model the browser cannot draw, or one that cannot render the avatar, is 400 naming the models that can', async () => {
    for (const [avatar, model] of [
      ['astronaut', 'lipsync_b'],
      ['astronaut', 'lipsync_c'],
      ['astronaut', 'mock'],
      ['astronaut', 'no-such-model'],
      ['demo-rt', 'lipsync'],
      ['astronaut', 'rt'],
    ]) {
      const res = await t.app.inject({ url: `/avatars/${avatar}/render-kit?model=${model}` });
      expect(res.statusCode, `${avatar} ${model}`).toBe(400);
      expect(res.json().detail).toMatch(/cannot render/);
      if (model.startsWith('lipsync_') || model === 'mock') expect(res.json().detail).toMatch(/lipsync, rt, rt_head/);
    }
  });

  it(
    "a photo's kit: content-hashed URL, immutable, ETag answered with 304, within the photo budget",
    async () => {
      const { location, kit } = await fetchKit('astronaut');
      expect(location).toMatch(/^\/avatars\/astronaut\/render-kit\/[0-9a-f]{16}\?model=lipsync$/);
      expect(kit.statusCode).toBe(200);
      expect(kit.headers['content-type']).toBe('application/octet-stream');
      expect(kit.headers['cache-control']).toBe('public, max-age=31536000, immutable');
      const etag = String(kit.headers.etag);
      expect(etag).toBe(`"${location.split('/').pop()!.split('?')[0]}"`);
      expect(kit.rawPayload.length).toBeGreaterThan(100_000);
      expect(kit.rawPayload.length).toBeLessThanOrEqual(PHOTO_KIT_BUDGET_BYTES);
      // What the kit holds: the photo's renderer, every mouth pose built (8 openings × 3 × 3 shapes, the rest face aside).
      const state = unpackState(new Uint8Array(gunzipSync(kit.rawPayload))) as {
        format: number;
        model: string;
        width: number;
        renderer: { mouthPatches: Map<number, unknown> };
      };
      expect({ format: state.format, model: state.model, width: state.width }).toEqual({
        format: 1,
        model: 'lipsync',
        width: 512,
      });
      expect(state.renderer.mouthPatches.size).toBe(8 * 3 * 3 - 1);

      const again = await t.app.inject({ url: location, headers: { 'if-none-match': etag } });
      expect(again.statusCode).toBe(304);
      expect(again.rawPayload.length).toBe(0);
      // Built once per avatar version: the plain URL points at the same bytes.
      expect((await fetchKit('astronaut')).location).toBe(location);
      const stale = await t.app.inject({ url: '/avatars/astronaut/render-kit/0123456789abcdef' });
      expect(stale.statusCode).toBe(404);
      expect(stale.json().detail).toMatch(/not current/);
    },
    KIT_TIMEOUT_MS,
  );

  it(
    "drawn avatars' kits, rt and rt_head (either model draws either drawn avatar)",
    async () => {
      for (const [avatar, model] of [
        ['demo-rt', 'rt'],
        ['demo-rt-head', 'rt_head'],
        ['demo-rt', 'rt_head'],
      ]) {
        const { location, kit } = await fetchKit(avatar, model);
        expect(location).toContain(`?model=${model}`);
        expect(kit.statusCode).toBe(200);
        expect(kit.rawPayload.length).toBeLessThanOrEqual(PHOTO_KIT_BUDGET_BYTES);
      }
    },
    KIT_TIMEOUT_MS,
  );

  it(
    "a 10 s clip's video avatar: its kit stays within the clip budget",
    async () => {
      const res = await uploadClip(t.baseUrl, await fs.readFile(await landscapeMp4(clips, 10)), 'Ten Seconds');
      const summary = await res.json();
      expect(res.status, JSON.stringify(summary)).toBe(200);
      const { kit } = await fetchKit(summary.id);
      expect(kit.statusCode).toBe(200);
      const state = unpackState(new Uint8Array(gunzipSync(kit.rawPayload)), (value) =>
        value.$loopVideo ? value.$loopVideo : undefined,
      ) as { renderer: { loop: { frames: { frames: number; ivf: Uint8Array } } } };
      const video = state.renderer.loop.frames;
      expect(video.frames).toBeGreaterThan(100);
      console.log(
        `10 s clip kit: ${kit.rawPayload.length} bytes, loop video ${video.ivf.length} bytes, ${video.frames} frames`,
      );
      expect(kit.rawPayload.length).toBeLessThanOrEqual(CLIP_KIT_BUDGET_BYTES);
    },
    CLIP_TIMEOUT_MS,
  );
});
