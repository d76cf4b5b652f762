/**
 * `npm run bench -- mouth_sheet [file-or-url …]`: contact sheets of mouth crops at fixed moments (the base frame, then
 * `SHEET_POSES` spoken) for every avatar given, written as PNGs to `bench/results/mouth_sheet/`, and the artefact
 * measures of issue 44 per avatar (test/helpers/artefacts.ts: the worst frame of each measure, and which Done-when
 * thresholds break on which pose).
 *
 * Without arguments: the built-in `lipsync` avatars (the astronaut photo) and two video avatars the project makes
 * from it (a clip of it speaking: harvested mouths; a clip swaying over it, mouth shut: the warp). Each argument adds
 * an avatar made through POST /avatars/custom: a clip (.mp4 .mov .webm .mkv; its first `CLIP_SECONDS` s) or a
 * photo (.png .jpg .jpeg .webp), a local path or an http(s) URL. Real people's footage is for local judging only:
 * never commit it, its sheets or a frame of it.
 *
 *   npm run bench -- mouth_sheet
 *   npm run bench -- mouth_sheet footage/sun.mp4 footage/yongen.mp4 footage/sun-teeth.png
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs/promises';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { closeFaceDetector } from '../actors/faces/detector.ts';
import type { AvatarManifest } from '../actors/render/types.ts';
import { REPO_AVATARS, startTestApp } from '../test/helpers/app.ts';
import { brokenThresholds } from '../test/helpers/artefacts.ts';
import { contactSheet, measureAvatar, worstOf } from '../test/helpers/artefact-harness.ts';
import { landscapeMp4, speakingClipMp4 } from '../test/helpers/clips.ts';
import { postCustomAvatar } from './custom-avatar.ts';

const FFMPEG: string = (createRequire(import.meta.url)('@ffmpeg-installer/ffmpeg') as { path: string }).path;
/** A clip given is cut to its first this many seconds (the figures are on the first 10 s of `sun.mp4`). */
const CLIP_SECONDS = 10;
export const CLIP_EXTENSIONS = new Set(['.mp4', '.mov', '.webm', '.mkv', '.m4v']);
export const PHOTO_EXTENSIONS = new Set(['.png', '.jpg', '.jpeg', '.webp']);
const SHEETS_DIR = path.join(import.meta.dirname, 'results', 'mouth_sheet');

/** Arguments after the step names: anything with a dot or a slash (step names have neither). */
export function givenInputs(): string[] {
  return process.argv.slice(2).filter((arg) => arg.includes('/') || arg.includes('.'));
}

async function localCopy(input: string, dir: string): Promise<string> {
  if (!/^https?:\/\//.test(input)) return input;
  const res = await fetch(input);
  if (!res.ok) throw new Error(`GET ${input} answered ${res.status}`);
  const file = path.join(dir, path.basename(new URL(input).pathname) || 'download');
  await fs.writeFile(file, Buffer.from(await res.arrayBuffer()));
  return file;
}

export async function firstSeconds(file: string, dir: string): Promise<Buffer> {
  const out = path.join(dir, `cut-${path.basename(file, path.extname(file))}.mp4`);
  await promisify(execFile)(
    FFMPEG,
    [
      '-hide_banner',
      '-loglevel',
      'error',
      '-y',
      '-i',
      file,
      '-t',
      String(CLIP_SECONDS),
      '-c:v',
      'libx264',
      '-preset',
      'veryfast',
      '-crf',
      '16',
      '-pix_fmt',
      'yuv420p',
      '-an',
      out,
    ],
    { timeout: 300_000 },
  );
  return fs.readFile(out);
}

export async function benchMouthSheet(): Promise<Record<string, unknown>> {
  const app = await startTestApp();
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'bench-mouth-sheet-'));
  await fs.mkdir(SHEETS_DIR, { recursive: true });
  try {
    const avatars: Array<[string, string]> = [];
    for (const id of await fs.readdir(REPO_AVATARS)) {
      const manifest = JSON.parse(
        await fs.readFile(path.join(REPO_AVATARS, id, 'manifest.json'), 'utf8'),
      ) as AvatarManifest;
      if (manifest.model_type === 'lipsync') avatars.push([id, path.join(app.avatarsDir, id)]);
    }
    const inputs = givenInputs();
    if (inputs.length === 0) {
      const speaking = await postCustomAvatar(
        app.baseUrl,
        await fs.readFile(await speakingClipMp4(dir)),
        'sheet speaking clip',
        'video',
      );
      avatars.push(['speaking_clip', path.join(app.avatarsDir, speaking.id)]);
      const swaying = await postCustomAvatar(
        app.baseUrl,
        await fs.readFile(await landscapeMp4(dir, 10)),
        'sheet swaying clip',
        'video',
      );
      avatars.push(['swaying_clip', path.join(app.avatarsDir, swaying.id)]);
    }
    for (const input of inputs) {
      const file = await localCopy(input, dir);
      const ext = path.extname(file).toLowerCase();
      const name = path.basename(file, path.extname(file));
      if (CLIP_EXTENSIONS.has(ext)) {
        const { id } = await postCustomAvatar(app.baseUrl, await firstSeconds(file, dir), `sheet ${name}`, 'video');
        avatars.push([name, path.join(app.avatarsDir, id)]);
      } else if (PHOTO_EXTENSIONS.has(ext)) {
        const { id } = await postCustomAvatar(app.baseUrl, await fs.readFile(file), `sheet ${name}`, 'image');
        avatars.push([name, path.join(app.avatarsDir, id)]);
      } else {
        throw new Error(`mouth_sheet: ${ext || 'no extension'} is neither a clip nor a photo`);
      }
    }
    const rows: Record<string, unknown> = {};
    for (const [name, bundle] of avatars) {
      const measured = await measureAvatar(bundle);
      const sheet = path.join(SHEETS_DIR, `${name}.png`);
      await fs.writeFile(sheet, await contactSheet(measured));
      const broken: Record<string, string[]> = {};
      for (const frame of measured.frames) {
        const lines = frame.report ? brokenThresholds(frame.report) : ['no face found'];
        if (lines.length > 0) broken[frame.name] = lines;
      }
      rows[name] = {
        kind: measured.kind,
        sheet: path.relative(process.cwd(), sheet),
        worst: worstOf(measured),
        broken,
      };
      console.log(`  ${name}:`, JSON.stringify(rows[name]));
    }
    return rows;
  } finally {
    await app.close();
    await closeFaceDetector();
    await fs.rm(dir, { recursive: true, force: true });
  }
}
