import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { deflateSync } from 'node:zlib';
import fc from 'fast-check';
import sharp from 'sharp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { closeFaceDetector, detectMouth } from '../actors/faces/detector.ts';
import type { AvatarManifest, MouthAnimation } from '../actors/render/types.ts';
import {
  InvalidImageError,
  buildCustomAvatar,
  customAvatarId,
  removeCustomAvatarDir,
  type BuildCustomAvatarInput,
} from '../src/catalog/custom-avatar.ts';
import { isValidAvatarId } from '../src/catalog/slug.ts';

import { PORTRAIT_FIXTURE as FIXTURE } from './helpers/fixtures.ts';
/** Where a person marks the astronaut's mouth in the 512×512 fixture. */
const EXPECTED_MOUTH = { x: 222, y: 145 };
const MOUTH_TOLERANCE_PX = 12;
const NOW = new Date('2026-01-02T03:04:05.678Z');

const baseManifest: AvatarManifest = {
  id: 'astronaut',
  name: 'Astronaut',
  model_type: 'lipsync',
  fps: 25,
  sample_rate: 16000,
  width: 512,
  height: 512,
  version: '1.0.0',
  metadata: {
    hidden: true,
    source: 'kept',
    animation: { detector: 'inherited, must not survive' } as unknown as MouthAnimation,
  },
};

const distance = (p: { x: number; y: number }, q: { x: number; y: number }) => Math.hypot(p.x - q.x, p.y - q.y);

/** A PNG whose header declares `size × size` pixels but whose data is a few bytes: a decompression bomb. */
function bombPng(size: number): Buffer {
  const chunk = (type: string, data: Buffer) => {
    const body = Buffer.concat([Buffer.from(type, 'ascii'), data]);
    const out = Buffer.alloc(12 + data.length);
    out.writeUInt32BE(data.length, 0);
    body.copy(out, 4);
    out.writeUInt32BE(crc32(body), 8 + data.length);
    return out;
  };
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(size, 0);
  ihdr.writeUInt32BE(size, 4);
  ihdr[8] = 8; // bit depth
  ihdr[9] = 2; // RGB
  const firstRows = deflateSync(Buffer.alloc((size * 3 + 1) * 4));
  return Buffer.concat([
    Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
    chunk('IHDR', ihdr),
    chunk('IDAT', firstRows),
    chunk('IEND', Buffer.alloc(0)),
  ]);
}

function crc32(bytes: Buffer): number {
  let crc = 0xffffffff;
  for (const byte of bytes) {
    crc ^= byte;
    for (let k = 0; k < 8; k++) crc = crc & 1 ? (crc >>> 1) ^ 0xedb88320 : crc >>> 1;
  }
  return (crc ^ 0xffffffff) >>> 0;
}

describe('buildCustomAvatar (real sharp, real detector, real files)', () => {
  let avatarsDir: string;
  let fixture: Buffer;
  const baseInput = (): Omit<BuildCustomAvatarInput, 'name' | 'image'> => ({
    avatarsDir,
    base: { dir: path.join(avatarsDir, 'astronaut'), manifest: baseManifest },
    now: NOW,
  });

  beforeAll(async () => {
    avatarsDir = await fs.mkdtemp(path.join(os.tmpdir(), 'custom-builder-'));
    fixture = await fs.readFile(FIXTURE);
  });

  afterAll(async () => {
    await closeFaceDetector();
    await fs.rm(avatarsDir, { recursive: true, force: true });
  });

  async function leftovers(): Promise<string[]> {
    return (await fs.readdir(avatarsDir)).filter((name) => name.startsWith('.'));
  }

  it('builds a bundle from the PNG fixture: manifest rules, RGB frame at the base size, mouth where it is', async () => {
    const built = await buildCustomAvatar({ ...baseInput(), name: 'My Astronaut!', image: fixture });
    expect(built.id).toBe(`custom-my-astronaut-${NOW.getTime()}`);
    expect(built.dir).toBe(path.join(avatarsDir, built.id));
    expect(built.detection).toEqual({ ok: true });

    const onDisk = JSON.parse(await fs.readFile(path.join(built.dir, 'manifest.json'), 'utf8')) as AvatarManifest;
    expect(onDisk).toEqual(built.manifest);
    const { animation, ...metadata } = onDisk.metadata;
    expect(metadata).toEqual({ source: 'kept', custom_avatar: true, base_avatar_id: 'astronaut' });
    expect({ ...onDisk, metadata: undefined }).toEqual({
      ...baseManifest,
      id: built.id,
      name: 'My Astronaut!',
      metadata: undefined,
    });
    expect(animation?.detector).toBe('face-api/ssd_mobilenetv1+landmark68');
    expect(distance(animation!.mouth_center, EXPECTED_MOUTH)).toBeLessThan(MOUTH_TOLERANCE_PX);

    for (const file of ['frames/frame_00000.png', 'preview.png']) {
      const meta = await sharp(path.join(built.dir, file)).metadata();
      expect({ format: meta.format, width: meta.width, height: meta.height, channels: meta.channels }).toEqual({
        format: 'png',
        width: 512,
        height: 512,
        channels: 3,
      });
    }
    expect(await leftovers()).toEqual([]);
  });

  it('a WebP input is recognised and gives the same mouth', async () => {
    const webp = await sharp(fixture).webp({ quality: 90 }).toBuffer();
    const built = await buildCustomAvatar({ ...baseInput(), name: 'webp', image: webp });
    expect(built.detection).toEqual({ ok: true });
    expect(distance(built.manifest.metadata.animation!.mouth_center, EXPECTED_MOUTH)).toBeLessThan(MOUTH_TOLERANCE_PX);
  });

  it('a JPEG stored sideways with EXIF orientation 6 comes out upright, face centred, mouth found', async () => {
    // Orientation 6 means "rotate 90° clockwise to display": store the pixels turned 90° counter-clockwise.
    // A wider canvas checks the face-centred crop too: padded on the left, the face sits right of the image centre
    // (x ≈ 479 of 768); a centre crop would put it at ≈ 351, a face-centred one at 256.
    const wide = await sharp(fixture).extend({ left: 256, background: '#808080' }).toBuffer();
    const sideways = await sharp(wide).rotate(-90).jpeg({ quality: 92 }).withMetadata({ orientation: 6 }).toBuffer();
    expect((await sharp(sideways).metadata()).orientation).toBe(6);
    const built = await buildCustomAvatar({ ...baseInput(), name: 'exif', image: sideways });
    expect(built.detection).toEqual({ ok: true });
    const a = built.manifest.metadata.animation!;
    // Upright: eyes above the mouth, side by side.
    expect(a.left_eye.y).toBeLessThan(a.mouth_center.y - 15);
    expect(Math.abs(a.left_eye.y - a.right_eye.y)).toBeLessThan(10);
    // The 768×512 photo is cropped to 512×512 around the face (not the image centre): the face box centre
    // lands in the middle of the frame.
    const faceCentreX = a.face_box.x + a.face_box.width / 2;
    expect(Math.abs(faceCentreX - 256)).toBeLessThan(MOUTH_TOLERANCE_PX);
    expect(Math.abs(a.mouth_center.y - EXPECTED_MOUTH.y)).toBeLessThan(MOUTH_TOLERANCE_PX);
    // The written frame has the face's pixels where the animation says: compare the mouth region to the original.
    const frame = await sharp(path.join(built.dir, 'frames/frame_00000.png')).raw().toBuffer();
    const original = await sharp(fixture).raw().toBuffer();
    const faceCentreInFixture = 223;
    const offsetX = Math.round(faceCentreX - faceCentreInFixture);
    expect(distance(a.mouth_center, { x: EXPECTED_MOUTH.x + offsetX, y: EXPECTED_MOUTH.y })).toBeLessThan(
      MOUTH_TOLERANCE_PX,
    );
    let diff = 0;
    for (let y = 130; y < 160; y++) {
      for (let x = 200; x < 245; x++)
        diff += Math.abs(frame[(y * 512 + x + offsetX) * 3] - original[(y * 512 + x) * 3]);
    }
    expect(diff / (30 * 45)).toBeLessThan(12);
  });

  it('an image without a face still gives an avatar, cover-cropped, without animation', async () => {
    const gradient = await sharp({ create: { width: 900, height: 300, channels: 3, background: '#3366aa' } })
      .composite([
        {
          input: Buffer.from(
            '<svg width="900" height="300"><rect x="300" width="300" height="300" fill="#ddaa33"/></svg>',
          ),
          left: 0,
          top: 0,
        },
      ])
      .png()
      .toBuffer();
    const built = await buildCustomAvatar({ ...baseInput(), name: 'no face', image: gradient });
    expect(built.detection).toEqual({ ok: false, reason: 'no_face' });
    expect(built.manifest.metadata.animation).toBeUndefined();
    expect('animation' in built.manifest.metadata).toBe(false);
    // Centre crop of 900×300 → the middle 300×300, the yellow square, scaled to 512×512.
    const { data } = await sharp(path.join(built.dir, 'frames/frame_00000.png'))
      .raw()
      .toBuffer({ resolveWithObject: true });
    expect([data[0], data[1], data[2]]).toEqual([0xdd, 0xaa, 0x33]);
  });

  it.each([
    ['not an image', Buffer.from('GIF89a definitely not a portrait')],
    ['empty', Buffer.alloc(0)],
    ['truncated PNG', Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 13])],
  ])('%s → InvalidImageError, nothing left behind', async (_label, bytes) => {
    await expect(buildCustomAvatar({ ...baseInput(), name: 'bad', image: bytes })).rejects.toBeInstanceOf(
      InvalidImageError,
    );
    expect(await leftovers()).toEqual([]);
  });

  it('a decompression bomb (tiny PNG declaring 20000×20000) is refused before decoding', async () => {
    const bomb = bombPng(20_000);
    expect(bomb.length).toBeLessThan(1024);
    const started = performance.now();
    const error = await buildCustomAvatar({ ...baseInput(), name: 'bomb', image: bomb }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InvalidImageError);
    expect((error as Error).message).toMatch(/megapixels/);
    expect(performance.now() - started).toBeLessThan(2_000);
    expect(await leftovers()).toEqual([]);
  });

  it('a detector that throws half-way leaves no directory behind (the temp dir existed meanwhile)', async () => {
    const before = await fs.readdir(avatarsDir);
    let seenWhileDetecting: string[] = [];
    const result = buildCustomAvatar({
      ...baseInput(),
      name: 'doomed',
      image: fixture,
      detect: async () => {
        seenWhileDetecting = await leftovers();
        throw new Error('detector crashed');
      },
    });
    await expect(result).rejects.toThrow('detector crashed');
    expect(seenWhileDetecting).toHaveLength(1);
    expect(seenWhileDetecting[0]).toMatch(/^\.tmp-/);
    expect(await fs.readdir(avatarsDir)).toEqual(before);
  });

  it('an abort during detection rejects with the reason and leaves no directory behind', async () => {
    const before = await fs.readdir(avatarsDir);
    const controller = new AbortController();
    const result = buildCustomAvatar({
      ...baseInput(),
      name: 'aborted',
      image: fixture,
      signal: controller.signal,
      detect: async (image, opts) => {
        const pending = detectMouth(image, opts);
        controller.abort(new Error('client went away'));
        return pending;
      },
    });
    await expect(result).rejects.toThrow('client went away');
    expect(await fs.readdir(avatarsDir)).toEqual(before);
  });

  it('two builds of the same name in the same millisecond get distinct ids', async () => {
    const noFace = async () => ({ ok: false as const, reason: 'no_face' as const });
    const [a, b] = await Promise.all([
      buildCustomAvatar({ ...baseInput(), name: 'twin', image: fixture, detect: noFace }),
      buildCustomAvatar({ ...baseInput(), name: 'twin', image: fixture, detect: noFace }),
    ]);
    expect(new Set([a.id, b.id]).size).toBe(2);
    for (const built of [a, b]) {
      expect(JSON.parse(await fs.readFile(path.join(built.dir, 'manifest.json'), 'utf8')).id).toBe(built.id);
    }
    expect(await leftovers()).toEqual([]);
  });

  it('removeCustomAvatarDir deletes a custom bundle and refuses anything else', async () => {
    const built = await buildCustomAvatar({
      ...baseInput(),
      name: 'short lived',
      image: fixture,
      detect: async () => ({ ok: false, reason: 'no_face' }),
    });
    await removeCustomAvatarDir(avatarsDir, built.id);
    await expect(fs.access(built.dir)).rejects.toThrow();
    expect(await leftovers()).toEqual([]);
    await expect(removeCustomAvatarDir(avatarsDir, 'astronaut')).rejects.toThrow(/custom/);
    await expect(removeCustomAvatarDir(avatarsDir, 'custom-../../etc')).rejects.toThrow(/custom/);
  });
});

describe('customAvatarId', () => {
  it('slugs names: lower-case, CJK and _ kept, other runs → -, trimmed, ≤ 40, fallback avatar', () => {
    expect(customAvatarId('My Astronaut!', 1)).toBe('custom-my-astronaut-1');
    expect(customAvatarId('  Ｆｕｌｌ＿ｗｉｄｔｈ  ', 2)).toBe('custom-full_width-2');
    expect(customAvatarId('宇航员 Alice_2', 3)).toBe('custom-宇航员-alice_2-3');
    expect(customAvatarId('!!!', 4)).toBe('custom-avatar-4');
    expect(customAvatarId('---a---b---', 5)).toBe('custom-a-b-5');
    expect(customAvatarId('x'.repeat(100), 6)).toBe(`custom-${'x'.repeat(40)}-6`);
  });

  it('always yields an id matching the avatar slug rule, for any name', () => {
    fc.assert(
      fc.property(fc.string({ unit: 'grapheme', maxLength: 120 }), fc.integer({ min: 0, max: 2 ** 45 }), (name, ts) => {
        const id = customAvatarId(name, ts);
        expect(id).toMatch(/^custom-[\p{L}\p{N}_-]+-\d+$/u);
        expect(isValidAvatarId(id)).toBe(true);
        const slug = id.slice('custom-'.length, id.length - String(ts).length - 1);
        expect(Array.from(slug).length).toBeLessThanOrEqual(40);
        expect(slug).not.toMatch(/^[-_]|[-_]$/);
      }),
    );
  });
});
