import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import type { AvatarManifest, AvatarMetadata } from '../../actors/render/types.ts';
import { detectMouth } from '../../actors/faces/detector.ts';
import { PortraitError, preparePortrait, type Detector } from '../../actors/faces/portrait.ts';
import { HttpError, badRequest, notFound } from '../errors.ts';
import type { AvatarCatalog, AvatarSummary } from './catalog.ts';
import { isValidAvatarId } from './slug.ts';

export { MAX_PORTRAIT_BYTES } from '../../actors/faces/portrait.ts';

/** Display names longer than this are not names; they would also make unwieldy ids. */
export const MAX_AVATAR_NAME_LENGTH = 100;
/** The slug part of `custom-<slug>-<timestamp>`; the name keeps its full text. */
const MAX_SLUG_LENGTH = 40;

interface LogLike {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
}

export interface CreateCustomAvatarInput {
  catalog: AvatarCatalog;
  name: string;
  baseAvatarId: string;
  image: Buffer;
  signal?: AbortSignal;
  logger?: LogLike;
  /** Face detector; the real worker-thread detector unless a test injects another. */
  detect?: Detector;
  /** Clock for the id timestamp. */
  now?: () => number;
}

/**
 * Spec 4.2 `POST /avatars/custom`: loads the base (must be `lipsync`), turns the portrait into an RGB bundle
 * frame at the base's size, detects the mouth, and writes a new bundle `custom-<slug>-<timestamp>` whose
 * manifest is the base's with `id`, `name`, `metadata.custom_avatar`, `metadata.base_avatar_id` and (only on
 * detection success) `metadata.animation`. The bundle is built in a hidden `.tmp-*` directory and renamed
 * into place, so it appears whole or not at all; any failure or abort removes the temporary directory.
 */
export async function createCustomAvatar(input: CreateCustomAvatarInput): Promise<AvatarSummary> {
  const { catalog, signal } = input;
  const name = input.name.trim();
  if (name.length === 0) throw badRequest('name is required');
  if (name.length > MAX_AVATAR_NAME_LENGTH) throw badRequest(`name must be at most ${MAX_AVATAR_NAME_LENGTH} characters`);
  if (input.baseAvatarId.length === 0) throw badRequest('base_avatar_id is required');
  const base = await catalog.get(input.baseAvatarId);
  if (!base) throw notFound('base avatar not found');
  if (base.manifest.model_type !== 'lipsync') throw badRequest('base avatar must have model_type lipsync');
  signal?.throwIfAborted();

  const tmpDir = path.join(catalog.dir, `.tmp-${randomBytes(6).toString('hex')}`);
  let moved = false;
  try {
    await fs.mkdir(path.join(tmpDir, 'frames'), { recursive: true });
    let portrait;
    try {
      portrait = await preparePortrait(input.image, base.manifest, { detect: input.detect ?? detectMouth, signal });
    } catch (error) {
      if (error instanceof PortraitError) throw badRequest(error.message);
      throw error;
    }
    if (!portrait.detection.ok) {
      input.logger?.info({ reason: portrait.detection.reason, baseAvatarId: base.id }, 'custom avatar created without mouth animation');
    }
    signal?.throwIfAborted();

    const id = await freeId(catalog.dir, name, (input.now ?? Date.now)());
    const manifest = customManifest(base.manifest, { id, name, animation: portrait.animation });
    await writeDurably(path.join(tmpDir, 'frames', 'frame_00000.png'), portrait.png);
    await writeDurably(path.join(tmpDir, 'preview.png'), portrait.png);
    await writeDurably(path.join(tmpDir, 'manifest.json'), Buffer.from(JSON.stringify(manifest, null, 2)));
    await fsyncDir(path.join(tmpDir, 'frames'));
    await fsyncDir(tmpDir);
    signal?.throwIfAborted();
    await fs.rename(tmpDir, path.join(catalog.dir, id));
    moved = true;
    await fsyncDir(catalog.dir);
    catalog.invalidate();
    input.logger?.info({ avatarId: id, animated: portrait.animation !== undefined }, 'custom avatar created');
    return { id, name, model_type: manifest.model_type, width: manifest.width, height: manifest.height, is_custom: true };
  } finally {
    if (!moved) await fs.rm(tmpDir, { recursive: true, force: true });
  }
}

/** The base manifest with the new identity; inherited `animation` and `hidden` never carry over. */
export function customManifest(base: AvatarManifest, custom: { id: string; name: string; animation?: AvatarManifest['metadata']['animation'] }): AvatarManifest {
  const { animation: _inheritedAnimation, hidden: _hidden, animated: _served, ...inherited } = base.metadata as AvatarMetadata & { animated?: unknown };
  return {
    ...base,
    id: custom.id,
    name: custom.name,
    metadata: {
      ...inherited,
      custom_avatar: true,
      base_avatar_id: base.id,
      ...(custom.animation ? { animation: custom.animation } : {}),
    },
  };
}

/** `custom-<slug>-<timestamp>`; the slug keeps ASCII letters/digits and CJK, lower-cased, other runs become `-`. */
export function customAvatarId(name: string, timestampMs: number): string {
  const slug =
    name
      .normalize('NFKC')
      .toLowerCase()
      .replace(/[^a-z0-9\p{Script=Han}\p{Script=Hiragana}\p{Script=Katakana}\p{Script=Hangul}]+/gu, '-')
      .replace(/^-+|-+$/g, '')
      .slice(0, MAX_SLUG_LENGTH)
      .replace(/-+$/g, '') || 'avatar';
  const id = `custom-${slug}-${timestampMs}`;
  if (!isValidAvatarId(id)) throw new HttpError(500, 'could not derive an avatar id');
  return id;
}

/** Two uploads of the same name in the same millisecond get consecutive timestamps rather than colliding. */
async function freeId(dir: string, name: string, timestampMs: number): Promise<string> {
  for (let ts = timestampMs; ; ts++) {
    const id = customAvatarId(name, ts);
    try {
      await fs.access(path.join(dir, id));
    } catch {
      return id;
    }
  }
}

async function writeDurably(file: string, data: Buffer): Promise<void> {
  const handle = await fs.open(file, 'w');
  try {
    await handle.writeFile(data);
    await handle.sync();
  } finally {
    await handle.close();
  }
}

async function fsyncDir(dir: string): Promise<void> {
  const handle = await fs.open(dir, 'r');
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}
