/**
 * Contact sheet of the photo avatar's mouth: every viseme's pose (`actors/mouth/visemes.ts`) rendered by the
 * real lipsync renderer, the mouth region cropped, enlarged and labelled, in a grid. Prints the measured
 * open-mouth figures (`test/helpers/mouth-metrics.ts`) next to it.
 *
 *   npx tsx tools/viseme-contact-sheet.ts [avatar-dir] [out.png]
 *
 * Defaults: `avatars/astronaut` → `docs/img/visemes-astronaut.png`.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import sharp from 'sharp';
import { WarpRenderer } from '../actors/render/renderers/warp.ts';
import { i420ToRgba } from '../actors/render/i420.ts';
import type { AvatarManifest, I420Frame, MouthPose } from '../actors/render/types.ts';
import { VISEME_POSES, type Viseme } from '../actors/mouth/visemes.ts';
import { jawDropPx, measureMouth, type MouthMeasure } from '../test/helpers/mouth-metrics.ts';

const REPO = path.resolve(import.meta.dirname, '..');
const DEFAULT_AVATAR_DIR = path.join(REPO, 'avatars', 'astronaut');
const DEFAULT_OUT = path.join(REPO, 'docs', 'img', 'visemes-astronaut.png');

/** The 15 viseme classes in the usual order, with the ARPAbet phones that map to them. */
export const SHEET_VISEMES: ReadonlyArray<{ viseme: Viseme; phones: string }> = [
  { viseme: 'sil', phones: 'silence' },
  { viseme: 'PP', phones: 'm b p' },
  { viseme: 'FF', phones: 'f v' },
  { viseme: 'TH', phones: 'th dh' },
  { viseme: 'DD', phones: 't d l' },
  { viseme: 'kk', phones: 'k g hh' },
  { viseme: 'CH', phones: 'ch jh sh' },
  { viseme: 'SS', phones: 's z' },
  { viseme: 'nn', phones: 'n ng' },
  { viseme: 'RR', phones: 'r er' },
  { viseme: 'aa', phones: 'aa ae ah ay' },
  { viseme: 'E', phones: 'eh ey' },
  { viseme: 'I', phones: 'iy ih y' },
  { viseme: 'O', phones: 'ao ow oy' },
  { viseme: 'U', phones: 'uw uh w' },
];

const COLUMNS = 5;
/** Crop around the mouth in mouth widths (wide enough to show the chin drop), enlarged for reading. */
const CROP = { left: -1.2, right: 1.2, top: -0.75, bottom: 1.25 };
const SCALE = 3;
const LABEL_HEIGHT = 40;
const GAP = 6;

/** A frame at rest timing: frame 0 has no blink, `speaking` turns the idle sway off. */
export function renderPose(renderer: WarpRenderer, mouth: MouthPose): I420Frame {
  return renderer.render({ frameIdx: 0, ptsMs: 0, mouth, level: 0.5, speaking: true });
}

function escapeXml(text: string): string {
  return text.replace(/[<>&]/gu, (c) => ({ '<': '&lt;', '>': '&gt;', '&': '&amp;' })[c] ?? c);
}

function label(width: number, title: string, detail: string): Buffer {
  const svg = `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${LABEL_HEIGHT}">
  <rect width="100%" height="100%" fill="#1d232b"/>
  <text x="8" y="17" font-family="DejaVu Sans, sans-serif" font-size="15" font-weight="bold" fill="#ffffff">${escapeXml(title)}</text>
  <text x="8" y="34" font-family="DejaVu Sans, sans-serif" font-size="11.5" fill="#c9d3dd">${escapeXml(detail)}</text>
</svg>`;
  return Buffer.from(svg);
}

const pose = (p: MouthPose) => `open ${p.open.toFixed(2)} wide ${p.wide.toFixed(2)} round ${p.round.toFixed(2)}`;

export async function buildContactSheet(
  avatarDir: string,
  outPath: string,
): Promise<Array<{ viseme: Viseme } & MouthMeasure & { jawDropPx: number }>> {
  const manifest = JSON.parse(await fs.readFile(path.join(avatarDir, 'manifest.json'), 'utf8')) as AvatarManifest;
  const animation = manifest.metadata.animation;
  if (!animation) throw new Error('the avatar has no metadata.animation: nothing to animate');
  const renderer = new WarpRenderer();
  await renderer.prepare({ id: manifest.id, dir: avatarDir, manifest });
  const { x: cx, y: cy } = animation.mouth_center;
  const mw = animation.mouth_width;
  const left = Math.max(0, Math.round(cx + CROP.left * mw));
  const top = Math.max(0, Math.round(cy + CROP.top * mw));
  const width = Math.min(manifest.width - left, Math.round((CROP.right - CROP.left) * mw));
  const height = Math.min(manifest.height - top, Math.round((CROP.bottom - CROP.top) * mw));
  const cellWidth = width * SCALE;
  const cellHeight = height * SCALE + LABEL_HEIGHT;
  const rest = renderPose(renderer, VISEME_POSES.sil);

  const figures: Array<{ viseme: Viseme } & MouthMeasure & { jawDropPx: number }> = [];
  const composites: sharp.OverlayOptions[] = [];
  for (const [index, { viseme, phones }] of SHEET_VISEMES.entries()) {
    const frame = renderPose(renderer, VISEME_POSES[viseme]);
    const measure = { viseme, ...measureMouth(frame, animation), jawDropPx: jawDropPx(rest, frame, animation) };
    figures.push(measure);
    const crop = await sharp(Buffer.from(i420ToRgba(frame)), {
      raw: { width: frame.width, height: frame.height, channels: 4 },
    })
      .extract({ left, top, width, height })
      .resize(cellWidth, height * SCALE, { kernel: 'cubic' })
      .png()
      .toBuffer();
    const x = (index % COLUMNS) * (cellWidth + GAP);
    const y = Math.floor(index / COLUMNS) * (cellHeight + GAP);
    composites.push({
      input: label(
        cellWidth,
        `${viseme}  (${phones})`,
        `${pose(VISEME_POSES[viseme])} · dark ${measure.darkArea.toFixed(3)} mw²`,
      ),
      left: x,
      top: y,
    });
    composites.push({ input: crop, left: x, top: y + LABEL_HEIGHT });
  }
  const rows = Math.ceil(SHEET_VISEMES.length / COLUMNS);
  await fs.mkdir(path.dirname(outPath), { recursive: true });
  await sharp({
    create: {
      width: COLUMNS * (cellWidth + GAP) - GAP,
      height: rows * (cellHeight + GAP) - GAP,
      channels: 3,
      background: '#0f1419',
    },
  })
    .composite(composites)
    .png({ compressionLevel: 9 })
    .toFile(outPath);
  return figures;
}

if (process.argv[1] && path.resolve(process.argv[1]) === path.resolve(import.meta.filename)) {
  const avatarDir = path.resolve(process.argv[2] ?? DEFAULT_AVATAR_DIR);
  const outPath = path.resolve(process.argv[3] ?? DEFAULT_OUT);
  const figures = await buildContactSheet(avatarDir, outPath);
  console.log(`wrote ${path.relative(process.cwd(), outPath)}`);
  console.log('viseme  dark/mw²  width px  height px  teeth px  jaw px');
  for (const f of figures) {
    console.log(
      `${f.viseme.padEnd(6)}  ${f.darkArea.toFixed(3).padStart(8)}  ${String(f.darkWidth).padStart(8)}  ${String(f.darkHeight).padStart(9)}  ${String(f.teethWidth).padStart(8)}  ${f.jawDropPx.toFixed(2).padStart(6)}`,
    );
  }
}
