/**
 * Issue 27, Build 5: what works on photo avatars works on a video avatar. One clip avatar is made through
 * POST /avatars/custom (a 2 s clip generated from the astronaut portrait, test/helpers/clips.ts), then an offline
 * MP4 bundle and a live recording of a session on it are decoded with the bundled ffmpeg and compared, frame by
 * frame, with the bundle's own loop frames.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { closeFaceDetector } from '../actors/faces/detector.ts';
import {
  IMAGE_JOBS_RETRY_AFTER_S,
  MAX_RUNNING_IMAGE_JOBS,
  MAX_WAITING_IMAGE_JOBS,
  admittedImageJobs,
} from '../actors/faces/image-jobs.ts';
import { json, post, startTestApp, tempDir, type TestApp } from './helpers/app.ts';
import {
  HEAD_MOTION,
  SAME_FRAME,
  measureOfflineClipBundle,
  measureRecordedClip,
  readLoopReference,
  renderOfflineBundle,
  speechThenPause,
  uploadClip,
  type LoopReference,
} from './helpers/clip-avatar.ts';
import { facelessMp4, landscapeMp4 } from './helpers/clips.ts';
import { ANSWER_WITHOUT_BODY_MS, endlessUpload } from './helpers/endless-upload.ts';
import { eventually } from './helpers/conversation.ts';
import {
  CUSTOM_AVATAR_UPLOAD_BUDGET_BYTES,
  admitCustomAvatarUpload,
  openCustomAvatarUpload,
} from '../src/catalog/custom-avatar.ts';
import { Overloaded } from '../src/domain-errors.ts';

/** A 2 s clip is a 50-frame loop: forwards and back in 98 frames (3.9 s). */
const CLIP_SECONDS = 2;
/** Frames in one forwards-and-back pass of the loop: a stretch this long shows every loop frame. */
const PING_PONG_FRAMES = 2 * CLIP_SECONDS * 25 - 2;
/** Creating the avatar (ffmpeg decode + face track of 50 frames) on a loaded, half-speed 2-core host. */
const CREATION_TIMEOUT_MS = 180_000;
/** The pause after the offline bundle's speech: longer than one pass of the loop. */
const PAUSE_MS = 4_200;
/** Recorded idle time: longer than one forwards-and-back pass of the loop (3.9 s). */
const RECORD_MS = 4_500;
/** Recording that much in real time, after the session's first frame, on a loaded, half-speed host. */
const RECORDING_TIMEOUT_MS = 60_000;

/** One app (and one face detector) for both groups: neither depends on a fresh service, only on its own avatars. */
let t: TestApp;
let files: string;
/** The 2 s landscape clip. */
let clip: Buffer;

beforeAll(async () => {
  t = await startTestApp();
  files = await tempDir('clip-parity-');
  clip = await fs.readFile(await landscapeMp4(files, CLIP_SECONDS));
}, CREATION_TIMEOUT_MS);

afterAll(async () => {
  await t?.close();
  await closeFaceDetector();
  if (files) await fs.rm(files, { recursive: true, force: true });
});

describe('a video avatar in offline bundles and recordings (real app, real ffmpeg, real detector)', () => {
  let avatarId: string;
  let loop: LoopReference;

  beforeAll(async () => {
    const res = await uploadClip(t.baseUrl, clip);
    const summary = await json(res);
    expect(res.status, JSON.stringify(summary)).toBe(200);
    avatarId = summary.id;
    loop = await readLoopReference(path.join(t.avatarsDir, avatarId));
  }, CREATION_TIMEOUT_MS);

  /** Ended after this group: a session left rendering would load the CPU under the next group's creations. */
  const sessions: string[] = [];
  afterAll(async () => {
    await Promise.all(sessions.map((id) => fetch(`${t.baseUrl}/sessions/${id}`, { method: 'DELETE' })));
  });

  async function lipsyncSession(): Promise<string> {
    const created = await post(t.baseUrl, '/sessions', { avatar_id: avatarId, model: 'lipsync' });
    expect(created.status).toBe(200);
    const sessionId: string = (await json(created)).session_id;
    sessions.push(sessionId);
    return sessionId;
  }

  it('an offline MP4 bundle plays the clip loop while silent and opens the mouth on the loop frame while speaking', async () => {
    const file = await renderOfflineBundle(t.baseUrl, await lipsyncSession(), speechThenPause(PAUSE_MS), files);
    const found = await measureOfflineClipBundle(file, loop);
    expect(found.silentFrames).toBeGreaterThanOrEqual(PING_PONG_FRAMES);
    expect(found.speakingFrames).toBeGreaterThan(20);
    // Silent: frame i is the loop frame at the ping-pong position of i, up to the encoder's noise, and the head moves.
    expect(found.silentFromLoopFrame).toBeLessThan(SAME_FRAME);
    expect(found.headMotion).toBeGreaterThan(HEAD_MOTION);
    // The mouth moves with speech only: closed on every silent frame, opened on most speaking ones...
    expect(found.silentMouthChange).toBeLessThan(SAME_FRAME);
    expect(found.speakingOpenedFraction).toBeGreaterThanOrEqual(0.5);
    // ...on whichever loop frame is showing: above the lips a speaking frame is still that loop frame.
    expect(found.speakingAboveMouth).toBeLessThan(SAME_FRAME);
  }, 120_000);

  it(
    'a recording of a session on the video avatar holds the clip motion: every frame is a loop frame, the head moving through the loop',
    async () => {
      const sessionId = await lipsyncSession();
      const recording = `/sessions/${sessionId}/rt-recording`;
      expect((await post(t.baseUrl, `/sessions/${sessionId}/start`)).status).toBe(200);
      expect((await post(t.baseUrl, `${recording}/start`)).status).toBe(200);
      // Recorded time counts written frames; the first comes once the render worker has decoded the loop (seconds on a loaded host).
      await expect
        .poll(async () => (await json(await fetch(`${t.baseUrl}${recording}`))).duration_ms, {
          timeout: RECORDING_TIMEOUT_MS,
          interval: 200,
        })
        .toBeGreaterThanOrEqual(RECORD_MS);
      const stopped = await post(t.baseUrl, `${recording}/stop`);
      expect(stopped.status).toBe(200);
      const status = await json(stopped);
      expect(status.state).toBe('complete');
      const download = await fetch(`${t.baseUrl}${status.artifact_url}`);
      expect(download.status).toBe(200);
      const file = path.join(files, 'recording.mp4');
      await fs.writeFile(file, Buffer.from(await download.arrayBuffer()));

      const found = await measureRecordedClip(file, loop);
      expect(found.frames).toBeGreaterThanOrEqual(PING_PONG_FRAMES);
      // Each recorded frame is one of the clip's loop frames, and together they pass through most of the loop.
      expect(found.fromNearestLoopFrame).toBeLessThan(SAME_FRAME);
      expect(found.loopFramesSeen).toBeGreaterThanOrEqual(loop.lumas.length / 2);
      expect(found.headMotion).toBeGreaterThan(HEAD_MOTION);
    },
    2 * RECORDING_TIMEOUT_MS,
  );
});

describe('bounded concurrent clip creations (real app, real ffmpeg, real detector)', () => {
  let faceless: Buffer;
  /** Places for creations: the one running and the ones waiting for it. */
  const PLACES = MAX_RUNNING_IMAGE_JOBS + MAX_WAITING_IMAGE_JOBS;

  beforeAll(async () => {
    faceless = await fs.readFile(await facelessMp4(files, CLIP_SECONDS));
  }, 60_000);

  const hidden = async () => (await fs.readdir(t.avatarsDir)).filter((name) => name.startsWith('.'));
  const customIds = async () =>
    (await json(await fetch(`${t.baseUrl}/avatars`)))
      .filter((a: { is_custom: boolean }) => a.is_custom)
      .map((a: { id: string }) => a.id);

  it(
    `while ${PLACES} uploads trickle in at 1 KB/s they hold no creation place: a whole clip uploaded meanwhile becomes an avatar (issue 42, M3)`,
    async () => {
      const fields = { name: 'Trickling', base_avatar_id: 'astronaut' };
      const trickling = Array.from({ length: PLACES }, () =>
        endlessUpload(t.baseUrl, '/avatars/custom', clip.subarray(0, 1024), {
          fileField: 'video',
          filename: 'clip.mp4',
          fields,
          trickleBytesPerS: 1024,
        }),
      );
      try {
        await Promise.all(trickling.map((upload) => upload.sent));
        const answered = trickling.map(() => false);
        trickling.forEach(
          (upload, k) =>
            void upload.answer.then(
              () => (answered[k] = true),
              () => undefined,
            ),
        );
        const res = await uploadClip(t.baseUrl, clip, 'Beside the trickles');
        const summary = await json(res);
        expect(res.status, JSON.stringify(summary)).toBe(200);
        expect(summary.id).toMatch(/^custom-beside-the-trickles-/);
        // The trickling uploads are still being read, unanswered, and none of them took a place.
        expect(answered).toEqual(trickling.map(() => false));
        expect(await eventually(() => admittedImageJobs() === 0, ANSWER_WITHOUT_BODY_MS)).toBe(true);
      } finally {
        for (const upload of trickling) upload.abort();
      }
      expect(await hidden()).toEqual([]);
    },
    CREATION_TIMEOUT_MS,
  );

  it(
    `while every place is held by an upload that is in, the next is answered 503 with Retry-After before its body is read`,
    async () => {
      const held = Array.from({ length: PLACES }, () => admitCustomAvatarUpload());
      try {
        const next = endlessUpload(t.baseUrl, '/avatars/custom', clip.subarray(0, 64 * 1024), {
          fileField: 'video',
          filename: 'clip.mp4',
          fields: { name: 'Late', base_avatar_id: 'astronaut' },
        });
        try {
          const refused = await next.answer;
          expect(refused.status).toBe(503);
          expect(refused.headers['retry-after']).toBe(String(IMAGE_JOBS_RETRY_AFTER_S));
          expect(JSON.parse(refused.body).detail).toMatch(/retry/);
        } finally {
          next.abort();
        }
      } finally {
        for (const release of held) release();
      }
      // The places free again, a whole (faceless) clip is read and judged.
      expect((await uploadClip(t.baseUrl, faceless)).status).toBe(400);
    },
    CREATION_TIMEOUT_MS,
  );

  it(`uploads arriving share a byte budget of ${CUSTOM_AVATAR_UPLOAD_BUDGET_BYTES / 2 ** 20} MB: past it the next chunk is refused (Overloaded), and released bytes count no more`, () => {
    const first = openCustomAvatarUpload();
    const second = openCustomAvatarUpload();
    first.received(CUSTOM_AVATAR_UPLOAD_BUDGET_BYTES - 10);
    expect(() => second.received(11)).toThrow(Overloaded);
    second.received(10);
    first.release();
    first.release();
    second.received(CUSTOM_AVATAR_UPLOAD_BUDGET_BYTES - 10);
    second.release();
  });

  it(
    `${PLACES + 2} clip uploads at once: ${PLACES} become avatars, 2 get 503 with Retry-After, none 5xx, nothing half-made`,
    async () => {
      const before = await customIds();
      const answers = await Promise.all(
        Array.from({ length: PLACES + 2 }, async (_, k) => {
          const res = await uploadClip(t.baseUrl, clip, `Burst ${k}`);
          return { status: res.status, retryAfter: res.headers.get('retry-after'), body: await json(res) };
        }),
      );
      const created = answers.filter((answer) => answer.status === 200);
      const refused = answers.filter((answer) => answer.status === 503);
      expect(answers.map((answer) => answer.status).sort()).toEqual([...Array(PLACES).fill(200), 503, 503]);
      for (const answer of refused) {
        expect(answer.retryAfter).toBe(String(IMAGE_JOBS_RETRY_AFTER_S));
        expect(answer.body.detail).toMatch(/retry/);
      }
      expect((await customIds()).sort()).toEqual([...before, ...created.map((answer) => answer.body.id)].sort());
      expect(await hidden()).toEqual([]);
    },
    PLACES * CREATION_TIMEOUT_MS,
  );
});
