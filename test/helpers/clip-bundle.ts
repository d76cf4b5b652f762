import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import sharp from 'sharp';
import { readClipSource } from '../../actors/render/clip-loop.ts';
import { transformAnimation } from '../../actors/faces/landmarks.ts';
import type { HarvestedMouthFiles } from '../../actors/faces/mouth-harvest.ts';
import {
  MOUTHS_ATLAS_FILE,
  MOUTHS_INDEX_FILE,
  type AvatarManifest,
  type AvatarSource,
  type ClipMetadata,
  type MouthAnimation,
} from '../../actors/render/types.ts';
import { ASTRONAUT_ANIMATION, PORTRAIT } from '../render.fixtures.ts';

/**
 * A synthetic video avatar: the portrait moved 1 px right per frame, its face track moved with it; with `mouths`,
 * the bundle also holds those harvested mouths (`mouths/`, `metadata.clip.mouths`). `portrait` and `animation`
 * replace the astronaut fixture and its hand-measured face (a 512² PNG and the face found on it).
 */
export const CLIP_BUNDLE_FRAMES = 12;
const FRAMES = CLIP_BUNDLE_FRAMES;

export async function makeClipBundle(
  options: { mouths?: HarvestedMouthFiles; portrait?: Buffer | string; animation?: MouthAnimation } = {},
): Promise<{ source: AvatarSource; dir: string }> {
  const dir = mkdtempSync(join(tmpdir(), 'render-test-clip-'));
  mkdirSync(join(dir, 'frames'));
  const track = [];
  for (let i = 0; i < FRAMES; i++) {
    const png = await sharp(options.portrait ?? PORTRAIT)
      .extend({ left: i, right: 0, top: 0, bottom: 0, extendWith: 'copy' })
      .extract({ left: 0, top: 0, width: 512, height: 512 })
      .png()
      .toBuffer();
    writeFileSync(join(dir, 'frames', `frame_${String(i).padStart(5, '0')}.png`), png);
    track.push(transformAnimation(options.animation ?? ASTRONAUT_ANIMATION, -i, 0, 1));
  }
  writeFileSync(join(dir, 'face_track.json'), JSON.stringify(track));
  if (options.mouths) {
    mkdirSync(join(dir, 'mouths'));
    writeFileSync(join(dir, MOUTHS_ATLAS_FILE), options.mouths.atlasPng);
    writeFileSync(join(dir, MOUTHS_INDEX_FILE), JSON.stringify(options.mouths.index));
  }
  const clip: ClipMetadata = {
    frame_count: FRAMES,
    fps: 25,
    loop: 'ping-pong',
    track_file: 'face_track.json',
    face_found_fraction: 1,
    source: { duration_s: 2, width: 512, height: 512, rotation: 0, codec: 'h264', has_audio: false },
    ...(options.mouths
      ? {
          mouths: {
            count: options.mouths.index.samples.length,
            index_file: MOUTHS_INDEX_FILE,
            atlas_file: MOUTHS_ATLAS_FILE,
          },
        }
      : {}),
  };
  const manifest: AvatarManifest = {
    id: 'test-clip',
    name: 'Test clip',
    model_type: 'lipsync',
    fps: 25,
    sample_rate: 16000,
    width: 512,
    height: 512,
    version: '1.0.0',
    metadata: { animation: track[0], clip },
  };
  writeFileSync(join(dir, 'manifest.json'), JSON.stringify(manifest));
  return { source: { id: manifest.id, dir, manifest, clip: await readClipSource(dir, manifest) }, dir };
}
