/** Shared fixtures for the render tests: temp avatar bundles and PNG dumps for eyeballing. */
import { mkdtempSync, mkdirSync, copyFileSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import sharp from 'sharp';
import type {
  AvatarManifest,
  AvatarSource,
  FrameRequest,
  I420Frame,
  ModelType,
  MouthAnimation,
} from '../actors/render/types.ts';
import { CLOSED_MOUTH } from '../actors/render/types.ts';
import { i420ToRgba } from '../actors/render/i420.ts';

import { PORTRAIT_FIXTURE } from './helpers/fixtures.ts';

export const PORTRAIT = PORTRAIT_FIXTURE;

function ellipse(cx: number, cy: number, rx: number, ry: number, count: number) {
  return Array.from({ length: count }, (_, i) => {
    const t = (i / count) * 2 * Math.PI;
    return { x: Math.round(cx + rx * Math.cos(t)), y: Math.round(cy + ry * Math.sin(t)) };
  });
}

/** Hand-measured on the fixture portrait (mouth corners ~204..244, lips ~139..153, eyes ~(203,101)/(246,104)). */
export const ASTRONAUT_ANIMATION: MouthAnimation = {
  face_box: { x: 178, y: 62, width: 94, height: 120 },
  mouth_center: { x: 223, y: 146 },
  mouth_width: 42,
  outer_lip: ellipse(223, 146, 21, 8, 12),
  inner_lip: ellipse(223, 146, 16, 3, 8),
  left_eye: { x: 203, y: 101 },
  right_eye: { x: 246, y: 104 },
  confidence: 0.9,
  detector: 'hand-measured',
};

export function makePortraitBundle(options: { modelType?: ModelType; animation?: MouthAnimation | null } = {}): {
  source: AvatarSource;
  cleanup: () => void;
} {
  const dir = mkdtempSync(join(tmpdir(), 'render-test-avatar-'));
  mkdirSync(join(dir, 'frames'));
  copyFileSync(PORTRAIT, join(dir, 'frames', 'frame_00000.png'));
  copyFileSync(PORTRAIT, join(dir, 'preview.png'));
  const animation = options.animation === undefined ? ASTRONAUT_ANIMATION : options.animation;
  const manifest: AvatarManifest = {
    id: 'test-astronaut',
    name: 'Test astronaut',
    model_type: options.modelType ?? 'lipsync',
    fps: 25,
    sample_rate: 16000,
    width: 512,
    height: 512,
    version: '1.0.0',
    metadata: animation ? { animation } : {},
  };
  writeFileSync(join(dir, 'manifest.json'), JSON.stringify(manifest, null, 2));
  return { source: { id: manifest.id, dir, manifest }, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

export function request(frameIdx: number, overrides: Partial<FrameRequest> = {}): FrameRequest {
  return { frameIdx, ptsMs: frameIdx * 40, mouth: CLOSED_MOUTH, level: 0, speaking: false, ...overrides };
}

/** Mean absolute luma difference inside / outside a box. */
export function lumaDiff(a: I420Frame, b: I420Frame, box: { x0: number; y0: number; x1: number; y1: number }) {
  let inside = 0,
    insideCount = 0,
    outside = 0,
    outsideCount = 0;
  for (let y = 0; y < a.height; y++) {
    for (let x = 0; x < a.width; x++) {
      const d = Math.abs(a.data[y * a.width + x] - b.data[y * a.width + x]);
      if (x >= box.x0 && x < box.x1 && y >= box.y0 && y < box.y1) {
        inside += d;
        insideCount++;
      } else {
        outside += d;
        outsideCount++;
      }
    }
  }
  return { inside: inside / insideCount, outside: outside / outsideCount };
}

/** Writes a frame as a PNG into the system temp dir (for looking at a render by eye); returns its path. */
export async function dumpPng(frame: I420Frame, fileName: string): Promise<string> {
  const file = join(tmpdir(), fileName);
  await sharp(Buffer.from(i420ToRgba(frame)), { raw: { width: frame.width, height: frame.height, channels: 4 } })
    .png()
    .toFile(file);
  return file;
}
