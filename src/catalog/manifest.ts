import {
  CLIP_TRACK_FILE,
  MODEL_TYPES,
  MOUTHS_ATLAS_FILE,
  MOUTHS_INDEX_FILE,
  type AvatarManifest,
  type ModelType,
} from '../../actors/render/types.ts';
import { isValidAvatarId } from './slug.ts';

export class ManifestError extends Error {
  constructor(readonly problems: string[]) {
    super(`invalid manifest: ${problems.join('; ')}`);
    this.name = 'ManifestError';
  }
}

/** Bounds that keep a hostile or broken bundle from asking the renderer for absurd work. */
const MAX_DIMENSION = 4096;
const MAX_FPS = 60;
/** A video avatar's loop frames: what creation writes at most (`MAX_LOOP_FRAMES`, 150), with room for bundles made elsewhere. */
const MAX_CLIP_FRAMES = 1500;

/** Validates a parsed `manifest.json`; returns the typed manifest or throws `ManifestError` listing every problem. */
export function validateManifest(raw: unknown): AvatarManifest {
  const problems: string[] = [];
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) throw new ManifestError(['not a JSON object']);
  const m = raw as Record<string, unknown>;
  if (typeof m.id !== 'string' || !isValidAvatarId(m.id))
    problems.push('id must be a slug (letters, digits, - _ or CJK)');
  if (m.name !== undefined && m.name !== null && typeof m.name !== 'string') problems.push('name must be a string');
  if (typeof m.model_type !== 'string' || !MODEL_TYPES.includes(m.model_type as ModelType)) {
    problems.push(`model_type must be one of ${MODEL_TYPES.join(', ')}`);
  }
  const positiveInt = (key: string, max: number) => {
    const v = m[key];
    if (typeof v !== 'number' || !Number.isInteger(v) || v <= 0 || v > max)
      problems.push(`${key} must be an integer in 1..${max}`);
  };
  positiveInt('width', MAX_DIMENSION);
  positiveInt('height', MAX_DIMENSION);
  if (typeof m.width === 'number' && m.width % 2 !== 0) problems.push('width must be even (I420 video)');
  if (typeof m.height === 'number' && m.height % 2 !== 0) problems.push('height must be even (I420 video)');
  if (typeof m.fps !== 'number' || !(m.fps > 0 && m.fps <= MAX_FPS))
    problems.push(`fps must be a number in (0, ${MAX_FPS}]`);
  if (typeof m.sample_rate !== 'number' || ![8000, 16000, 24000, 32000, 44100, 48000].includes(m.sample_rate)) {
    problems.push('sample_rate must be one of 8000, 16000, 24000, 32000, 44100, 48000');
  }
  if (typeof m.version !== 'string' || m.version.length === 0) problems.push('version must be a non-empty string');
  const metadata = m.metadata ?? {};
  if (typeof metadata !== 'object' || metadata === null || Array.isArray(metadata))
    problems.push('metadata must be an object');
  else {
    const md = metadata as Record<string, unknown>;
    for (const key of ['hidden', 'custom_avatar'] as const) {
      if (md[key] !== undefined && typeof md[key] !== 'boolean') problems.push(`metadata.${key} must be a boolean`);
    }
    if (md.base_avatar_id !== undefined && typeof md.base_avatar_id !== 'string')
      problems.push('metadata.base_avatar_id must be a string');
    if (md.animation !== undefined) {
      const a = md.animation as Record<string, unknown>;
      const c = a?.mouth_center as Record<string, unknown> | undefined;
      if (
        typeof a !== 'object' ||
        !c ||
        typeof c.x !== 'number' ||
        typeof c.y !== 'number' ||
        typeof a.mouth_width !== 'number'
      ) {
        problems.push('metadata.animation must carry mouth_center {x, y} and mouth_width');
      }
    }
  }
  if (typeof metadata === 'object' && metadata !== null && (metadata as Record<string, unknown>).clip !== undefined) {
    const clip = (metadata as Record<string, unknown>).clip as Record<string, unknown> | null;
    const frames = clip?.frame_count;
    if (
      typeof clip !== 'object' ||
      clip === null ||
      typeof frames !== 'number' ||
      !Number.isInteger(frames) ||
      frames < 1 ||
      frames > MAX_CLIP_FRAMES
    ) {
      problems.push(`metadata.clip.frame_count must be an integer in 1..${MAX_CLIP_FRAMES}`);
    } else if (clip.track_file !== CLIP_TRACK_FILE)
      problems.push(`metadata.clip.track_file must be ${CLIP_TRACK_FILE}`);
    else if (clip.mouths !== undefined) {
      const mouths = clip.mouths as Record<string, unknown> | null;
      if (
        typeof mouths !== 'object' ||
        mouths === null ||
        mouths.index_file !== MOUTHS_INDEX_FILE ||
        mouths.atlas_file !== MOUTHS_ATLAS_FILE
      ) {
        problems.push(`metadata.clip.mouths must name ${MOUTHS_INDEX_FILE} and ${MOUTHS_ATLAS_FILE}`);
      }
    }
  }
  if (problems.length > 0) throw new ManifestError(problems);
  return {
    ...(m as object),
    id: m.id as string,
    name: typeof m.name === 'string' && m.name.length > 0 ? m.name : (m.id as string),
    metadata: metadata as AvatarManifest['metadata'],
  } as AvatarManifest;
}
