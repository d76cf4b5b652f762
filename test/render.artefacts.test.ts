/**
 * Issue 44's Done-when on the project's own avatars: every speaking frame the real `lipsync` renderer makes of the
 * astronaut photo and of two video avatars made from clips of it (one speaking: its mouths harvested; one swaying
 * with its mouth shut: the warp) holds the artefact measures (test/helpers/artefacts.ts) — no composite boundary
 * adds more than 3 luma levels of step over the base frame's gradient, the face outside the mouth–jaw region differs
 * from the base by ≤ 1 level on average, no teeth-bright pixel above the upper lip's inner edge, at most one row of
 * teeth. Each frame is measured against its base (the photo's rest face, the clip's loop frame) with lip landmarks
 * the face detector finds on it (test/helpers/artefact-harness.ts).
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { closeFaceDetector } from '../actors/faces/detector.ts';
import { json, startTestApp, tempDir, REPO_AVATARS, type TestApp } from './helpers/app.ts';
import { brokenThresholds } from './helpers/artefacts.ts';
import { measureAvatar, type MeasuredAvatar } from './helpers/artefact-harness.ts';
import { landscapeMp4, speakingClipMp4 } from './helpers/clips.ts';

/** Making the speaking clip (flite, ~100 rendered frames) and two clip avatars on 2 loaded cores. */
const CREATION_TIMEOUT_MS = 600_000;
/** Eight poses rendered and each searched by the detector. */
const MEASURE_TIMEOUT_MS = 180_000;

async function createFromClip(baseUrl: string, file: string, name: string): Promise<string> {
  const body = new FormData();
  body.append('name', name);
  body.append('base_avatar_id', 'astronaut');
  body.append('video', new Blob([new Uint8Array(await fs.readFile(file))], { type: 'video/mp4' }), path.basename(file));
  const res = await fetch(`${baseUrl}/avatars/custom`, { method: 'POST', body });
  const answer = await json(res);
  expect(res.status, JSON.stringify(answer)).toBe(200);
  return answer.id as string;
}

/** Every frame's broken thresholds, by pose name (an empty object: all hold); a frame without a face is broken too. */
function broken(avatar: MeasuredAvatar): Record<string, string[]> {
  const out: Record<string, string[]> = {};
  for (const frame of avatar.frames) {
    const lines = frame.report ? brokenThresholds(frame.report) : ['no face found on the rendered frame'];
    if (lines.length > 0) out[frame.name] = lines;
  }
  return out;
}

describe('speaking frames of the project’s own avatars hold the artefact measures (issue 44)', () => {
  let t: TestApp;
  let clips: string;

  beforeAll(async () => {
    t = await startTestApp();
    clips = await tempDir('artefact-clips-');
  }, 60_000);

  afterAll(async () => {
    await t?.close();
    await closeFaceDetector();
    if (clips) await fs.rm(clips, { recursive: true, force: true });
  });

  it(
    'the astronaut photo: no seam, face unchanged outside the mouth–jaw region, no notch, one row of teeth',
    async () => {
      const avatar = await measureAvatar(path.join(REPO_AVATARS, 'astronaut'));
      expect(avatar.kind).toBe('photo');
      expect(broken(avatar)).toEqual({});
    },
    MEASURE_TIMEOUT_MS,
  );

  it(
    'a video avatar from a clip of the astronaut speaking (harvested mouths): the same',
    async () => {
      const id = await createFromClip(t.baseUrl, await speakingClipMp4(clips), 'Artefacts speaking clip');
      const avatar = await measureAvatar(path.join(t.avatarsDir, id));
      expect(avatar.kind).toBe('clip');
      expect(broken(avatar)).toEqual({});
    },
    CREATION_TIMEOUT_MS,
  );

  it(
    'a video avatar from a clip swaying over the photo, mouth shut (the warp): the same',
    async () => {
      const id = await createFromClip(t.baseUrl, await landscapeMp4(clips, 3), 'Artefacts swaying clip');
      const avatar = await measureAvatar(path.join(t.avatarsDir, id));
      expect(avatar.kind).toBe('clip');
      expect(broken(avatar)).toEqual({});
    },
    CREATION_TIMEOUT_MS,
  );
});
