import fs from 'node:fs/promises';
import path from 'node:path';
import sharp from 'sharp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { closeFaceDetector } from '../actors/faces/detector.ts';
import { CLIP_FPS, MAX_CLIP_BYTES, MAX_CLIP_SECONDS } from '../actors/faces/video-clip.ts';
import { execFileSync } from 'node:child_process';
import { buildCustomAvatar } from '../src/catalog/custom-avatar.ts';
import { validateManifest } from '../src/catalog/manifest.ts';
import { json, startTestApp, tempDir, type TestApp } from './helpers/app.ts';
import { audioOnlyM4a, facelessMp4, landscapeMp4, longMp4, portraitWebm, rotatedMp4 } from './helpers/clips.ts';
import { PORTRAIT_FIXTURE } from './helpers/fixtures.ts';

/** Creations run one at a time and each detects ~10 frames: generous on a loaded 2-core host. */
const CREATION_TIMEOUT_MS = 180_000;
/** The shortest clip accepted (MIN_CLIP_SECONDS): a 50-frame loop, all the assertions need. */
const CLIP_SECONDS = 2;

function uploadVideo(
  baseUrl: string,
  bytes: Uint8Array,
  filename = 'clip.mp4',
  name = 'Clip Person',
): Promise<Response> {
  const body = new FormData();
  body.append('name', name);
  body.append('base_avatar_id', 'astronaut');
  body.append('video', new Blob([new Uint8Array(bytes)], { type: 'video/mp4' }), filename);
  return fetch(`${baseUrl}/avatars/custom`, { method: 'POST', body });
}

interface Track {
  mouth_center: { x: number; y: number };
  face_box: { x: number; y: number; width: number; height: number };
  outer_lip: unknown[];
}

describe('POST /avatars/custom with a video (real app, real ffmpeg, real detector)', () => {
  let t: TestApp;
  let clips: string;

  beforeAll(async () => {
    t = await startTestApp();
    clips = await tempDir('clips-');
  }, 60_000);

  afterAll(async () => {
    await t?.close();
    await closeFaceDetector();
    if (clips) await fs.rm(clips, { recursive: true, force: true });
  });

  async function leftovers(): Promise<string[]> {
    return (await fs.readdir(t.avatarsDir)).filter((name) => name.startsWith('.'));
  }

  it(
    'a landscape MP4 becomes a video avatar: 25 fps loop frames at the avatar size, a per-frame face track that follows the moving head, a preview',
    async () => {
      const res = await uploadVideo(t.baseUrl, await fs.readFile(await landscapeMp4(clips, CLIP_SECONDS)));
      const summary = await json(res);
      expect(res.status, JSON.stringify(summary)).toBe(200);
      expect(summary).toEqual({
        id: expect.stringMatching(/^custom-clip-person-\d{13}$/),
        name: 'Clip Person',
        model_type: 'lipsync',
        width: 512,
        height: 512,
        is_custom: true,
        animated: true,
      });

      const manifest = await json(await fetch(`${t.baseUrl}/avatars/${summary.id}`));
      expect(manifest.metadata.custom_avatar).toBe(true);
      expect(manifest.metadata.animated).toBe(true);
      const clip = manifest.metadata.clip;
      expect(clip).toMatchObject({
        fps: CLIP_FPS,
        loop: 'ping-pong',
        track_file: 'face_track.json',
        source: { width: 640, height: 360, codec: 'h264', has_audio: true, rotation: 0 },
      });
      expect(clip.frame_count).toBeGreaterThanOrEqual(CLIP_SECONDS * CLIP_FPS - 2);
      expect(clip.frame_count).toBeLessThanOrEqual(CLIP_SECONDS * CLIP_FPS);
      expect(clip.face_found_fraction).toBeGreaterThanOrEqual(0.9);

      const dir = path.join(t.avatarsDir, summary.id);
      const frames = (await fs.readdir(path.join(dir, 'frames'))).sort();
      expect(frames).toHaveLength(clip.frame_count);
      expect(frames[0]).toBe('frame_00000.png');
      const first = await sharp(path.join(dir, 'frames', frames.at(-1)!)).metadata();
      expect({ width: first.width, height: first.height, format: first.format }).toEqual({
        width: 512,
        height: 512,
        format: 'png',
      });
      expect(await fs.readdir(dir)).toEqual(
        expect.arrayContaining(['face_track.json', 'preview.png', 'manifest.json', 'frames']),
      );
      expect(await fs.readdir(dir)).not.toContain('upload.video');

      const track: Track[] = JSON.parse(await fs.readFile(path.join(dir, 'face_track.json'), 'utf8'));
      expect(track).toHaveLength(clip.frame_count);
      for (const frame of track) {
        expect(frame.outer_lip).toHaveLength(12);
        // The mouth lies inside the face box on every frame.
        expect(frame.mouth_center.x).toBeGreaterThan(frame.face_box.x);
        expect(frame.mouth_center.x).toBeLessThan(frame.face_box.x + frame.face_box.width);
      }
      // The window sways ±24 px in the 1024² source (≈ ±20 px in the avatar frame): the track follows it.
      const xs = track.map((f) => f.mouth_center.x);
      expect(Math.max(...xs) - Math.min(...xs)).toBeGreaterThan(10);
      // Smoothed: no jump between neighbouring frames larger than the motion itself allows.
      for (let i = 1; i < track.length; i++)
        expect(Math.abs(track[i].mouth_center.x - track[i - 1].mouth_center.x)).toBeLessThan(4);
      expect(await leftovers()).toEqual([]);
    },
    CREATION_TIMEOUT_MS,
  );

  it(
    'a portrait-orientation WebM (VP8) and a sideways-stored MP4 with a rotation tag both become avatars with the face upright',
    async () => {
      const [webm, rotated] = await Promise.all([portraitWebm(clips, CLIP_SECONDS), rotatedMp4(clips, CLIP_SECONDS)]);
      for (const [file, source] of [
        [webm, { width: 360, height: 640, codec: 'vp8', has_audio: false }],
        [rotated, { width: 360, height: 640, codec: 'h264' }],
      ] as const) {
        const res = await uploadVideo(t.baseUrl, await fs.readFile(file), path.basename(file));
        const summary = await json(res);
        expect(res.status, JSON.stringify(summary)).toBe(200);
        const manifest = await json(await fetch(`${t.baseUrl}/avatars/${summary.id}`));
        expect(manifest.metadata.clip.source).toMatchObject(source);
        // Upright: the eyes lie above the mouth (a sideways or upside-down face would not even be detected).
        const a = manifest.metadata.animation;
        expect(a.left_eye.y).toBeLessThan(a.mouth_center.y);
        expect(a.right_eye.y).toBeLessThan(a.mouth_center.y);
      }
    },
    2 * CREATION_TIMEOUT_MS,
  );

  it(
    'empty, non-video (a PNG named .mp4), audio-only, truncated, faceless and over-long clips get 400 {detail}; an over-size one 413; nothing is left behind',
    async () => {
      const landscape = await fs.readFile(await landscapeMp4(clips, CLIP_SECONDS));
      const avatarIds = async () =>
        (await json(await fetch(`${t.baseUrl}/avatars`))).map((a: { id: string }) => a.id).sort();
      const before = await avatarIds();
      const cases: Array<[string, Uint8Array, RegExp]> = [
        ['empty', new Uint8Array(0), /empty/],
        ['png renamed', await fs.readFile(PORTRAIT_FIXTURE), /MP4, MOV or WebM/],
        ['audio only', await fs.readFile(await audioOnlyM4a(clips)), /no video stream/],
        ['truncated', landscape.subarray(0, Math.floor(landscape.length / 2)), /truncated|could not be read/],
        ['faceless', await fs.readFile(await facelessMp4(clips, CLIP_SECONDS)), /no usable face/],
        ['over-long', await fs.readFile(await longMp4(clips, MAX_CLIP_SECONDS + 1)), /at most 60 s/],
      ];
      for (const [label, bytes, detail] of cases) {
        const res = await uploadVideo(t.baseUrl, bytes, `${label}.mp4`);
        const body = await json(res);
        expect({ label, status: res.status }).toEqual({ label, status: 400 });
        expect(body.detail, label).toMatch(detail);
      }
      // Over-size: a valid-looking MP4 header followed by padding past the limit, refused while it streams.
      const big = new Uint8Array(MAX_CLIP_BYTES + 1024);
      big.set(landscape.subarray(0, 64));
      const res = await uploadVideo(t.baseUrl, big, 'big.mp4');
      expect(res.status).toBe(413);
      expect((await json(res)).detail).toMatch(/video is larger than 50 MB/);
      expect(await leftovers()).toEqual([]);
      expect(await avatarIds()).toEqual(before);
    },
    CREATION_TIMEOUT_MS,
  );

  it(
    'a creation aborted mid-decode (client gone, shutdown) rejects at once, kills ffmpeg and leaves no bundle or temporary directory',
    async () => {
      const video = await fs.readFile(await landscapeMp4(clips, CLIP_SECONDS));
      const baseDir = path.join(t.avatarsDir, 'astronaut');
      const base = {
        dir: baseDir,
        manifest: validateManifest(JSON.parse(await fs.readFile(path.join(baseDir, 'manifest.json'), 'utf8'))),
      };
      const before = (await fs.readdir(t.avatarsDir)).sort();
      const controller = new AbortController();
      const building = buildCustomAvatar({
        avatarsDir: t.avatarsDir,
        base,
        name: 'aborted clip',
        video,
        signal: controller.signal,
      });
      // Wait until ffmpeg runs (its first frames are on disk in the temporary directory), then leave.
      for (let i = 0; i < 600; i++) {
        const temporary = (await fs.readdir(t.avatarsDir)).find((name) => name.startsWith('.tmp-'));
        const frames = temporary ? await fs.readdir(path.join(t.avatarsDir, temporary, 'frames')).catch(() => []) : [];
        if (frames.length > 0) break;
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      controller.abort(new Error('client went away'));
      await expect(building).rejects.toThrow('client went away');
      expect((await fs.readdir(t.avatarsDir)).sort()).toEqual(before);
      // The creation rejects as the abort fires; ffmpeg got SIGKILL in that same moment and is gone once reaped.
      const ffmpegChildren = () =>
        execFileSync('ps', ['-o', 'comm=', '--ppid', String(process.pid)], { encoding: 'utf8' })
          .split('\n')
          .filter((name) => name.includes('ffmpeg'));
      for (let i = 0; i < 50 && ffmpegChildren().length > 0; i++)
        await new Promise((resolve) => setTimeout(resolve, 100));
      expect(ffmpegChildren()).toEqual([]);
    },
    CREATION_TIMEOUT_MS,
  );
});
