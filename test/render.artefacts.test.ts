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
import {
  brokenThresholds,
  insideAndLowerEdge,
  INSIDE_MIN_SHADING,
  LOWER_EDGE_MAX_STEP,
  MAX_THIN_LINE_PIXELS,
  SEAM_MAX_LEVELS,
  thinLinesUnderLips,
} from './helpers/artefacts.ts';
import { measureAvatar, type MeasuredAvatar } from './helpers/artefact-harness.ts';
import { uploadClip } from './helpers/clip-avatar.ts';
import { landscapeMp4, speakingClipMp4 } from './helpers/clips.ts';

/**
 * What each avatar holds today where issue 44's thresholds are not reached yet. Every avatar holds the seam step of
 * `SEAM_MAX_LEVELS` (3; an edge moved ≤ 2 px across the boundary is no seam, `artefacts.ts`). The photo holds it since
 * its chin closes up on its held outline instead of dropping over the collar as a block (which stepped 3–5 levels where
 * its drop ended: `photo-jaw.ts`). Every frame is measured with what its renderer says it moved, painted or laid
 * (`warpMaskOf`, `HarvestedMouths.claimOf`, the photo's `mouthClaimOf`; test/helpers/artefact-harness.ts) as part of
 * the composite, so a lip or jaw line the warp dropped over plain skin that moved with it unchanged is not read as the
 * composite's end (read off the frame alone they stepped 3–4: the harvested mouth's lower lip on the speaking clip, the
 * opening's edge on the swaying clip, a `sun.mp4` portrait's opening beside its corners; looked at zoomed, a lip, a
 * jaw line or a mouth's dark corner where they would be). docs/performance.md
 * has the figures before and after. Every other measure holds the issue's thresholds (teeth above the upper lip: those
 * the render put there, not the base's own highlight moved ≤ 2 px, `teethAboveUpperLip`). These bounds keep what was
 * won (the photo's seam was 23, then 11 before its chin dropped whole over the collar; the speaking clip's 27, the
 * swaying clip's 7 and earlier 27–29 with two rows of teeth and 31–69 px above the lip; the photo's 10 counted moved
 * edges too); lower them as the seams close, drop them when the issue holds.
 */
interface HeldSoFar {
  seamLevels: number;
  /**
   * Every opening is the warp's own (the clip's mouth never opens): its inside and lower lip hold `insideAndLowerEdge`'s
   * bounds. Painted with fixed maroon constants they read a lower-edge step of 59–74 levels and an inside shading of
   * 28–33 on every open pose; painted as a photo's (`photo-mouth.ts`) 14–34 and, half open or wider, 55–69.
   */
  synthesisedInside?: boolean;
}
const PHOTO_HELD: HeldSoFar = { seamLevels: SEAM_MAX_LEVELS };
const SPEAKING_CLIP_HELD: HeldSoFar = { seamLevels: SEAM_MAX_LEVELS };
const SWAYING_CLIP_HELD: HeldSoFar = { seamLevels: SEAM_MAX_LEVELS, synthesisedInside: true };
/** From this opening on a synthesised inside shows a tongue (`photo-mouth.ts` `tongueShown`) and must be shaded. */
const SHADED_FROM_OPEN = 0.5;

/** Making the speaking clip (flite, ~100 rendered frames) and two clip avatars on 2 loaded cores. */
const CREATION_TIMEOUT_MS = 600_000;
/** Eight poses rendered and each searched by the detector. */
const MEASURE_TIMEOUT_MS = 180_000;

async function createFromClip(baseUrl: string, file: string, name: string): Promise<string> {
  const res = await uploadClip(baseUrl, await fs.readFile(file), name);
  const answer = await json(res);
  expect(res.status, JSON.stringify(answer)).toBe(200);
  return answer.id as string;
}

/** A synthesised opening's inside and lower lip against `insideAndLowerEdge`'s bounds, as readable lines. */
function brokenInside(frame: MeasuredAvatar['frames'][number]): string[] {
  if (!frame.lips || frame.pose.open === 0) return [];
  const { columns, edgeStep, shading } = insideAndLowerEdge(frame.frame, frame.lips);
  const lines: string[] = [];
  if (columns === 0) lines.push('no opening found in the central columns');
  if (edgeStep > LOWER_EDGE_MAX_STEP) lines.push(`lower-lip edge step ${edgeStep} > ${LOWER_EDGE_MAX_STEP} levels`);
  if (frame.pose.open >= SHADED_FROM_OPEN && shading < INSIDE_MIN_SHADING)
    lines.push(`inside shading ${shading} < ${INSIDE_MIN_SHADING} levels`);
  return lines;
}

/** Every frame's broken thresholds, by pose name (an empty object: all hold); a frame without a face is broken too. */
function broken(avatar: MeasuredAvatar, held: HeldSoFar): Record<string, string[]> {
  const out: Record<string, string[]> = {};
  for (const frame of avatar.frames) {
    const lines = frame.report
      ? brokenThresholds(frame.report, held.seamLevels)
      : ['no face found on the rendered frame'];
    if (held.synthesisedInside) lines.push(...brokenInside(frame));
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
    'the astronaut photo: face unchanged outside the mouth–jaw region, no notch, one row of teeth, seams no worse than today',
    async () => {
      const avatar = await measureAvatar(path.join(REPO_AVATARS, 'astronaut'));
      expect(avatar.kind).toBe('photo');
      // Measured with the renderer's claim (it covers every change the frame shows).
      expect(avatar.frames.map((f) => f.warpClaimed)).not.toContain(false);
      expect(broken(avatar, PHOTO_HELD)).toEqual({});
      // No shade pressed into a thin line under the lips (the chin squeezed onto its held collar drew one, `photo-jaw.ts`).
      for (const frame of avatar.frames)
        expect(thinLinesUnderLips(frame.base, frame.frame, frame.lips!).pixels, frame.name).toBeLessThanOrEqual(
          MAX_THIN_LINE_PIXELS,
        );
    },
    MEASURE_TIMEOUT_MS,
  );

  it.each([
    [
      'a video avatar from a clip of the astronaut speaking (harvested mouths): the same, seams no worse than today',
      speakingClipMp4,
      SPEAKING_CLIP_HELD,
    ],
    [
      'a video avatar from a clip swaying over the photo, mouth shut (the warp): the same, seams no worse than today, its openings shaded from throat to a soft lower lip',
      (dir: string) => landscapeMp4(dir, 3),
      SWAYING_CLIP_HELD,
    ],
  ] as const)(
    '%s',
    async (_scenario, makeClip, held) => {
      const id = await createFromClip(t.baseUrl, await makeClip(clips), 'Artefacts clip');
      const avatar = await measureAvatar(path.join(t.avatarsDir, id));
      expect(avatar.kind).toBe('clip');
      expect(broken(avatar, held)).toEqual({});
    },
    CREATION_TIMEOUT_MS,
  );
});
