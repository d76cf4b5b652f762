import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import type { AvatarManifest, AvatarMetadata, MouthAnimation } from '../../actors/render/types.ts';
import { closeFaceDetector, detectMouth } from '../../actors/faces/detector.ts';
import { InvalidImageError, preparePortrait, type Detector } from '../../actors/faces/portrait.ts';
import {
  IMAGE_JOBS_RETRY_AFTER_S,
  MAX_RUNNING_IMAGE_JOBS,
  MAX_WAITING_IMAGE_JOBS,
  ImageJobFailedError,
  admitImageJob,
  admittedImageJobs,
  closeImageJobs,
  withImageJobSlot,
} from '../../actors/faces/image-jobs.ts';
import {
  CLIP_FPS,
  InvalidClipError,
  MAX_CLIP_BYTES,
  prepareClip,
  sniffClipFormat,
} from '../../actors/faces/video-clip.ts';
import { CLIP_TRACK_FILE, MOUTHS_ATLAS_FILE, MOUTHS_INDEX_FILE, type ClipMetadata } from '../../actors/render/types.ts';
import { Overloaded, AvatarNotFound, InvalidInput, InvalidSelection, ServiceFault } from '../domain-errors.ts';
import { BUILDING_DIR_PREFIX, removeBundleDir } from './bundle-fs.ts';
import type { AvatarCatalog, AvatarSummary, CatalogEntry } from './catalog.ts';
import { isValidAvatarId } from './slug.ts';

export {
  MAX_PORTRAIT_BYTES,
  MAX_PORTRAIT_PIXELS,
  MAX_PORTRAIT_SIDE,
  InvalidImageError,
} from '../../actors/faces/portrait.ts';
export {
  IMAGE_STEP_DEADLINE_MS,
  MAX_RUNNING_IMAGE_JOBS,
  MAX_WAITING_IMAGE_JOBS,
} from '../../actors/faces/image-jobs.ts';
export {
  MAX_CLIP_BYTES,
  MAX_CLIP_FRAME_RATE,
  MAX_CLIP_SECONDS,
  MAX_CLIP_SIDE,
  MIN_CLIP_SECONDS,
  InvalidClipError,
} from '../../actors/faces/video-clip.ts';

/** Stops the image process and the face detector custom avatars are prepared with (the service closing). */
export async function closeImageWorkers(): Promise<void> {
  closeImageJobs();
  await closeFaceDetector();
}

/** Display names longer than this are not names; they would also make unwieldy ids. */
export const MAX_AVATAR_NAME_LENGTH = 100;
/** The slug part of `custom-<slug>-<timestamp>`; the name keeps its full text. */
const MAX_SLUG_LENGTH = 40;
/**
 * CJK characters a slug keeps: letters/digits of the Han, kana and Hangul scripts. The letter/digit condition
 * drops CJK symbols and radicals (e.g. U+2E80), which the id rule `^[\p{L}\p{N}_-]+$` would not accept.
 */
const CJK_LETTER_OR_DIGIT =
  /^(?=[\p{L}\p{N}])[\p{Script=Han}\p{Script=Hiragana}\p{Script=Katakana}\p{Script=Hangul}]$/u;
/** Same-name uploads racing for one millisecond's id; more than this many at once is not a real workload. */
const MAX_ID_ATTEMPTS = 100;

interface LogLike {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
  error?(obj: object, msg: string): void;
  debug?(obj: object, msg: string): void;
}

export interface BuildCustomAvatarInput {
  /** The avatars directory (`SERVICE_AVATARS_DIR`); the bundle is created directly inside it. */
  avatarsDir: string;
  /** The base avatar: its manifest (size, fps, sample rate, …) is copied. Must be `lipsync` (checked by callers). */
  base: { dir: string; manifest: AvatarManifest };
  name: string;
  /** The uploaded portrait: JPEG, PNG or WebP, recognised by magic number. Exactly one of `image` and `video`. */
  image?: Buffer;
  /** The uploaded clip: MP4, MOV or WebM, recognised by magic number (a video avatar). */
  video?: Buffer;
  /** Clock for the id timestamp. */
  now?: Date;
  /** Face detector (`detectMouth`'s signature, options always passed); the real worker-thread detector unless a test injects another. */
  detect?: Detector;
  signal?: AbortSignal;
  logger?: LogLike;
  /** Told when the content (decode, face) is done and the bundle is being written: the creation's progress for a polling client. */
  onSaving?: () => void;
  /** Cluster mode: names the temp directory after this node (its start-up sweep removes only its own). */
  tempTag?: string;
}

export interface BuiltCustomAvatar {
  id: string;
  manifest: AvatarManifest;
  /** The final bundle directory. */
  dir: string;
  detection: { ok: boolean; reason?: string };
}

/**
 * Spec 4.2 steps 2–5: turns a portrait into a new bundle `custom-<slug>-<timestamp>` next to the others.
 * The image is sniffed (JPEG/PNG/WebP), decoded under a pixel limit, turned upright by EXIF, converted to RGB,
 * searched for a face, and cover-cropped to the base's `width × height` centred on the face; the animation is
 * moved into frame coordinates. The manifest is the base's with the new `id`/`name`, `metadata.custom_avatar`,
 * `metadata.base_avatar_id` and — only when detection succeeded — `metadata.animation`.
 *
 * Atomic: everything is written and fsynced inside a `.tmp-*` directory, which is then renamed to the id; any
 * failure or abort removes it, and one a crash left behind is removed at start-up (`sweepBundleLeftovers`).
 * The pixels are decoded in an image process (`actors/faces/image-jobs.ts`), never on the service's threads.
 * Throws `InvalidImageError` for unusable images (→ 400); a detection failure is
 * not an error (the avatar is created without `animation`), but a detector that throws is.
 */
export async function buildCustomAvatar(input: BuildCustomAvatarInput): Promise<BuiltCustomAvatar> {
  const { avatarsDir, base, signal } = input;
  const name = input.name.trim();
  signal?.throwIfAborted();
  const tmpDir = path.join(
    avatarsDir,
    `${BUILDING_DIR_PREFIX}${input.tempTag ? `${input.tempTag}-` : ''}${randomBytes(6).toString('hex')}`,
  );
  let moved = false;
  try {
    await fs.mkdir(path.join(tmpDir, 'frames'), { recursive: true });
    const detect = input.detect ?? detectMouth;
    const content = input.video
      ? await writeClipContent(tmpDir, input.video, base.manifest, { detect, signal })
      : await writePortraitContent(tmpDir, input.image ?? Buffer.alloc(0), base.manifest, { detect, signal });
    input.onSaving?.();
    if (!content.detection.ok) {
      input.logger?.info(
        { reason: content.detection.reason, baseAvatarId: base.manifest.id },
        'custom avatar created without mouth animation',
      );
    }
    signal?.throwIfAborted();
    const requestedMs = (input.now ?? new Date()).getTime();
    let id = '';
    let manifest: AvatarManifest | undefined;
    // Another upload of the same name in the same millisecond may claim the id between our check and our
    // rename; renaming onto its (non-empty) bundle then fails, and we take the next timestamp.
    for (let attempt = 0; manifest === undefined; attempt++) {
      id = await freeId(avatarsDir, name, requestedMs + attempt);
      const candidate = customManifest(base.manifest, { id, name, animation: content.animation, clip: content.clip });
      await writeDurably(path.join(tmpDir, 'manifest.json'), Buffer.from(JSON.stringify(candidate, null, 2) + '\n'));
      await fsyncDir(tmpDir);
      signal?.throwIfAborted();
      try {
        await fs.rename(tmpDir, path.join(avatarsDir, id));
        manifest = candidate;
      } catch (error) {
        const code = (error as NodeJS.ErrnoException).code;
        if ((code !== 'ENOTEMPTY' && code !== 'EEXIST') || attempt + 1 >= MAX_ID_ATTEMPTS) throw error;
      }
    }
    moved = true;
    const dir = path.join(avatarsDir, id);
    await fsyncDir(avatarsDir);
    const detection = content.detection.ok ? { ok: true } : { ok: false, reason: content.detection.reason };
    return { id, manifest: manifest!, dir, detection };
  } finally {
    if (!moved) await fs.rm(tmpDir, { recursive: true, force: true });
  }
}

/** What a bundle's content step wrote into the temporary directory, for the manifest. */
interface BundleContent {
  detection: { ok: true } | { ok: false; reason: string };
  animation?: MouthAnimation;
  clip?: ClipMetadata;
}

/** A portrait: one frame (also the preview), `animation` when a face was found. */
async function writePortraitContent(
  tmpDir: string,
  image: Buffer,
  target: { width: number; height: number },
  opts: { detect: Detector; signal?: AbortSignal },
): Promise<BundleContent> {
  const portrait = await preparePortrait(image, target, opts);
  opts.signal?.throwIfAborted();
  await writeDurably(path.join(tmpDir, 'frames', 'frame_00000.png'), portrait.png);
  await writeDurably(path.join(tmpDir, 'preview.png'), portrait.png);
  await fsyncDir(path.join(tmpDir, 'frames'));
  if (!portrait.detection.ok) return { detection: { ok: false, reason: portrait.detection.reason } };
  return { detection: { ok: true }, animation: portrait.animation };
}

/**
 * A clip: the loop frames, the per-frame face track (`face_track.json`), the first frame as preview and its
 * face as `animation`. The upload is written into the temporary directory for ffmpeg (so a crash leaves it only
 * where the start-up sweep removes it) and deleted before the bundle is committed. Runs in an image-job slot, so
 * clips and portraits share one bound. A clip without a usable face throws `InvalidClipError` (unlike a photo).
 */
async function writeClipContent(
  tmpDir: string,
  video: Buffer,
  target: { width: number; height: number },
  opts: { detect: Detector; signal?: AbortSignal },
): Promise<BundleContent> {
  if (video.length === 0) throw new InvalidClipError('video is empty');
  if (!sniffClipFormat(video)) throw new InvalidClipError('video must be MP4, MOV or WebM');
  return withImageJobSlot(
    async (signal) => {
      const upload = path.join(tmpDir, 'upload.video');
      const framesDir = path.join(tmpDir, 'frames');
      await fs.writeFile(upload, video, { signal });
      let clip;
      try {
        clip = await prepareClip(upload, target, framesDir, { detect: opts.detect, signal });
      } finally {
        await fs.rm(upload, { force: true });
      }
      for (let i = 0; i < clip.frameCount; i++) await fsyncFile(path.join(framesDir, clipFrameName(i)));
      await fs.copyFile(path.join(framesDir, clipFrameName(0)), path.join(tmpDir, 'preview.png'));
      await fsyncFile(path.join(tmpDir, 'preview.png'));
      await writeDurably(path.join(tmpDir, CLIP_TRACK_FILE), Buffer.from(JSON.stringify(clip.track)));
      await fsyncDir(framesDir);
      if (clip.mouths) {
        await fs.mkdir(path.join(tmpDir, path.dirname(MOUTHS_INDEX_FILE)));
        await writeDurably(path.join(tmpDir, MOUTHS_ATLAS_FILE), clip.mouths.atlasPng);
        await writeDurably(path.join(tmpDir, MOUTHS_INDEX_FILE), Buffer.from(JSON.stringify(clip.mouths.index)));
        await fsyncDir(path.join(tmpDir, path.dirname(MOUTHS_INDEX_FILE)));
      }
      const metadata: ClipMetadata = {
        frame_count: clip.frameCount,
        fps: CLIP_FPS,
        loop: 'ping-pong',
        track_file: CLIP_TRACK_FILE,
        face_found_fraction: Math.round((clip.detected / Math.max(1, clip.sampled)) * 1000) / 1000,
        source: {
          duration_s: clip.info.durationS,
          width: clip.info.width,
          height: clip.info.height,
          rotation: clip.info.rotation,
          codec: clip.info.codec,
          has_audio: clip.info.hasAudio,
        },
        ...(clip.mouths
          ? {
              mouths: {
                count: clip.mouths.index.samples.length,
                index_file: MOUTHS_INDEX_FILE,
                atlas_file: MOUTHS_ATLAS_FILE,
              },
            }
          : {}),
      };
      return { detection: { ok: true }, animation: clip.track[0], clip: metadata };
    },
    { signal: opts.signal },
  );
}

/** `frames/frame_00000.png` … */
function clipFrameName(index: number): string {
  return `frame_${String(index).padStart(5, '0')}.png`;
}

/**
 * Deletes a custom bundle so it never appears half-deleted: renamed to a hidden `.trash-*` directory in one
 * step, then removed. Only `custom-*` ids are accepted, so a built-in can never be removed through here.
 */
export async function removeCustomAvatarDir(avatarsDir: string, id: string): Promise<void> {
  if (!id.startsWith('custom-') || !isValidAvatarId(id)) throw new Error('not a custom avatar id');
  await removeBundleDir(avatarsDir, id);
}

/**
 * Bytes of creation uploads held in memory at once, counted as they arrive: what the creation places held when
 * each took its place before its body (every place a full clip). A trickling upload holds only what it sent so
 * far, so slow clients cannot hold creation open against others; past the budget an upload is refused while it
 * streams (503 + Retry-After).
 */
export const CUSTOM_AVATAR_UPLOAD_BUDGET_BYTES = (MAX_RUNNING_IMAGE_JOBS + MAX_WAITING_IMAGE_JOBS) * MAX_CLIP_BYTES;
let uploadBytesHeld = 0;

/** One upload's share of `CUSTOM_AVATAR_UPLOAD_BUDGET_BYTES`: what it received so far, until released. */
export interface CustomAvatarUpload {
  /** Counts `bytes` more of the body; throws `Overloaded` past the budget. */
  received(bytes: number): void;
  /** Gives its bytes back, once the request is answered or its client has gone (idempotent). */
  release(): void;
}

/**
 * Opens an upload before its body is read. Its creation place is taken only once the body is in
 * (`admitCustomAvatarUpload`), so a client trickling a body holds no place; when every place is already held by
 * an upload that is in, this refuses at once (`Overloaded`), the body unread.
 */
export function openCustomAvatarUpload(): CustomAvatarUpload {
  if (admittedImageJobs() >= MAX_RUNNING_IMAGE_JOBS + MAX_WAITING_IMAGE_JOBS)
    throw new Overloaded('too many avatars are being created; retry shortly', IMAGE_JOBS_RETRY_AFTER_S);
  let held = 0;
  return {
    received(bytes) {
      if (uploadBytesHeld + bytes > CUSTOM_AVATAR_UPLOAD_BUDGET_BYTES)
        throw new Overloaded('too many avatar uploads are arriving at once; retry shortly', IMAGE_JOBS_RETRY_AFTER_S);
      held += bytes;
      uploadBytesHeld += bytes;
    },
    release() {
      uploadBytesHeld -= held;
      held = 0;
    },
  };
}

/**
 * Takes one of the creation places for an upload whose body is in (`admitImageJob`): `Overloaded` (503 +
 * Retry-After) when every place is taken. Returns the release, for when the request has been answered.
 */
export function admitCustomAvatarUpload(): () => void {
  return admitImageJob();
}

export interface CreateCustomAvatarInput {
  catalog: AvatarCatalog;
  name: string;
  baseAvatarId: string;
  /** Exactly one of `image` (a portrait) and `video` (a clip). */
  image?: Buffer;
  video?: Buffer;
  signal?: AbortSignal;
  logger?: LogLike;
  detect?: Detector;
  /** Clock for the id timestamp. */
  now?: () => number;
  /** See BuildCustomAvatarInput. */
  onSaving?: () => void;
}

/**
 * The route's view of `buildCustomAvatar`: validates name and base (`AvatarNotFound` unknown,
 * `InvalidSelection` not `lipsync`), turns `InvalidImageError` and `ImageJobFailedError` (too slow, or killed
 * the image process) into `InvalidInput` (`ImageJobsBusyError` is already an `Overloaded`: 503 + Retry-After),
 * refreshes the catalog and answers the new AvatarSummary.
 */
export async function createCustomAvatar(input: CreateCustomAvatarInput): Promise<AvatarSummary> {
  const { catalog } = input;
  const name = input.name.trim();
  if (name.length === 0) throw new InvalidInput('name is required');
  if (name.length > MAX_AVATAR_NAME_LENGTH)
    throw new InvalidInput(`name must be at most ${MAX_AVATAR_NAME_LENGTH} characters`);
  if (input.baseAvatarId.length === 0) throw new InvalidInput('base_avatar_id is required');
  const base = await catalog.get(input.baseAvatarId);
  if (!base) throw new AvatarNotFound('base avatar not found');
  if (base.manifest.model_type !== 'lipsync') throw new InvalidSelection('base avatar must have model_type lipsync');
  let built: BuiltCustomAvatar;
  try {
    built = await buildCustomAvatar({
      avatarsDir: catalog.dir,
      base: { dir: base.dir, manifest: base.manifest },
      name,
      image: input.image,
      video: input.video,
      now: new Date((input.now ?? Date.now)()),
      detect: input.detect,
      signal: input.signal,
      logger: input.logger,
      onSaving: input.onSaving,
      tempTag: catalog.tempTag,
    });
  } catch (error) {
    if (error instanceof InvalidImageError || error instanceof InvalidClipError || error instanceof ImageJobFailedError)
      throw new InvalidInput(error.message);
    throw error;
  }
  // Files first, then the catalog entry: the entry is the commit every node sees.
  await catalog.commitCreated(built.id);
  const { manifest } = built;
  const animated = manifest.metadata.animation !== undefined;
  input.logger?.info({ avatarId: built.id, animated }, 'custom avatar created');
  const still = built.detection.ok ? {} : { reason: stillReason(built.detection.reason) };
  return {
    id: built.id,
    name,
    model_type: manifest.model_type,
    width: manifest.width,
    height: manifest.height,
    is_custom: true,
    animated,
    ...still,
  };
}

/** Why a photo avatar was made without mouth animation, for the person who uploaded it (detector reasons: actors/faces/landmarks.ts). */
const STILL_REASONS: Record<string, string> = {
  no_face: 'No face was found in the picture: use a photo of one person facing the camera, face clearly visible.',
  multiple_faces:
    'Several faces of similar size are in the picture, so none could be chosen: use a photo of one person.',
  low_confidence:
    'The face in the picture is too unclear to find the mouth: use a sharper, well-lit photo of the face from the front.',
};

export function stillReason(detectorReason: string | undefined): string {
  return (
    STILL_REASONS[detectorReason ?? ''] ??
    'The face in the picture could not be analysed: try another photo of one person facing the camera.'
  );
}

/**
 * Renames a custom avatar (the route checked it is one): its manifest's `name` is rewritten in place (a temporary
 * file renamed over it) and republished to the catalog. `InvalidInput` for an empty or over-long name.
 */
export async function renameCustomAvatar(
  catalog: AvatarCatalog,
  entry: CatalogEntry,
  rawName: string,
): Promise<AvatarSummary> {
  const name = rawName.trim();
  if (name.length === 0) throw new InvalidInput('name is required');
  if (name.length > MAX_AVATAR_NAME_LENGTH)
    throw new InvalidInput(`name must be at most ${MAX_AVATAR_NAME_LENGTH} characters`);
  const { id } = entry;
  const manifest: AvatarManifest = { ...entry.manifest, name };
  const temporary = path.join(entry.dir, `.manifest-${randomBytes(6).toString('hex')}.json`);
  try {
    await writeDurably(temporary, Buffer.from(JSON.stringify(manifest, null, 2) + '\n'));
    await fs.rename(temporary, path.join(entry.dir, 'manifest.json'));
  } finally {
    await fs.rm(temporary, { force: true });
  }
  await fsyncDir(entry.dir);
  // The rewritten manifest is republished the way a new bundle is (cluster mode: to the shared hash).
  catalog.invalidate();
  await catalog.commitCreated(id);
  const { model_type, width, height } = manifest;
  return {
    id,
    name,
    model_type,
    width,
    height,
    is_custom: true,
    ...(model_type === 'lipsync' ? { animated: manifest.metadata.animation !== undefined } : {}),
  };
}

/** The base manifest with the new identity; inherited `animation` and `hidden` never carry over. */
export function customManifest(
  base: AvatarManifest,
  custom: { id: string; name: string; animation?: MouthAnimation; clip?: ClipMetadata },
): AvatarManifest {
  const {
    animation: _inheritedAnimation,
    hidden: _hidden,
    animated: _served,
    clip: _inheritedClip,
    ...inherited
  } = base.metadata as AvatarMetadata & { animated?: unknown };
  return {
    ...base,
    id: custom.id,
    name: custom.name,
    metadata: {
      ...inherited,
      custom_avatar: true,
      base_avatar_id: base.id,
      ...(custom.animation ? { animation: custom.animation } : {}),
      ...(custom.clip ? { clip: custom.clip } : {}),
    },
  };
}

/**
 * `custom-<slug>-<timestamp>`. The slug keeps ASCII letters/digits, `_`, `-` and CJK, lower-cased (after NFKC,
 * so full-width letters count); every other run becomes `-`; hyphens/underscores are trimmed from both ends;
 * at most 40 characters; `avatar` when nothing is left.
 */
export function customAvatarId(name: string, timestampMs: number): string {
  const collapsed = name
    .normalize('NFKC')
    .toLowerCase()
    .replace(/[^a-z0-9_-]/gu, (char) => (CJK_LETTER_OR_DIGIT.test(char) ? char : '-'))
    .replace(/-{2,}/g, '-')
    .replace(/^[-_]+|[-_]+$/g, '');
  // Array.from counts code points, so a cut never splits a surrogate pair (CJK extension B is astral).
  const slug =
    Array.from(collapsed)
      .slice(0, MAX_SLUG_LENGTH)
      .join('')
      .replace(/[-_]+$/g, '') || 'avatar';
  const id = `custom-${slug}-${timestampMs}`;
  if (!isValidAvatarId(id)) throw new ServiceFault('could not derive an avatar id');
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

async function fsyncFile(file: string): Promise<void> {
  const handle = await fs.open(file, 'r+');
  try {
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
