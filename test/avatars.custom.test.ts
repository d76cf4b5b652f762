import fs from 'node:fs/promises';
import path from 'node:path';
import sharp from 'sharp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createCustomAvatar } from '../src/catalog/custom-avatar.ts';
import { closeFaceDetector } from '../actors/faces/detector.ts';
import { json, makeAvatarBundle, post, startTestApp, type TestApp } from './helpers/app.ts';
import { ReceivingPeer, lumaDiff } from './helpers/peer.ts';
import { SseClient } from './helpers/sse.ts';

import { PORTRAIT_FIXTURE as FIXTURE } from './helpers/fixtures.ts';
const EXPECTED_MOUTH = { x: 222, y: 145 };
const MOUTH_TOLERANCE_PX = 12;
const TEN_MB = 10 * 1024 * 1024;

interface Upload {
  name?: string;
  base_avatar_id?: string;
  image?: { bytes: Uint8Array; filename?: string; type?: string };
}

function upload(baseUrl: string, form: Upload): Promise<Response> {
  const body = new FormData();
  if (form.name !== undefined) body.append('name', form.name);
  if (form.base_avatar_id !== undefined) body.append('base_avatar_id', form.base_avatar_id);
  if (form.image)
    body.append(
      'image',
      new Blob([new Uint8Array(form.image.bytes)], { type: form.image.type ?? 'application/octet-stream' }),
      form.image.filename ?? 'portrait',
    );
  return fetch(`${baseUrl}/avatars/custom`, { method: 'POST', body });
}

const distanceToExpected = (p: { x: number; y: number }) => Math.hypot(p.x - EXPECTED_MOUTH.x, p.y - EXPECTED_MOUTH.y);

/** A plain gradient with a few shapes: no face anywhere. */
async function noFacePng(): Promise<Buffer> {
  const svg = `<svg xmlns="http://www.w3.org/2000/svg" width="400" height="300"><defs><linearGradient id="g"><stop offset="0" stop-color="#3a6"/><stop offset="1" stop-color="#a63"/></linearGradient></defs><rect width="400" height="300" fill="url(#g)"/><rect x="50" y="60" width="90" height="40" fill="#224"/><circle cx="300" cy="200" r="50" fill="#eee"/></svg>`;
  return sharp(Buffer.from(svg)).png().toBuffer();
}

/**
 * One app (and its face detector, loaded once) for the whole file: each test makes its own avatars in it, and the
 * restart test hands on the restarted app.
 */
let t: TestApp;
let fixture: Buffer;

beforeAll(async () => {
  t = await startTestApp();
  fixture = await fs.readFile(FIXTURE);
});

afterAll(async () => {
  await t?.close();
  await closeFaceDetector();
});

describe('POST /avatars/custom (real app, real detector)', () => {
  async function avatarIds(): Promise<string[]> {
    return (await json(await fetch(`${t.baseUrl}/avatars`))).map((a: { id: string }) => a.id);
  }

  it('creates an animated avatar from the astronaut PNG; GET shows the detected mouth', async () => {
    const res = await upload(t.baseUrl, {
      name: 'My Astronaut!',
      base_avatar_id: 'astronaut',
      image: { bytes: fixture, type: 'image/png' },
    });
    expect(res.status).toBe(200);
    const summary = await json(res);
    expect(summary).toEqual({
      id: expect.stringMatching(/^custom-my-astronaut-\d{13}$/),
      name: 'My Astronaut!',
      model_type: 'lipsync',
      width: 512,
      height: 512,
      is_custom: true,
      animated: true,
    });
    expect(await avatarIds()).toContain(summary.id);

    const manifest = await json(await fetch(`${t.baseUrl}/avatars/${summary.id}`));
    expect(manifest.id).toBe(summary.id);
    expect(manifest.metadata.custom_avatar).toBe(true);
    expect(manifest.metadata.base_avatar_id).toBe('astronaut');
    expect(manifest.metadata.hidden).toBeUndefined();
    expect(manifest.metadata.animated).toBe(true);
    expect(distanceToExpected(manifest.metadata.animation.mouth_center)).toBeLessThan(MOUTH_TOLERANCE_PX);
    expect(manifest.metadata.animation.outer_lip).toHaveLength(12);
    expect(manifest.metadata.animation.inner_lip).toHaveLength(8);

    const frame = await sharp(path.join(t.avatarsDir, summary.id, 'frames', 'frame_00000.png')).metadata();
    expect({ width: frame.width, height: frame.height, channels: frame.channels, format: frame.format }).toEqual({
      width: 512,
      height: 512,
      channels: 3,
      format: 'png',
    });
    const preview = await fetch(`${t.baseUrl}/avatars/${summary.id}/preview`);
    expect(preview.status).toBe(200);
    expect(preview.headers.get('content-type')).toBe('image/png');
  });

  it('accepts WebP, and a JPEG stored sideways with EXIF orientation 6 comes out upright', async () => {
    const webp = await sharp(fixture).webp({ quality: 90 }).toBuffer();
    const webpRes = await upload(t.baseUrl, {
      name: 'webp',
      base_avatar_id: 'astronaut',
      image: { bytes: webp, type: 'image/webp' },
    });
    expect(webpRes.status).toBe(200);
    const webpManifest = await json(await fetch(`${t.baseUrl}/avatars/${(await json(webpRes)).id}`));
    expect(distanceToExpected(webpManifest.metadata.animation.mouth_center)).toBeLessThan(MOUTH_TOLERANCE_PX);

    // Orientation 6 = "rotate 90° clockwise to display": store the pixels turned 90° counter-clockwise.
    // Read without EXIF, the mouth would sit near (145, 289); upright it is back near (222, 145).
    const sideways = await sharp(await sharp(fixture).rotate(270).toBuffer())
      .jpeg({ quality: 92 })
      .withMetadata({ orientation: 6 })
      .toBuffer();
    expect((await sharp(sideways).metadata()).orientation).toBe(6);
    const jpegRes = await upload(t.baseUrl, {
      name: 'sideways jpeg',
      base_avatar_id: 'astronaut',
      image: { bytes: sideways, type: 'image/jpeg' },
    });
    expect(jpegRes.status).toBe(200);
    const jpegManifest = await json(await fetch(`${t.baseUrl}/avatars/${(await json(jpegRes)).id}`));
    expect(distanceToExpected(jpegManifest.metadata.animation.mouth_center)).toBeLessThan(MOUTH_TOLERANCE_PX);
    expect(jpegManifest.metadata.animation.left_eye.y).toBeLessThan(jpegManifest.metadata.animation.mouth_center.y);
  });

  it('crops a landscape photo to the base size centred on the face, with coordinates in the output frame', async () => {
    // Astronaut placed at the right edge of a wide canvas: a centre crop would cut the face off.
    const wide = await sharp({ create: { width: 1400, height: 512, channels: 3, background: '#406080' } })
      .composite([{ input: fixture, left: 888, top: 0 }])
      .jpeg()
      .toBuffer();
    const res = await upload(t.baseUrl, { name: 'wide', base_avatar_id: 'astronaut', image: { bytes: wide } });
    expect(res.status).toBe(200);
    const manifest = await json(await fetch(`${t.baseUrl}/avatars/${(await json(res)).id}`));
    const mouth = manifest.metadata.animation.mouth_center;
    // Face centre ≈ 888 + 223 = 1111 → window [855, 1367) → mouth ≈ 888 + 222 - 855 = 255 in the output.
    expect(Math.hypot(mouth.x - 255, mouth.y - EXPECTED_MOUTH.y)).toBeLessThan(MOUTH_TOLERANCE_PX);
  });

  it('an image without a face still makes an avatar, without animation', async () => {
    const res = await upload(t.baseUrl, {
      name: 'landscape',
      base_avatar_id: 'astronaut',
      image: { bytes: await noFacePng() },
    });
    expect(res.status).toBe(200);
    const summary = await json(res);
    // The answer itself says the mouth will not move, and why, in words for the uploader.
    expect(summary.animated).toBe(false);
    expect(summary.reason).toBe(
      'No face was found in the picture: use a photo of one person facing the camera, face clearly visible.',
    );
    const manifest = await json(await fetch(`${t.baseUrl}/avatars/${summary.id}`));
    expect(manifest.metadata.animation).toBeUndefined();
    expect(manifest.metadata.animated).toBe(false);
    expect(manifest.metadata.custom_avatar).toBe(true);
  });

  it('rejects bad uploads with 400/404/413 and leaves nothing behind', async () => {
    const before = await avatarIds();
    await makeAvatarBundle(t.avatarsDir, 'drawn-base', { model_type: 'rt' });
    t.services.catalog.invalidate();
    const cases: Array<[Upload, number, RegExp]> = [
      [
        {
          name: 'x',
          base_avatar_id: 'astronaut',
          image: { bytes: Buffer.from('definitely not an image, just some text') },
        },
        400,
        /JPEG, PNG or WebP/,
      ],
      [{ name: 'x', base_avatar_id: 'astronaut', image: { bytes: new Uint8Array(0) } }, 400, /empty/],
      // Right magic number, garbage after it.
      [
        {
          name: 'x',
          base_avatar_id: 'astronaut',
          image: { bytes: Buffer.concat([fixture.subarray(0, 64), Buffer.alloc(2000, 7)]) },
        },
        400,
        /decoded/,
      ],
      [{ name: 'x', base_avatar_id: 'no-such-avatar', image: { bytes: fixture } }, 404, /base avatar/],
      [{ name: 'x', base_avatar_id: 'drawn-base', image: { bytes: fixture } }, 400, /lipsync/],
      [{ base_avatar_id: 'astronaut', image: { bytes: fixture } }, 400, /name/],
      [{ name: 'x', image: { bytes: fixture } }, 400, /base_avatar_id/],
      [{ name: 'x', base_avatar_id: 'astronaut' }, 400, /image/],
    ];
    for (const [form, status, detail] of cases) {
      const res = await upload(t.baseUrl, form);
      expect({ form: Object.keys(form), status: res.status }).toEqual({ form: Object.keys(form), status });
      expect((await json(res)).detail).toMatch(detail);
    }
    const entries = await fs.readdir(t.avatarsDir);
    expect(entries.filter((e) => e.startsWith('.tmp-'))).toEqual([]);
    expect((await avatarIds()).sort()).toEqual([...before, 'drawn-base'].sort());
  });

  it('refuses 10 MB + 1 byte with 413 while streaming; exactly 10 MB (a PNG with trailing padding) is accepted', async () => {
    const over = Buffer.alloc(TEN_MB + 1, 0);
    fixture.copy(over);
    const res = await upload(t.baseUrl, { name: 'big', base_avatar_id: 'astronaut', image: { bytes: over } });
    expect(res.status).toBe(413);
    expect((await json(res)).detail).toMatch(/10 MB/);
    const atLimit = await upload(t.baseUrl, {
      name: 'big',
      base_avatar_id: 'astronaut',
      image: { bytes: over.subarray(0, TEN_MB) },
    });
    expect(atLimit.status).toBe(200);
    expect((await fs.readdir(t.avatarsDir)).filter((e) => e.startsWith('.tmp-'))).toEqual([]);
  });

  it('a decompression bomb (huge declared size, tiny file) is a 400', async () => {
    const bomb = await sharp({ create: { width: 10_000, height: 10_000, channels: 3, background: '#fff' } })
      .png({ compressionLevel: 9 })
      .toBuffer();
    expect(bomb.length).toBeLessThan(TEN_MB);
    const res = await upload(t.baseUrl, { name: 'bomb', base_avatar_id: 'astronaut', image: { bytes: bomb } });
    expect(res.status).toBe(400);
    expect((await json(res)).detail).toMatch(/megapixels/);
  });

  it('a creation that fails or is aborted half-way leaves no directory and no new avatar', async () => {
    const before = await avatarIds();
    const catalog = t.services.catalog;
    await expect(
      createCustomAvatar({
        catalog,
        name: 'doomed',
        baseAvatarId: 'astronaut',
        image: fixture,
        detect: async () => {
          throw new Error('detector crashed');
        },
      }),
    ).rejects.toThrow('detector crashed');
    const controller = new AbortController();
    await expect(
      createCustomAvatar({
        catalog,
        name: 'aborted',
        baseAvatarId: 'astronaut',
        image: fixture,
        signal: controller.signal,
        detect: async (_image, { signal }) => {
          controller.abort(new Error('client went away'));
          signal?.throwIfAborted();
          return { ok: false, reason: 'no_face' };
        },
      }),
    ).rejects.toThrow('client went away');
    const entries = await fs.readdir(t.avatarsDir);
    expect(entries.filter((e) => e.startsWith('.') || e.includes('doomed') || e.includes('aborted'))).toEqual([]);
    expect(await avatarIds()).toEqual(before);
  });

  it('DELETE removes the custom avatar and its files', async () => {
    const { id } = await json(
      await upload(t.baseUrl, { name: 'short lived', base_avatar_id: 'astronaut', image: { bytes: fixture } }),
    );
    const res = await fetch(`${t.baseUrl}/avatars/${id}`, { method: 'DELETE' });
    expect(await json(res)).toEqual({ deleted: true });
    await expect(fs.access(path.join(t.avatarsDir, id))).rejects.toThrow();
    expect((await fetch(`${t.baseUrl}/avatars/${id}`)).status).toBe(404);
    expect(await avatarIds()).not.toContain(id);
    expect((await fetch(`${t.baseUrl}/avatars/astronaut`, { method: 'DELETE' })).status).toBe(403);
  });

  it('survives an app restart', async () => {
    const { id } = await json(
      await upload(t.baseUrl, { name: 'persistent', base_avatar_id: 'astronaut', image: { bytes: fixture } }),
    );
    const { dataDir, avatarsDir } = t;
    await t.close();
    t = await startTestApp({ dataDir, avatarsDir });
    const manifest = await json(await fetch(`${t.baseUrl}/avatars/${id}`));
    expect(manifest.metadata.custom_avatar).toBe(true);
    expect(distanceToExpected(manifest.metadata.animation.mouth_center)).toBeLessThan(MOUTH_TOLERANCE_PX);
  });
});

describe('a lipsync session on a custom avatar', () => {
  let peer: ReceivingPeer | undefined;
  let sse: SseClient | undefined;

  afterAll(() => {
    peer?.close();
    sse?.close();
  });

  it('speaks, and the mouth region around the detected mouth moves at a WebRTC receiver', async () => {
    const created = await upload(t.baseUrl, { name: 'talker', base_avatar_id: 'astronaut', image: { bytes: fixture } });
    expect(created.status).toBe(200);
    const { id } = await json(created);
    const { metadata } = await json(await fetch(`${t.baseUrl}/avatars/${id}`));
    const mouth = metadata.animation.mouth_center;

    const session = await post(t.baseUrl, '/sessions', { avatar_id: id, model: 'lipsync' });
    expect(session.status).toBe(200);
    const sessionId = (await json(session)).session_id;
    sse = await SseClient.open(`${t.baseUrl}/sessions/${sessionId}/events`);
    peer = await ReceivingPeer.connect(t.baseUrl, sessionId);
    expect((await post(t.baseUrl, `/sessions/${sessionId}/start`)).status).toBe(200);
    await peer.until(() => peer!.frames.length >= 10, 15_000, 'idle video');
    const idle = peer.frames.at(-1)!;
    expect([idle.width, idle.height]).toEqual([512, 512]);

    const before = peer.frames.length;
    const from = sse.events.length;
    expect(
      (
        await post(t.baseUrl, `/sessions/${sessionId}/speak`, {
          text: 'Hello, I am an astronaut. Watch my mouth move while I talk.',
        })
      ).status,
    ).toBe(200);
    await sse.waitFor((e) => e.type === 'status' && e.data.stage === 'idle', 30_000, 'status idle', from);

    const speaking = peer.frames.slice(before);
    expect(speaking.length).toBeGreaterThan(20);
    const mouthBox = { x: Math.round(mouth.x - 25), y: Math.round(mouth.y - 8), w: 50, h: 36 };
    // Background at the top-left corner: only codec noise changes there.
    const controlBox = { x: 10, y: 300, w: 50, h: 36 };
    let mouthDiff = 0;
    let controlDiff = 0;
    for (const frame of speaking) {
      mouthDiff = Math.max(mouthDiff, lumaDiff(idle, frame, mouthBox));
      controlDiff = Math.max(controlDiff, lumaDiff(idle, frame, controlBox));
    }
    expect(mouthDiff).toBeGreaterThan(8);
    expect(mouthDiff).toBeGreaterThan(controlDiff * 3);

    // Deleting the avatar does not break the session that uses it (single render thread in tests).
    expect(await json(await fetch(`${t.baseUrl}/avatars/${id}`, { method: 'DELETE' }))).toEqual({ deleted: true });
    const afterDelete = peer.frames.length;
    const again = sse.events.length;
    expect(
      (await post(t.baseUrl, `/sessions/${sessionId}/speak`, { text: 'Still talking after my avatar was deleted.' }))
        .status,
    ).toBe(200);
    await sse.waitFor((e) => e.type === 'status' && e.data.stage === 'idle', 30_000, 'status idle after delete', again);
    expect(sse.events.slice(again).some((e) => e.type === 'error')).toBe(false);
    const later = peer.frames.slice(afterDelete);
    expect(later.length).toBeGreaterThan(20);
    expect(Math.max(...later.map((f) => lumaDiff(idle, f, mouthBox)))).toBeGreaterThan(8);
  });
});
