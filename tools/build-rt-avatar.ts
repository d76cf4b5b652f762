/**
 * Builds the built-in drawn avatars (`avatars/demo-rt`, `avatars/demo-rt-head`): a manifest with
 * `metadata.face` parameters and a rest frame rendered by the rt renderer itself, so the preview is
 * exactly what a session shows. Run with `npx tsx tools/build-rt-avatar.ts`.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import sharp from 'sharp';
import { i420ToRgba } from '../actors/render/i420.ts';
import { createRenderer } from '../actors/render/renderers/index.ts';
import { CLOSED_MOUTH, type AvatarManifest } from '../actors/render/types.ts';

const AVATARS_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', 'avatars');

const VARIANTS: AvatarManifest[] = [
  {
    id: 'demo-rt',
    name: 'Robin (drawn, real-time)',
    model_type: 'rt',
    fps: 25,
    sample_rate: 16000,
    width: 512,
    height: 512,
    version: '1.0.0',
    metadata: { face: { skin: [236, 196, 164], hair: [74, 48, 34], iris: [60, 110, 160], background: [38, 52, 74] } },
  },
  {
    id: 'demo-rt-head',
    name: 'Sam (drawn, head motion)',
    model_type: 'rt_head',
    fps: 25,
    sample_rate: 16000,
    width: 512,
    height: 512,
    version: '1.0.0',
    metadata: { face: { skin: [198, 146, 110], hair: [30, 26, 28], iris: [90, 60, 30], background: [54, 74, 58], lips: [160, 80, 80] } },
  },
];

for (const manifest of VARIANTS) {
  const dir = path.join(AVATARS_DIR, manifest.id);
  await fs.mkdir(path.join(dir, 'frames'), { recursive: true });
  const renderer = createRenderer('rt');
  await renderer.prepare({ id: manifest.id, dir, manifest });
  const frame = renderer.render({ frameIdx: 0, ptsMs: 0, mouth: CLOSED_MOUTH, level: 0, speaking: false });
  const png = await sharp(Buffer.from(i420ToRgba(frame)), { raw: { width: manifest.width, height: manifest.height, channels: 4 } })
    .removeAlpha()
    .png()
    .toBuffer();
  await fs.writeFile(path.join(dir, 'frames', 'frame_00000.png'), png);
  await fs.writeFile(path.join(dir, 'preview.png'), png);
  await fs.writeFile(path.join(dir, 'manifest.json'), `${JSON.stringify(manifest, null, 2)}\n`);
  console.log(`built ${manifest.id}`);
}
