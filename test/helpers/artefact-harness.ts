/**
 * Renders a `lipsync` avatar bundle (a photo or a video avatar) speaking at fixed moments through the real renderer
 * and measures every frame with `artefacts.ts` against its base (a photo's rest face: the same frame with the mouth
 * closed; a video avatar's loop frame under it), with lip landmarks found by the service's face detector on the
 * rendered frame. A speaking frame is measured with what its renderer says it moved, painted or laid (a video avatar's
 * `warpMaskOf`, `HarvestedMouths.claimOf`; a photo's `WarpRenderer.mouthClaimOf`) as part of its composite: its lips and
 * jaw line move over plain skin that moved with them unchanged, and read off the frame alone the composite would end on
 * each moved outline (on a photo, also on the opening's side where the skin beside its corners drops with the jaw). Shared by `test/render.artefacts.test.ts` (the Done-when
 * thresholds on the project's own avatars) and `npm run bench -- mouth_sheet` (contact sheets and figures for any
 * avatar).
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import sharp from 'sharp';
import { detectMouth } from '../../actors/faces/detector.ts';
import { faceHint } from '../../actors/faces/landmarks.ts';
import { decodeClipLoop, loopFrameAt, readClipSource, type ClipLoop } from '../../actors/render/clip-loop.ts';
import { warpLoopFrame, warpMaskOf } from '../../actors/render/clip-warp.ts';
import { HarvestedMouths } from '../../actors/render/harvested-mouths.ts';
import { i420ToRgba } from '../../actors/render/i420.ts';
import { quantise } from '../../actors/render/idle-motion.ts';
import { OPEN_STEPS, SHAPE_STEPS, WarpRenderer } from '../../actors/render/renderers/warp.ts';
import type {
  AvatarManifest,
  AvatarSource,
  FrameRequest,
  I420Frame,
  MouthAnimation,
  MouthPose,
} from '../../actors/render/types.ts';
import {
  COMPOSITE_MIN_DIFF,
  compositeMask,
  measureArtefacts,
  mouthCrop,
  mouthJawRegion,
  type ArtefactReport,
} from './artefacts.ts';

/** The fixed moments a contact sheet shows: speech's poses from a lip closure to a wide "ah", spread and rounded. */
export const SHEET_POSES: ReadonlyArray<{ name: string; pose: MouthPose }> = [
  { name: 'closed (m/b/p)', pose: { open: 0, wide: 0, round: 0 } },
  { name: 'parted', pose: { open: 0.2, wide: 0, round: 0 } },
  { name: 'half open', pose: { open: 0.5, wide: 0, round: 0 } },
  { name: 'wide open (ah)', pose: { open: 1, wide: 0, round: 0 } },
  { name: 'spread (ee)', pose: { open: 0.35, wide: 1, round: 0 } },
  { name: 'rounded (oo)', pose: { open: 0.35, wide: 0, round: 1 } },
  { name: 'open, spread', pose: { open: 0.75, wide: 0.5, round: 0 } },
  { name: 'open, rounded', pose: { open: 0.75, wide: 0, round: 0.5 } },
];
/** Frame indices the poses are rendered at: spread over a clip's loop (and past a photo's blinks). */
const FRAME_STRIDE = 7;
/** Mouth crops are scaled up (nearest neighbour: pixels stay visible) to about this height on a sheet, at most 4×. */
const SHEET_CROP_HEIGHT = 320;
const MAX_SHEET_SCALE = 4;

export interface MeasuredFrame {
  name: string;
  pose: MouthPose;
  frameIdx: number;
  frame: I420Frame;
  base: I420Frame;
  /** Lip landmarks the detector found on the rendered frame; null: no face found (nothing measured). */
  lips: MouthAnimation | null;
  report: ArtefactReport | null;
  /** The composite measured includes what the renderer says it changed (`clipClaim`, `photoClaim`), not only what changed. */
  warpClaimed: boolean;
}

export interface MeasuredAvatar {
  id: string;
  kind: 'photo' | 'clip';
  frames: MeasuredFrame[];
}

/** The bundle in `dir` as the render pool hands it to a renderer (a video avatar's loop read with it). */
export async function bundleSource(dir: string): Promise<AvatarSource> {
  const manifest = JSON.parse(await fs.readFile(path.join(dir, 'manifest.json'), 'utf8')) as AvatarManifest;
  const clip = await readClipSource(dir, manifest);
  return { id: manifest.id, dir, manifest, ...(clip ? { clip } : {}) };
}

/** Renders `SHEET_POSES` (or `poses`) speaking and measures each frame. */
export async function measureAvatar(dir: string, poses = SHEET_POSES): Promise<MeasuredAvatar> {
  const source = await bundleSource(dir);
  const renderer = new WarpRenderer();
  await renderer.prepare(source);
  const { width, height } = source.manifest;
  const loop: ClipLoop | null = source.clip ? await decodeClipLoop(source.clip, width, height) : null;
  // As the renderer decides: a harvest it can lay, or the warp.
  const mouths = source.clip?.mouths ? await HarvestedMouths.prepare(source.clip.mouths) : null;
  const frames: MeasuredFrame[] = [];
  for (const [i, { name, pose }] of poses.entries()) {
    const frameIdx = 1 + i * FRAME_STRIDE;
    const request = { frameIdx, ptsMs: frameIdx * 40, mouth: pose, level: 0.5, speaking: true };
    const frame = renderer.render(request);
    const at = loop ? loopFrameAt(loop, frameIdx) : null;
    const base = at ? at.frame : renderer.render({ ...request, mouth: { open: 0, wide: 0, round: 0 } });
    const hint = at ? at.face : source.manifest.metadata.animation;
    const found = await detectMouth({
      rgba: i420ToRgba(frame),
      width,
      height,
      ...(hint ? { near: faceHint(hint) } : {}),
    });
    const lips = found.ok ? found.animation : null;
    const claim = at ? clipClaim(frame, at.frame, at.face, pose, mouths) : photoClaim(renderer, request, base, frame);
    const report = lips
      ? measureArtefacts(base, frame, lips, claim ? compositeMask(base, frame, claim) : undefined)
      : null;
    frames.push({ name, pose, frameIdx, frame, base, lips, report, warpClaimed: claim !== null });
  }
  return { id: source.id, kind: loop ? 'clip' : 'photo', frames };
}

/**
 * What the clip renderer moved, painted or laid to make `frame` from its loop frame (`warpMaskOf`, with harvested
 * mouths `HarvestedMouths.claimOf`), at the pose as the renderer quantises it; null unless doing the same here gives
 * exactly the rendered frame (anything else laid over it, or another path: the composite is read off the frame alone).
 */
function clipClaim(
  frame: I420Frame,
  loopFrame: I420Frame,
  face: MouthAnimation,
  pose: MouthPose,
  mouths: HarvestedMouths | null,
): Uint8Array | null {
  const quantised = {
    open: quantise(pose.open, OPEN_STEPS) / (OPEN_STEPS - 1),
    wide: quantise(pose.wide, SHAPE_STEPS) / (SHAPE_STEPS - 1),
    round: quantise(pose.round, SHAPE_STEPS) / (SHAPE_STEPS - 1),
  };
  const again = { ...loopFrame, data: loopFrame.data.slice() };
  let claim: Uint8Array | null;
  if (mouths) {
    mouths.lay(again, loopFrame, quantised, face);
    claim = mouths.claimOf(loopFrame, quantised, face);
  } else {
    warpLoopFrame(again, loopFrame, face, quantised);
    claim = warpMaskOf(loopFrame, face, quantised);
  }
  return claim && Buffer.from(again.data).equals(Buffer.from(frame.data)) ? claim : null;
}

/**
 * What the photo renderer moved or painted to make `frame` beyond its closed-lips `base` (`mouthClaimOf`); null when
 * the frame changed a pixel outside it by more than `COMPOSITE_MIN_DIFF` (a pixel moved under the claim's 0.02 px
 * changes by less): then something else made the frame, and the composite is read off the frame alone.
 */
function photoClaim(
  renderer: WarpRenderer,
  request: FrameRequest,
  base: I420Frame,
  frame: I420Frame,
): Uint8Array | null {
  const claim = renderer.mouthClaimOf(request);
  if (!claim) return null;
  for (let i = 0; i < claim.length; i++)
    if (!claim[i] && Math.abs(frame.data[i] - base.data[i]) > COMPOSITE_MIN_DIFF) return null;
  return claim;
}

/** A contact sheet: one row of mouth crops (base, then each pose), scaled up to about `SHEET_CROP_HEIGHT`, as a PNG. */
export async function contactSheet(avatar: MeasuredAvatar): Promise<Buffer> {
  const withLips = avatar.frames.filter((f) => f.lips);
  if (withLips.length === 0) throw new Error('no face found on any rendered frame');
  // One crop box for the whole row: the first frame's mouth–jaw region, so the row compares like with like.
  const lips = withLips[0].lips!;
  const regionHeight = 2 * mouthJawRegion(lips).ry;
  const scale = Math.max(1, Math.min(MAX_SHEET_SCALE, Math.round(SHEET_CROP_HEIGHT / regionHeight)));
  const crops = [
    mouthCrop(avatar.frames[0].base, lips, scale),
    ...avatar.frames.map((f) => mouthCrop(f.frame, lips, scale)),
  ];
  const gap = 4;
  const cellWidth = crops[0].width;
  const cellHeight = crops[0].height;
  return sharp({
    create: {
      width: crops.length * (cellWidth + gap) - gap,
      height: cellHeight,
      channels: 4,
      background: { r: 255, g: 255, b: 255, alpha: 1 },
    },
  })
    .composite(
      crops.map((c, i) => ({
        input: Buffer.from(c.rgba),
        raw: { width: c.width, height: c.height, channels: 4 as const },
        left: i * (cellWidth + gap),
        top: 0,
      })),
    )
    .png()
    .toBuffer();
}

/** The worst of each measure over an avatar's measured frames (what its row in docs/performance.md shows). */
export function worstOf(avatar: MeasuredAvatar): {
  frames: number;
  measured: number;
  seam_p98: number;
  outside_mean: number;
  outside_fade_p99: number;
  teeth_above: number;
  teeth_below: number;
  dark_outside: number;
  teeth_rows: number;
} {
  const reports = avatar.frames.flatMap((f) => (f.report ? [f.report] : []));
  const max = (pick: (r: ArtefactReport) => number) => reports.reduce((m, r) => Math.max(m, pick(r)), 0);
  return {
    frames: avatar.frames.length,
    measured: reports.length,
    seam_p98: max((r) => r.seam.p98),
    outside_mean: Math.round(max((r) => r.outside.mean) * 100) / 100,
    outside_fade_p99: max((r) => r.outside.fadeP99),
    teeth_above: max((r) => r.teethAboveUpperLip),
    teeth_below: max((r) => r.teethBelowLowerLip),
    dark_outside: max((r) => r.darkOutsideLips),
    teeth_rows: max((r) => r.teethRows),
  };
}
