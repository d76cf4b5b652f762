/**
 * Builds the built-in `astronaut` lipsync avatar from the public-domain NASA portrait
 * (`test/fixtures/portrait-astronaut.png`, or the path given as the first argument): the photo as
 * the RGB bundle frame and preview, and `metadata.animation` from the face-landmark detector.
 *
 *   npx tsx tools/build-astronaut-avatar.ts [portrait.png] [avatars-dir]
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import { closeFaceDetector, detectMouth } from '../actors/faces/detector.ts';
import { preparePortrait } from '../actors/faces/portrait.ts';
import type { AvatarManifest } from '../actors/render/types.ts';
import { validateManifest } from '../src/catalog/manifest.ts';

const DEFAULT_PORTRAIT = path.resolve(import.meta.dirname, '..', 'test', 'fixtures', 'portrait-astronaut.png');
const DEFAULT_AVATARS_DIR = path.resolve(import.meta.dirname, '..', 'avatars');
const SIZE = 512;

export async function buildAstronautAvatar(
  portraitPath = DEFAULT_PORTRAIT,
  avatarsDir = DEFAULT_AVATARS_DIR,
): Promise<AvatarManifest> {
  const portrait = await preparePortrait(
    await fs.readFile(portraitPath),
    { width: SIZE, height: SIZE },
    { detect: detectMouth },
  );
  if (!portrait.animation) {
    throw new Error(
      `astronaut portrait: mouth detection failed (${portrait.detection.ok ? 'unknown' : portrait.detection.reason})`,
    );
  }
  const manifest = validateManifest({
    id: 'astronaut',
    name: 'Astronaut',
    model_type: 'lipsync',
    fps: 25,
    sample_rate: 16000,
    width: SIZE,
    height: SIZE,
    version: '1.0.0',
    metadata: {
      source: 'NASA portrait (public domain), the scikit-image astronaut sample',
      animation: portrait.animation,
    },
  });
  const dir = path.join(avatarsDir, 'astronaut');
  await fs.mkdir(path.join(dir, 'frames'), { recursive: true });
  await fs.writeFile(path.join(dir, 'frames', 'frame_00000.png'), portrait.png);
  await fs.writeFile(path.join(dir, 'preview.png'), portrait.png);
  await fs.writeFile(path.join(dir, 'manifest.json'), JSON.stringify(manifest, null, 2) + '\n');
  return manifest;
}

if (import.meta.url === `file://${process.argv[1]}` || process.argv[1]?.endsWith('build-astronaut-avatar.ts')) {
  try {
    const manifest = await buildAstronautAvatar(process.argv[2], process.argv[3]);
    const a = manifest.metadata.animation!;
    console.log(
      `astronaut: mouth at (${a.mouth_center.x}, ${a.mouth_center.y}), width ${a.mouth_width}, confidence ${a.confidence}`,
    );
  } finally {
    await closeFaceDetector();
  }
}
