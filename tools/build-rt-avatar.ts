/**
 * Generates the built-in drawn avatars `avatars/demo-rt/` (model_type rt) and
 * `avatars/demo-rt-head/` (model_type rt_head): manifest.json plus preview.png and
 * frames/frame_00000.png rendered by the rt renderers at rest.
 *   npx tsx tools/build-rt-avatar.ts
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import sharp from 'sharp';
import type { AvatarManifest, ModelType } from '../actors/render/types.ts';
import { CLOSED_MOUTH } from '../actors/render/types.ts';
import { createRenderer } from '../actors/render/renderers/index.ts';
import { i420ToRgba } from '../actors/render/i420.ts';
import type { FaceParams } from '../actors/render/drawn-face.ts';

const AVATARS_DIR = join(dirname(fileURLToPath(import.meta.url)), '..', 'avatars');

interface DrawnAvatarSpec {
  id: string;
  name: string;
  modelType: ModelType;
  face: Partial<FaceParams>;
}

const SPECS: DrawnAvatarSpec[] = [
  {
    id: 'demo-rt',
    name: 'Demo (drawn, real-time)',
    modelType: 'rt',
    face: { skin: '#f1c8a6', hair: '#4a3020', hair_style: 'bob', eye_color: '#3f6e8c', shirt: '#2f6db5' },
  },
  {
    id: 'demo-rt-head',
    name: 'Demo (drawn, head motion)',
    modelType: 'rt_head',
    face: {
      skin: '#c68c64',
      hair: '#1f1a17',
      hair_style: 'short',
      eye_color: '#4a3422',
      lip_color: '#a4545a',
      shirt: '#3f8f5a',
      background_top: '#f3e6d2',
      background_bottom: '#d4b896',
      face_width: 0.38,
      blush: 0.15,
    },
  },
];

async function buildAvatar(spec: DrawnAvatarSpec): Promise<void> {
  const dir = join(AVATARS_DIR, spec.id);
  const manifest: AvatarManifest = {
    id: spec.id,
    name: spec.name,
    model_type: spec.modelType,
    fps: 25,
    sample_rate: 16000,
    width: 512,
    height: 512,
    version: '1.0.0',
    metadata: { face: { ...spec.face } },
  };
  const renderer = createRenderer(spec.modelType);
  await renderer.prepare({ id: spec.id, dir, manifest });
  // Frame 0 is at rest: mid breath, eyes open, mouth closed, head level.
  const frame = renderer.render({
    frameIdx: 0,
    ptsMs: 0,
    mouth: CLOSED_MOUTH,
    level: 0,
    speaking: false,
    prosody: { fast: 0, slow: 0 },
  });
  const png = await sharp(Buffer.from(i420ToRgba(frame)), {
    raw: { width: frame.width, height: frame.height, channels: 4 },
  })
    .removeAlpha()
    .png({ compressionLevel: 9 })
    .toBuffer();
  await mkdir(join(dir, 'frames'), { recursive: true });
  await writeFile(join(dir, 'manifest.json'), `${JSON.stringify(manifest, null, 2)}\n`);
  await writeFile(join(dir, 'preview.png'), png);
  await writeFile(join(dir, 'frames', 'frame_00000.png'), png);
}

for (const spec of SPECS) await buildAvatar(spec);
