/**
 * The CPU warp renderer (model `lipsync`, an API name): animates the mouth of a still portrait from
 * `metadata.animation` by warping the avatar's own face — no network paints it (the neural renderers are
 * `actors/lipsync/`).
 *
 * At prepare the photo's lips are closed (`photo-lips.ts`: a smile's teeth are covered), which is the
 * rest face for silence and m/b/p. Per pose (quantised to OPEN_STEPS x SHAPE_STEPS x SHAPE_STEPS) the
 * mouth region of the rest face is warped once — chin and lower lip dropped by `open`, lips spread by
 * `wide` / narrowed by `round` — the opening between the lips is painted as the inside of a mouth (dark
 * throat, upper teeth, a hint of tongue), and the result is cached as an opaque I420
 * patch whose border equals the rest face (the warp field fades to zero there). Blinks (eyelid patches
 * per closure step) are cached the same way, so a frame is a copy of the base I420 plus one or two small
 * patches; then the head moves (`photo-head.ts`: idle drift, and while speaking a bob, tilt and nod from the
 * request's prosody, as `rt_head` has), one resampling of the head ellipse per frame.
 * Without `animation` the renderer serves the still image.
 *
 * A video avatar (`metadata.clip`) plays its loop instead of the still (`clip-loop.ts`, decoded once per avatar for
 * every worker: `shared-clip-loops.ts`): idle frames are the
 * loop's own (the person's blinks and motion, so no drawn blinks or sway). A speaking frame warps the loop frame
 * it shows along that frame's own tracked lips (`clip-warp.ts`), opening from the lips as the frame shows them. A
 * clip that shows the person speaking brings its own mouths (`metadata.clip.mouths`, `harvested-mouths.ts`): the
 * one nearest to the pose is aligned to the frame's lips and laid instead of the warp.
 */
import { frameFromBase } from '../frame-buffers.ts';
import type { AvatarSource, FrameRequest, I420Frame, MouthAnimation, MouthPose, Renderer } from '../types.ts';
import { rgbaToI420 } from '../i420.ts';
import { clipLoopView, decodeClipLoop, loopFrameAt, type ClipLoop } from '../clip-loop.ts';
import { HarvestedMouths } from '../harvested-mouths.ts';
import { loadBundleFrame, type RgbaImage } from '../image.ts';
import { blendPatch, patchFromRgba, type I420Patch } from '../patch.ts';
import { blinkClosure, quantise, smoothstep } from '../idle-motion.ts';
import { closeLips } from '../photo-lips.ts';
import { PhotoHead } from '../photo-head.ts';
import { ClipHead } from '../clip-head.ts';
import { CHIN_CLEARANCE, underChin, warpFreedom } from '../photo-jaw.ts';
import {
  mouthPalette,
  paintInside,
  teethReachOf,
  tongueShown,
  type MouthPalette,
  type OpeningColumn,
  type Rgb,
} from '../photo-mouth.ts';
import { warpLoopFrame } from '../clip-warp.ts';
import { warpExpression } from '../expression-warp.ts';

export const OPEN_STEPS = 8;
export const SHAPE_STEPS = 3;
const BLINK_STEPS = 4;
/** Region geometry in units of mouth width, relative to the mouth centre. */
const REGION = { left: -1.35, right: 1.35, top: -0.75, bottom: 1.7 };
/** Maximum jaw drop as a fraction of mouth width (a wide-open "ah" at conversational effort). */
const MAX_JAW_DROP = 0.4;
/** The upper lip rises by this fraction of the jaw drop. */
const UPPER_LIFT = 0.18;
/**
 * Half width of the opening at a neutral shape (mouth widths): it ends at the lips' corners, where they meet. Ended
 * 0.04 mouth widths short of them with a blunt profile, the opening's dark ends were square walls cut into the skin
 * beside the corners.
 */
const OPENING_HALF_WIDTH = 0.5;
/** A rounded opening stays off the corners, which rounded lips press together (mixed in with `ROUND_LENS`). */
const ROUNDED_HALF_WIDTH = 0.46;
/** How much `wide` / `round` widen or narrow the opening (fractions of its half width). */
const WIDE_SPREAD = 0.18;
const ROUND_NARROWING = 0.3;
/**
 * The smile lens's profile is 1 − lateral^this: full across the middle, its lips meeting at the corners at an angle
 * (a wedge running into the corner's crease, as lips part from their corners), not in a blunt end. Reaching the
 * corners, it opens a little more than the blunt lens did (`(1 − lateral^2.6)^0.6` over 0.46 mouth widths; 6 % more
 * area), and an "aa" stays as dark (`test/render.lipsync-mouth`: 0.188 mouth widths², was 0.183).
 */
const SMILE_LENS_FULLNESS = 3.5;
/** How far a fully rounded pose turns the smile lens into an ellipse. */
const ROUND_LENS = 0.8;
/** Visible height of the upper front teeth, mouth widths. */
const UPPER_TEETH_MAX = 0.13;
/** Extent (squared, mouth widths) of the horizontal lip spread / narrowing around the mouth centre. */
const LIP_ZONE_WIDTH = 0.36;
const LIP_ZONE_HEIGHT = 0.12;
/**
 * Where `photo-jaw.ts` holds the face's outline under the chin (against a collar, a neck's shadow), it still slips
 * down with the jaw by up to this many px, fading out along the jaw with the drop (`jawWindow`): the jaw turns about
 * its hinges and its underside shows a little more. With it the astronaut's chin drops 0.27 mouth widths on "aa"
 * (≥ 0.25, `test/render.lipsync-mouth`) over ~8 px of neck; an outline moved by ≤ 2 px beside unmoved pixels is no
 * seam (`test/helpers/artefacts.ts`), and a chin dropped whole over its collar was a block with a kink at its ends.
 */
const CHIN_SLIP_PX = 1.5;
/**
 * Under the chin the chin moves whole and fades into its held outline (`photo-jaw.ts`) over this many mouth widths
 * above it, instead of being squeezed onto it: pressed into the few pixels above a collar, the shadow under the chin
 * became a thin dark line, stepped where the freedom fell off pixel by pixel. Over 0.2 mouth widths (~8 px on the
 * astronaut) the shadow fades whole into the neck and collar; over `CHIN_CLEARANCE`'s 0.1 its lower half was cut.
 */
const CHIN_FADE_CLEARANCE = 0.2;
/** A destination row covering more source rows than this is sampled as their mean (`sampleSpan`). */
const SQUEEZE_MIN = 1.5;
/**
 * A pixel a mouth pose moves by more than this (px) belongs to what it changed (`mouthClaimOf`): as for a clip's warp
 * (`clip-warp.ts`), below it a pixel's luma moves by under 2 levels on any but the hardest edge.
 */
const CLAIM_MOVED_PX = 0.02;
/** `mouthClaimOf`'s unmarked value: mid-grey, so the head's resampling spreads a mark both up and down from it. */
const UNCLAIMED = 128;
/**
 * Below the opening the drop goes from the lower lip's (the opening's bottom edge) to the chin's over a band of the face
 * (mouth widths below the seam) at least `MIN_STRETCH_SPAN` tall and `STRETCH_SPAN_PER_DROP` times the difference of the
 * two drops (in mouth widths) — at most `MAX_STRETCH_SPAN`. Beside the opening's corners the lip hardly drops and the
 * chin drops fully: squeezed into the 0.4 mouth widths under the seam, the corner's crease and the lower lip's side
 * were pulled into a vertical streak (on a `sun.mp4` portrait the seam measure's worst, 5 → 4 with this).
 */
const MIN_STRETCH_SPAN = 0.4;
const STRETCH_SPAN_PER_DROP = 2.5;
const MAX_STRETCH_SPAN = 1.0;
/**
 * The upper lip's lift fades out between these distances above the seam (mouth widths): mostly within the lip, as a
 * lip rolls up and thins, so its outline against the skin moves little (it moved 3–4 px on a full-lipped portrait,
 * fading out 0.12–0.55 mouth widths up).
 */
const LIFT_FADE_FROM = 0.05;
const LIFT_FADE_TO = 0.3;

function sampleBilinear(image: RgbaImage, x: number, y: number, out: Rgb): void {
  const maxX = image.width - 1;
  const maxY = image.height - 1;
  const cx = Math.min(maxX, Math.max(0, x));
  const cy = Math.min(maxY, Math.max(0, y));
  const x0 = Math.floor(cx);
  const y0 = Math.floor(cy);
  const x1 = Math.min(maxX, x0 + 1);
  const y1 = Math.min(maxY, y0 + 1);
  const fx = cx - x0;
  const fy = cy - y0;
  const d = image.data;
  const a = (y0 * image.width + x0) * 4;
  const b = (y0 * image.width + x1) * 4;
  const c = (y1 * image.width + x0) * 4;
  const e = (y1 * image.width + x1) * 4;
  const w00 = (1 - fx) * (1 - fy);
  const w10 = fx * (1 - fy);
  const w01 = (1 - fx) * fy;
  const w11 = fx * fy;
  out.r = d[a] * w00 + d[b] * w10 + d[c] * w01 + d[e] * w11;
  out.g = d[a + 1] * w00 + d[b + 1] * w10 + d[c + 1] * w01 + d[e + 1] * w11;
  out.b = d[a + 2] * w00 + d[b + 2] * w10 + d[c + 2] * w01 + d[e + 2] * w11;
}

/** The mean of `sampleBilinear` at whole-pixel steps over `span` source rows centred on (x, y). */
function sampleSpan(image: RgbaImage, x: number, y: number, span: number, out: Rgb): void {
  const n = Math.ceil(span);
  let r = 0;
  let g = 0;
  let b = 0;
  for (let s = 0; s < n; s++) {
    sampleBilinear(image, x, y + span * ((s + 0.5) / n - 0.5), out);
    r += out.r;
    g += out.g;
    b += out.b;
  }
  out.r = r / n;
  out.g = g / n;
  out.b = b / n;
}

/** A mouth pose on the renderer's steps (`OPEN_STEPS`, `SHAPE_STEPS`): the patch it lays; `closed` lays none. */
function mouthSteps(mouth: MouthPose): { open: number; wide: number; round: number; closed: boolean } {
  const open = quantise(mouth.open, OPEN_STEPS);
  const wide = quantise(mouth.wide, SHAPE_STEPS);
  const round = quantise(mouth.round, SHAPE_STEPS);
  return { open, wide, round, closed: open === 0 && wide === 0 && round === 0 };
}

function mix(a: number, b: number, t: number): number {
  return a + (b - a) * t;
}

interface Box {
  x: number;
  y: number;
  width: number;
  height: number;
}

function clampBox(x0: number, y0: number, x1: number, y1: number, width: number, height: number): Box {
  const left = Math.max(0, Math.floor(x0 / 2) * 2);
  const top = Math.max(0, Math.floor(y0 / 2) * 2);
  const right = Math.min(width, Math.ceil(x1));
  const bottom = Math.min(height, Math.ceil(y1));
  return { x: left, y: top, width: Math.max(0, right - left), height: Math.max(0, bottom - top) };
}

/**
 * The lips' own inner rim along the opening's sides: towards the corners the opening is bordered by lip, wet and in
 * the mouth's shade, wrapping round the corner where the lips meet, not by dark inside cut straight into the skin
 * beside a corner (a warped portrait's lips thin out there, and the corner's crease is skin). The rim is laid just
 * outside the opening's edges, over what the warp brought there, so the inside stays as dark and as large: `LIP_RIM_PX`
 * wide (at a 40 px mouth) where it is full, growing from nothing at `LIP_RIM_FROM` of the half width (in the middle the
 * lips' own edges show) to full at `LIP_RIM_FULL`, and meeting round the opening's pointed ends. It is the lips' colour
 * at `LIP_RIM_LIT` of their brightness where it meets them, shading to `LIP_RIM_SHADE` at the opening's edge.
 */
const LIP_RIM_PX = 2.2;
const LIP_RIM_FROM = 0.4;
const LIP_RIM_FULL = 0.8;
/** From here (fraction of the half width) towards the corner the rim also covers the opening's edge inside. */
const LIP_RIM_INSIDE_FROM = 0.85;
const LIP_RIM_LIT = 0.95;
const LIP_RIM_SHADE = 0.72;

/** The opening of one pose, in pixels. */
interface OpeningShape {
  /** Half width of the opening; its edges are the mouth corners. */
  halfWidth: number;
  /** How far the lower lip drops and the upper lip lifts at the centre. */
  lowerOpen: number;
  upperOpen: number;
  /** Horizontal lip spread (> 0) or narrowing (< 0), fraction of the lip width. */
  spread: number;
  /** 0: a lens hanging from the seam (a smile's "ah"); 1: an ellipse around the opening's middle ("oh"). */
  roundness: number;
  upperTeeth: number;
  /** Teeth show within this fraction of the half width. */
  teethReach: number;
  tongue: number;
}

function openingShape(open: number, wide: number, round: number, mw: number): OpeningShape {
  const jawDrop = open * MAX_JAW_DROP * mw;
  const lowerOpen = jawDrop * (1 + 0.3 * round - 0.25 * wide);
  const upperOpen = UPPER_LIFT * jawDrop * (1 + 0.5 * round);
  const spread = WIDE_SPREAD * wide - ROUND_NARROWING * round;
  // Teeth fill a good part of a small opening (f, s, t: teeth between parted lips) and a band of a wide one.
  // Rounded lips push forward and hide more of them.
  const teethFraction = mix(0.65, 0.3, smoothstep(0.1, 0.6, open)) * (1 - 0.4 * round);
  const upperTeeth = Math.min(UPPER_TEETH_MAX * mw, (lowerOpen + upperOpen) * teethFraction);
  return {
    halfWidth: mix(OPENING_HALF_WIDTH, ROUNDED_HALF_WIDTH, ROUND_LENS * round) * mw * (1 + spread),
    lowerOpen,
    upperOpen,
    spread,
    roundness: ROUND_LENS * round,
    upperTeeth,
    teethReach: teethReachOf(round),
    tongue: tongueShown(open),
  };
}

interface LensColumn {
  top: number;
  bottom: number;
  /** Opening height here relative to the centre, 0..1. */
  openness: number;
  lateral: number;
}

/**
 * The opening in one column, `nx` = offset from the mouth centre in half widths. The smile lens is full in the
 * middle and pointed at the corners, hanging from the seam (the upper lip lifts little); the round lens is an
 * ellipse around the middle of the opening, so its corners — and the lip line beside them, fading back to the
 * seam — sit lower, as lips pushed together at the corners do.
 */
function lensAt(shape: OpeningShape, nx: number, seam: number): LensColumn {
  const lateral = Math.abs(nx);
  const pointed = lateral < 1 ? 1 - Math.pow(lateral, SMILE_LENS_FULLNESS) : 0;
  const elliptic = lateral < 1 ? Math.sqrt(1 - lateral * lateral) : 0;
  const halfOpening = (shape.lowerOpen + shape.upperOpen) / 2;
  const offset = (shape.lowerOpen - shape.upperOpen) / 2;
  const centre = seam + offset * mix(pointed, 1 - smoothstep(0.9, 1.6, lateral), shape.roundness);
  const openness = mix(pointed, elliptic, shape.roundness);
  const half = halfOpening * openness;
  return { top: centre - half, bottom: centre + half, openness, lateral };
}

let mouthPosesBuiltHere = 0;

/** Mouth poses warped in this thread so far (tests: a video avatar's are all built at prepare, none at first speech). */
export function mouthPosesBuiltInThisThread(): number {
  return mouthPosesBuiltHere;
}

export class WarpRenderer implements Renderer {
  private source: RgbaImage | null = null;
  private base: I420Frame | null = null;
  private animation: MouthAnimation | null = null;
  /** The face's own lip and tooth colours, which the inside of an open mouth is painted from. */
  private palette: MouthPalette | null = null;
  /** Seam between the closed lips of the rest face, y for a column x. */
  private seamAt: (x: number) => number = () => 0;
  private fps = 25;
  private readonly mouthPatches = new Map<number, I420Patch>();
  private readonly blinkPatches = new Map<number, I420Patch[]>();
  /** A photo's head motion (idle drift, speech bob/tilt/nod); null on video avatars, whose loop moves itself. */
  private head: PhotoHead | null = null;
  /** A video avatar's head on top of its loop (`clip-head.ts`: listening nods, thinking glances, `motion`); null on photos. */
  private loopHead: ClipHead | null = null;
  private loop: ClipLoop | null = null;
  /** A speaking clip's own mouths (`metadata.clip.mouths`), laid instead of the warp; null: warp. */
  private harvested: HarvestedMouths | null = null;
  /** A photo's edge-aware falloff of the mouth warp over its box (`photo-jaw.ts`); null on video avatars. */
  private jaw: Float32Array | null = null;
  /** How much of the chin moved whole shows over its held outline (`CHIN_FADE_CLEARANCE`); null on video avatars. */
  private chinFade: Float32Array | null = null;

  async prepare(avatar: AvatarSource): Promise<void> {
    const { width, height } = avatar.manifest;
    // From the render pool the loop comes decoded in shared memory (`shared-clip-loops.ts`); decoded here only
    // for a renderer prepared outside the pool.
    this.loop = avatar.loop
      ? clipLoopView(avatar.loop)
      : avatar.clip
        ? await decodeClipLoop(avatar.clip, width, height)
        : null;
    const photo = await loadBundleFrame(avatar);
    this.fps = avatar.manifest.fps > 0 ? avatar.manifest.fps : 25;
    this.animation = usableAnimation(avatar.manifest.metadata.animation, avatar.manifest.width, avatar.manifest.height);
    // Everything (base frame, mouth poses, blinks) starts from the rest face: the photo with closed lips.
    const rest = this.animation ? closeLips(photo, this.animation) : null;
    this.source = rest ? rest.image : photo;
    this.seamAt = rest ? rest.seamAt : () => 0;
    this.palette = this.animation ? mouthPalette(photo, this.source, this.animation, this.seamAt) : null;
    this.base = rgbaToI420(this.source.data, this.source.width, this.source.height);
    this.mouthPatches.clear();
    this.blinkPatches.clear();
    this.head = null;
    this.loopHead = null;
    this.harvested = null;
    this.jaw = null;
    this.chinFade = null;
    if (!this.animation) return;
    if (this.loop) this.loopHead = new ClipHead(this.animation, this.loop.track, width, height, this.fps);
    // In the render pool the mouths travel with the shared loop (tasks carry no `clip`); read directly, with the clip.
    const mouths = avatar.loop?.mouths ?? avatar.clip?.mouths;
    if (this.loop && mouths) {
      // A harvest too thin to follow speech, or an index with no sample that fits its atlas: warp as for a silent clip.
      this.harvested = await HarvestedMouths.prepare(mouths);
      if (this.harvested) return;
    }
    // A video avatar's speaking frames warp the loop frame they show (`clip-warp.ts`): nothing to build here.
    if (this.loop) return;
    this.head = new PhotoHead(this.animation, width, height, this.fps);
    // The warp's freedom and the chin's fade, from one search for the face's edges.
    [this.jaw, this.chinFade] = warpFreedom(
      this.source,
      warpBox(this.animation, this.source),
      { x: this.animation.mouth_center.x, width: this.animation.mouth_width, seamAt: this.seamAt },
      [CHIN_CLEARANCE, CHIN_FADE_CLEARANCE],
    );
    // Warm the cache for the poses speech hits most (jaw steps at neutral shape); the rest fill lazily.
    for (let open = 1; open < OPEN_STEPS; open++) this.mouthPatch(open, 0, 0);
    for (let step = 1; step < BLINK_STEPS; step++) this.blinkPatch(step);
  }

  /** A video avatar's decoded loop (the render kit sends its frames as video, `render-kit.ts`); null for a photo. */
  get clipLoop(): ClipLoop | null {
    return this.loop;
  }

  /** Whether the avatar has usable mouth animation (otherwise frames are the still image). */
  get animated(): boolean {
    return this.animation !== null;
  }

  render(request: FrameRequest, target?: SharedArrayBuffer): I420Frame {
    if (!this.base) throw new Error('WarpRenderer.render called before prepare');
    if (this.loop) {
      const frame = this.renderLoopFrame(request, this.loop, target);
      const face = loopFrameAt(this.loop, request.frameIdx).face;
      // The expression bends the frame as shown, mouth included, along that loop frame's own landmarks.
      if (this.animation) warpExpression(frame, face, request.expression);
      // The head moves last, carrying mouth and expression with it (`clip-head.ts`).
      this.loopHead?.apply(frame, request, face);
      return frame;
    }
    const frame = frameFromBase(this.base, target);
    if (!this.animation) return frame;
    const { open, wide, round, closed } = mouthSteps(request.mouth);
    // At rest the head's silent drift comes cached (eyelids laid after it: its sub-pixel shift does not part them).
    const resting = closed && this.head?.atRest(request) === true;
    if (resting) this.head?.applyResting(frame, this.base, request);
    if (!closed) blendPatch(frame, this.mouthPatch(open, wide, round));
    const blink = Math.round(blinkClosure(request.frameIdx, this.fps) * (BLINK_STEPS - 1));
    if (blink > 0) for (const patch of this.blinkPatch(blink)) blendPatch(frame, patch);
    // The expression bends the face with its spoken mouth and eyelids, before the head carries them all.
    warpExpression(frame, this.animation, request.expression);
    // Otherwise the head moves last, carrying mouth and eyelids with it (the same motion with closed lips is the rest face).
    if (!resting) this.head?.apply(frame, request);
    return frame;
  }

  /**
   * A loop frame; while speaking, warped to the mouth pose along its own tracked lips. With harvested mouths, the person's
   * own mouth nearest to the pose is laid instead; and on a frame where the clip's own lips are parted, silence
   * lays the closed one, so the idle loop of a talking clip does not mumble (while speaking, a closed pose always
   * lays it: the mouth follows the audio, not the clip).
   */
  private renderLoopFrame(request: FrameRequest, loop: ClipLoop, target?: SharedArrayBuffer): I420Frame {
    const { frame: loopFrame, face } = loopFrameAt(loop, request.frameIdx);
    const frame = frameFromBase(loopFrame, target);
    if (!this.animation) return frame;
    const { open, wide, round, closed } = mouthSteps(request.mouth);
    if (this.harvested) {
      // While speaking a closed pose (m/b/p, a pause) is the closed sample whatever the loop frame's own lips do:
      // left as it was, a talking clip's own mouth moved against the audio on a third of the speaking frames.
      if (!closed || request.speaking || this.harvested.ownMouthOpen(face)) {
        this.harvested.lay(
          frame,
          loopFrame,
          { open: open / (OPEN_STEPS - 1), wide: wide / (SHAPE_STEPS - 1), round: round / (SHAPE_STEPS - 1) },
          face,
        );
      }
      return frame;
    }
    if (!closed)
      warpLoopFrame(frame, loopFrame, face, {
        open: open / (OPEN_STEPS - 1),
        wide: wide / (SHAPE_STEPS - 1),
        round: round / (SHAPE_STEPS - 1),
      });
    return frame;
  }

  /**
   * What `render(request)` changes on a photo beyond the same request with its lips closed (the artefact measures'
   * base, test/helpers/artefacts.ts): 1 at every pixel its mouth pose moves by more than `CLAIM_MOVED_PX` or paints,
   * carried by the expression and the head as the frame is, 0 elsewhere. Null on a video avatar (its claims are
   * `warpMaskOf` and `HarvestedMouths.claimOf`) or a still. Read off the frame alone, the composite of a lip lifted
   * or a chin dropped over plain skin that moved with it unchanged ends on the moved outline, or on the opening's
   * side where the skin beside the corners drops with the jaw; with this it ends where the displacement fades out.
   * For measuring, not for every frame: the pose's map is made again.
   */
  mouthClaimOf(request: FrameRequest): Uint8Array | null {
    if (this.loop || !this.animation || !this.base) return null;
    const { width, height } = this.base;
    // Marked on a mid-grey frame: the head's resampling spreads a mark both ways (its kernel has negative lobes).
    const marked: I420Frame = { width, height, data: new Uint8Array(this.base.data.length).fill(UNCLAIMED) };
    const { open, wide, round, closed } = mouthSteps(request.mouth);
    if (closed) return new Uint8Array(width * height);
    const warp = poseWarp(open / (OPEN_STEPS - 1), wide / (SHAPE_STEPS - 1), round / (SHAPE_STEPS - 1), this.face());
    const { box } = warp;
    for (let j = 0; j < box.height; j++) {
      for (let i = 0; i < box.width; i++) {
        const k = j * box.width + i;
        const moved =
          Math.hypot(warp.dx[k], warp.dy[k]) > CLAIM_MOVED_PX ||
          warp.paintAlpha[k] > 0 ||
          (warp.chinAlpha[k] > 0 && Math.hypot(warp.chinDx[k], warp.chinDy[k]) > CLAIM_MOVED_PX) ||
          squeezeAt(warp, i, j) > SQUEEZE_MIN;
        if (moved) marked.data[(box.y + j) * width + box.x + i] = 255;
      }
    }
    // Carried as the frame is: anything the resampling spreads the mark to belongs to the claim.
    warpExpression(marked, this.animation, request.expression);
    this.head?.apply(marked, request);
    const claim = new Uint8Array(width * height);
    for (let i = 0; i < claim.length; i++) claim[i] = marked.data[i] !== UNCLAIMED ? 1 : 0;
    return claim;
  }

  private face(): PhotoFace {
    return {
      src: this.source!,
      anim: this.animation!,
      seamAt: this.seamAt,
      palette: this.palette!,
      jaw: this.jaw,
      chinFade: this.chinFade,
    };
  }

  private mouthPatch(open: number, wide: number, round: number): I420Patch {
    const key = (open * SHAPE_STEPS + wide) * SHAPE_STEPS + round;
    let patch = this.mouthPatches.get(key);
    if (!patch) {
      patch = this.buildMouthPatch(open / (OPEN_STEPS - 1), wide / (SHAPE_STEPS - 1), round / (SHAPE_STEPS - 1));
      this.mouthPatches.set(key, patch);
      mouthPosesBuiltHere++;
    }
    return patch;
  }

  /** One mouth pose over the closed-lips rest image (`warpMouth`), as an opaque patch (a photo's: laid where it was made). */
  private buildMouthPatch(open: number, wide: number, round: number): I420Patch {
    const { image, box } = warpMouth(open, wide, round, this.face());
    return patchFromRgba(image, box.x, box.y, box.width, box.height, true);
  }

  private blinkPatch(step: number): I420Patch[] {
    let patches = this.blinkPatches.get(step);
    if (!patches) {
      const anim = this.animation!;
      const closure = step / (BLINK_STEPS - 1);
      patches = [anim.left_eye, anim.right_eye].map((eye) => this.buildEyelid(eye.x, eye.y, closure));
      this.blinkPatches.set(step, patches);
    }
    return patches;
  }

  /** Upper eyelid lowered over the eye: skin taken from just above the eye, with a dark lash line at its edge. */
  private buildEyelid(ex: number, ey: number, closure: number): I420Patch {
    const src = this.source!;
    const anim = this.animation!;
    const eyeDistance =
      Math.hypot(anim.right_eye.x - anim.left_eye.x, anim.right_eye.y - anim.left_eye.y) || anim.mouth_width;
    const halfWidth = 0.21 * eyeDistance;
    const halfHeight = 0.1 * eyeDistance;
    const box = clampBox(
      ex - halfWidth - 2,
      ey - 2 * halfHeight - 2,
      ex + halfWidth + 2,
      ey + 1.5 * halfHeight + 2,
      src.width,
      src.height,
    );
    const out: RgbaImage = { width: src.width, height: src.height, data: new Uint8Array(src.data.length) };
    const travel = closure * 1.15 * halfHeight;
    const rgb: Rgb = { r: 0, g: 0, b: 0 };
    for (let y = box.y; y < box.y + box.height; y++) {
      for (let x = box.x; x < box.x + box.width; x++) {
        const nx = (x - ex) / halfWidth;
        const ny = (y - ey) / (1.2 * halfHeight);
        const inside = 1 - smoothstep(0.75, 1.0, Math.sqrt(nx * nx + ny * ny));
        // The lid edge bows downward in the middle, like a real closing lid.
        const lidEdge = ey - halfHeight + travel + 0.35 * halfHeight * closure * (1 - nx * nx);
        const covered = Math.min(1, Math.max(0, lidEdge - y + 0.5));
        const alpha = inside * covered;
        if (alpha <= 0) continue;
        // Lid skin: the lid just above the eye, stretched down with the closing lid.
        // Skin above the eye is often a bright lid highlight: average it with the cheek just below.
        sampleBilinear(src, x, ey - 1.4 * halfHeight - (lidEdge - y) * 0.2, rgb);
        let r = rgb.r;
        let g = rgb.g;
        let b = rgb.b;
        sampleBilinear(src, x, ey + 1.8 * halfHeight, rgb);
        const shade = 0.5 * (0.92 - 0.06 * closure);
        r = (r + rgb.r) * shade;
        g = (g + rgb.g) * shade;
        b = (b + rgb.b) * shade;
        const lash =
          closure > 0.3
            ? Math.max(0, 1 - Math.abs(y - lidEdge + 0.7) / 1.4) * (1 - smoothstep(0.65, 1.0, Math.abs(nx)))
            : 0;
        r = mix(r, 50, lash * 0.85);
        g = mix(g, 34, lash * 0.85);
        b = mix(b, 28, lash * 0.85);
        const o = (y * src.width + x) * 4;
        out.data[o] = r;
        out.data[o + 1] = g;
        out.data[o + 2] = b;
        out.data[o + 3] = Math.round(alpha * 255);
      }
    }
    return patchFromRgba(out, box.x, box.y, box.width, box.height);
  }
}

/** What a photo's mouth poses are made from: the rest face, its landmarks, lip seam, colours and jaw falloff. */
interface PhotoFace {
  src: RgbaImage;
  anim: MouthAnimation;
  seamAt: (x: number) => number;
  palette: MouthPalette;
  jaw: Float32Array | null;
  chinFade: Float32Array | null;
}

/** One mouth pose over its box, before it is sampled: where each pixel comes from, and the mouth's painted inside. */
interface PoseWarp {
  box: Box;
  /** Source minus destination, px, row-major over the box. */
  dx: Float32Array;
  dy: Float32Array;
  /** The inside of the mouth painted over the warped pixel (RGB, 3 per pixel) and how much of it covers it (0..1). */
  paint: Float32Array;
  paintAlpha: Float32Array;
  /**
   * Under the chin, near its held outline: where the chin moved whole comes from (source minus destination, px), and
   * how much of it is faded in over the warped pixel (0..1), below the paint.
   */
  chinDx: Float32Array;
  chinDy: Float32Array;
  chinAlpha: Float32Array;
}

/**
 * One mouth pose over the closed-lips rest image. Destination pixels map back to the rest image: above the
 * opening the upper lip lifts, below it lower lip and chin drop (the lower lip's edge with the opening,
 * the chin rigidly, both fading out towards the neck), lips spread or narrow horizontally. The opening
 * between the lip edges is painted as the inside of the mouth: dark throat, upper teeth, a hint of tongue.
 * The warp is then held still wherever it would leave a seam at the edge of what it changes (`holdSeams`,
 * `photo-jaw.ts`). Returns an image of the source's size holding the result inside `box` (nothing outside it).
 */
function warpMouth(open: number, wide: number, round: number, face: PhotoFace): { image: RgbaImage; box: Box } {
  const warp = poseWarp(open, wide, round, face);
  const { src } = face;
  const out: RgbaImage = { width: src.width, height: src.height, data: new Uint8Array(src.data.length) };
  composePose(src, warp, out);
  return { image: out, box: warp.box };
}

/** Where each pixel of the pose's box comes from in the rest image, and what of the mouth's inside covers it. */
function poseWarp(open: number, wide: number, round: number, face: PhotoFace): PoseWarp {
  const { src, anim, seamAt, palette, jaw, chinFade } = face;
  const cx = anim.mouth_center.x;
  const mw = anim.mouth_width;
  const box = warpBox(anim, src);
  const size = box.width * box.height;
  const warp: PoseWarp = {
    box,
    dx: new Float32Array(size),
    dy: new Float32Array(size),
    paint: new Float32Array(size * 3),
    paintAlpha: new Float32Array(size),
    chinDx: new Float32Array(size),
    chinDy: new Float32Array(size),
    chinAlpha: new Float32Array(size),
  };
  const jawDrop = open * MAX_JAW_DROP * mw;
  const shape = openingShape(open, wide, round, mw);
  const inside: Rgb = { r: 0, g: 0, b: 0 };
  const rim: Rgb = { r: 0, g: 0, b: 0 };
  for (let x = box.x; x < box.x + box.width; x++) {
    const u = (x - cx) / mw;
    const destSeam = seamAt(x);
    const lens = lensAt(shape, (x - cx) / shape.halfWidth, destSeam);
    // How steeply the opening's edges run here: a pixel's distance to an edge is its distance down the column over this.
    const left = lensAt(shape, (x - 0.5 - cx) / shape.halfWidth, seamAt(x - 0.5));
    const right = lensAt(shape, (x + 0.5 - cx) / shape.halfWidth, seamAt(x + 0.5));
    const topSlant = Math.hypot(1, right.top - left.top);
    const bottomSlant = Math.hypot(1, right.bottom - left.bottom);
    // Horizontal window of the jaw: flat under the mouth, fading out towards the cheeks.
    const jawWindow = 1 - smoothstep(0.45, 1.25, Math.abs(u));
    const lipLift = destSeam - lens.top;
    const lipDrop = lens.bottom - destSeam;
    const lensMiddle = (lens.top + lens.bottom) / 2;
    // Where the lips part, what lies above the opening comes from above their seam and what lies below from below it.
    // Beside the opening (closed lips, the corner's crease) nothing parts: held there, the seam's row moved by up to
    // half a pixel across the whole box, beyond the cheeks.
    const opens = lens.bottom > lens.top;
    const jawHere = jawDrop * jawWindow;
    const stretchSpan = Math.min(
      MAX_STRETCH_SPAN,
      Math.max(MIN_STRETCH_SPAN, (STRETCH_SPAN_PER_DROP * (jawHere - lipDrop)) / mw),
    );
    const column: OpeningColumn = {
      top: lens.top,
      bottom: lens.bottom,
      lateral: lens.lateral,
      dx: x - cx,
      teeth: shape.upperTeeth * Math.pow(lens.openness, 0.35),
      tongue: shape.tongue,
      teethReach: shape.teethReach,
      upperLift: shape.upperOpen,
      mouthWidth: mw,
    };
    for (let y = box.y; y < box.y + box.height; y++) {
      // Gaussian falloff: its slope stays gentle, so the cheeks beside narrowed lips are not smeared.
      const v = (y - destSeam) / mw;
      const lipZone =
        Math.exp(-(u * u) / LIP_ZONE_WIDTH - (v * v) / LIP_ZONE_HEIGHT) * (1 - smoothstep(1.0, 1.3, Math.abs(u)));
      let sx = x - (x - cx) * (1 - 1 / (1 + shape.spread)) * lipZone;
      const seam = seamAt(sx);
      // Fixed-point iterations: the displacement depends on where in the rest image the pixel comes from.
      let sy: number;
      if (y < lensMiddle) {
        sy = y + lipLift;
        for (let k = 0; k < 2; k++) sy = y + lipLift * (1 - smoothstep(LIFT_FADE_FROM, LIFT_FADE_TO, (seam - sy) / mw));
        if (opens) sy = Math.min(sy, seam - 0.5);
      } else {
        sy = y - lipDrop;
        for (let k = 0; k < 2; k++) {
          const vs = (sy - seam) / mw;
          sy = y - mix(lipDrop, jawHere, smoothstep(0.05, 0.05 + stretchSpan, vs)) * (1 - smoothstep(1.0, 1.6, vs));
        }
        if (opens) sy = Math.max(sy, seam + 0.5);
      }
      const k = (y - box.y) * box.width + (x - box.x);
      if (jaw) {
        // Strong edges outside the lips (a collar under the chin, the face's outline) stay where they are, but for a
        // slip of the chin's outline down with the jaw. Along the jaw the warp bends towards them. Under the chin it
        // does not squeeze the chin onto its held outline (pressed into the few pixels above a collar, the shadow
        // under the chin became a thin line, stepped where the freedom falls off pixel by pixel: on the astronaut
        // five rows of shade into one or two): the chin moves whole and fades into the held outline as its freedom
        // falls, a soft shade over the collar's edge.
        const free = jaw[k];
        const fade = chinFade ? chinFade[k] : free;
        const slip = Math.min(0, Math.max(sy - y, -CHIN_SLIP_PX * jawWindow));
        const chin = underChin(u);
        const held = free < 1 || (fade < 1 && chin > 0);
        warp.chinDx[k] = sx - x;
        warp.chinDy[k] = sy - y;
        warp.chinAlpha[k] = held ? fade * chin : 0;
        const bend = held ? free * (1 - chin) : 1;
        sx = x + (sx - x) * bend;
        sy = y + slip + (sy - y - slip) * bend;
      }
      warp.dx[k] = sx - x;
      warp.dy[k] = sy - y;

      const height = lens.bottom - lens.top;
      // Distance to the nearer lip edge across it (not down the column): where an edge runs steeply, near the
      // opening's ends, a column's distance cut it off in a hard vertical step.
      const edgePx = Math.min((y - lens.top) / topSlant, (lens.bottom - y) / bottomSlant);
      const alpha = height > 0.3 ? Math.max(0, Math.min(1, edgePx + 0.5)) : 0;
      const rimCover = opens ? lipRim(column, edgePx, palette, rim) : 0;
      if (alpha > 0 || rimCover > 0) {
        if (alpha > 0) paintInside(column, y, palette, inside);
        // The rim over the inside: one paint of the two layers' joint cover.
        const cover = 1 - (1 - alpha) * (1 - rimCover);
        const insideShare = (alpha * (1 - rimCover)) / cover;
        warp.paint[3 * k] = mix(rim.r, inside.r, insideShare);
        warp.paint[3 * k + 1] = mix(rim.g, inside.g, insideShare);
        warp.paint[3 * k + 2] = mix(rim.b, inside.b, insideShare);
        warp.paintAlpha[k] = cover;
      }
    }
  }
  return warp;
}

/**
 * The lips' rim (`LIP_RIM_PX`) at `edgePx` px inside the opening's nearer edge (negative: outside it), as a colour and
 * its cover (0: none), written to `rim`.
 */
function lipRim(column: OpeningColumn, edgePx: number, palette: MouthPalette, rim: Rgb): number {
  const scale = LIP_RIM_PX * (column.mouthWidth / 40);
  // Outside the edge: grown in from the middle, narrowing only at the very corner, where the opening ends in a point.
  const outside =
    scale * smoothstep(LIP_RIM_FROM, LIP_RIM_FULL, column.lateral) * (1 - smoothstep(0.92, 1, column.lateral));
  // Inside it, only near the corners: the lips meet there, and the dark closes off before the corner's point.
  const inside = scale * smoothstep(LIP_RIM_INSIDE_FROM, 1, column.lateral);
  if (outside + inside <= 0 || edgePx >= inside + 0.5 || edgePx <= -outside - 0.5) return 0;
  const depth = Math.min(1, Math.max(0, (edgePx + outside) / (outside + inside)));
  const shade = mix(LIP_RIM_LIT, LIP_RIM_SHADE, depth);
  rim.r = palette.lip.r * shade;
  rim.g = palette.lip.g * shade;
  rim.b = palette.lip.b * shade;
  // Full across the rim, anti-aliased at both its edges.
  return Math.min(1, edgePx + outside + 0.5, inside + 0.5 - edgePx);
}

/** Samples the pose into `out` (RGBA, the source's size) over its box, the inside of the mouth painted over it. */
function composePose(src: RgbaImage, warp: PoseWarp, out: RgbaImage): void {
  const { box, dx, dy, paint, paintAlpha } = warp;
  const rgb: Rgb = { r: 0, g: 0, b: 0 };
  const chin: Rgb = { r: 0, g: 0, b: 0 };
  for (let j = 0; j < box.height; j++) {
    for (let i = 0; i < box.width; i++) {
      const k = j * box.width + i;
      const x = box.x + i;
      const y = box.y + j;
      const sx = x + dx[k];
      const sy = y + dy[k];
      // Where the warp squeezes the face (the chin closing up on its held outline: up to 4 source rows in one), the
      // rows it passes over are averaged rather than one picked: a squeezed shading stays a shading, not a hard line.
      const span = squeezeAt(warp, i, j);
      if (span > SQUEEZE_MIN) sampleSpan(src, sx, sy, span, rgb);
      else sampleBilinear(src, sx, sy, rgb);
      const chinAlpha = warp.chinAlpha[k];
      if (chinAlpha > 0) {
        sampleBilinear(src, x + warp.chinDx[k], y + warp.chinDy[k], chin);
        rgb.r = mix(rgb.r, chin.r, chinAlpha);
        rgb.g = mix(rgb.g, chin.g, chinAlpha);
        rgb.b = mix(rgb.b, chin.b, chinAlpha);
      }
      const alpha = paintAlpha[k];
      const o = (y * src.width + x) * 4;
      out.data[o] = mix(rgb.r, paint[3 * k], alpha);
      out.data[o + 1] = mix(rgb.g, paint[3 * k + 1], alpha);
      out.data[o + 2] = mix(rgb.b, paint[3 * k + 2], alpha);
      out.data[o + 3] = 255;
    }
  }
}

/** How many source rows the destination pixel (i, j) of the pose's box covers (more than 1: the warp squeezes there). */
function squeezeAt(warp: PoseWarp, i: number, j: number): number {
  const { box, dy } = warp;
  const k = j * box.width + i;
  const above = j > 0 ? dy[k - box.width] - 1 : dy[k] - 1;
  const below = j + 1 < box.height ? dy[k + box.width] + 1 : dy[k] + 1;
  return (below - above) / 2;
}

/** The region a mouth pose may change: the mouth, the chin below it, the cheeks beside it. */
function warpBox(anim: MouthAnimation, src: RgbaImage): Box {
  const { x: cx, y: cy } = anim.mouth_center;
  const mw = anim.mouth_width;
  return clampBox(
    cx + REGION.left * mw,
    cy + REGION.top * mw,
    cx + REGION.right * mw,
    cy + REGION.bottom * mw,
    src.width,
    src.height,
  );
}

/** Animation is usable when the mouth lies inside the frame and has a plausible width. */
function usableAnimation(animation: MouthAnimation | undefined, width: number, height: number): MouthAnimation | null {
  if (!animation || !animation.mouth_center || !animation.left_eye || !animation.right_eye || !animation.face_box)
    return null;
  const { x, y } = animation.mouth_center;
  if (!(x > 0 && x < width && y > 0 && y < height)) return null;
  if (!(animation.mouth_width > 4 && animation.mouth_width < width)) return null;
  return animation;
}
