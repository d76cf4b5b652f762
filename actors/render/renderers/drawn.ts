/**
 * Shared machinery of the drawn-avatar renderers (`rt`, `rt_head`). Everything visual is rasterised
 * at prepare time: background, body per breathing step, head, and an atlas of mouth shapes (per
 * quantised pose) and eyelids (per blink step). A frame is then a copy of a cached base plus small
 * blends — or, for rt_head, one rotated/shifted composite of the head layer.
 */
import { frameFromBase } from '../frame-buffers.ts';
import type { AvatarSource, FrameRequest, I420Frame, Renderer } from '../types.ts';
import { rgbaToI420 } from '../i420.ts';
import { rasteriseSvg, type RgbaImage } from '../image.ts';
import { blendPatch, patchFromRgba, type I420Patch } from '../patch.ts';
import { blinkClosure, oscillate, quantise } from '../idle-motion.ts';
import { motionScale } from '../motion.ts';
import {
  blendLayerInto,
  cloneLayer,
  compositeTransformed,
  dilateColour,
  yuvaFromRgba,
  type YuvaLayer,
} from '../yuva.ts';
import { faceExpression, isNeutral } from '../../expression.ts';
import { attentionMovesHead, NO_ATTENTION, type AttentionPose } from '../../attention.ts';
import {
  backgroundSvg,
  bodySvg,
  browBox,
  curveMouth,
  eyelidBox,
  eyelidShape,
  faceGeometry,
  faceParams,
  headSvg,
  mouthBox,
  mouthShape,
  type BrowPose,
  type FaceGeometry,
  type FaceParams,
} from '../drawn-face.ts';

export const OPEN_STEPS = 8;
export const SHAPE_STEPS = 3;
const BLINK_STEPS = 4;
const BREATH_STEPS = 5;
/** Mouth curve steps over -1..1 (concern .. smile); odd, so the middle one is the neutral mouth. */
const CURVE_STEPS = 9;
/** Brow raise and knit steps over 0..1: every pose is drawn at prepare, 5 × 3 = 15 small brow sprites. */
const BROW_RAISE_STEPS = 5;
const BROW_KNIT_STEPS = 3;
const MOUTH_SHAPES = OPEN_STEPS * SHAPE_STEPS * SHAPE_STEPS;
/** Breathing lifts the shoulders this much at 512 px frame height (scaled with the frame). */
const BREATH_RISE_PX_AT_512 = 4;
/** Resting breath rate: one breath every ~4 s. */
const BREATH_PERIOD_SECONDS = 4.2;

interface Cell {
  x: number;
  y: number;
  width: number;
  height: number;
}

function cropRgba(atlas: RgbaImage, cell: Cell): RgbaImage {
  const data = new Uint8Array(cell.width * cell.height * 4);
  for (let row = 0; row < cell.height; row++) {
    const start = ((cell.y + row) * atlas.width + cell.x) * 4;
    data.set(atlas.data.subarray(start, start + cell.width * 4), row * cell.width * 4);
  }
  return { width: cell.width, height: cell.height, data };
}

/** Straight-alpha "over" of `top` onto opaque `bottom`, `top` shifted down by dy px. */
function compositeRgba(bottom: RgbaImage, top: RgbaImage, dy = 0): void {
  for (let y = 0; y < bottom.height; y++) {
    const sy = y - dy;
    if (sy < 0 || sy >= top.height) continue;
    for (let x = 0; x < bottom.width; x++) {
      const s = (sy * top.width + x) * 4;
      const alpha = top.data[s + 3];
      if (alpha === 0) continue;
      const d = (y * bottom.width + x) * 4;
      for (let c = 0; c < 3; c++)
        bottom.data[d + c] = (bottom.data[d + c] * (255 - alpha) + top.data[s + c] * alpha) / 255;
    }
  }
}

/** Places a cell image (origin = its anchor point minus the box offset) into frame-sized coordinates. */
function spriteAt(image: RgbaImage, left: number, top: number, frameWidth: number, frameHeight: number): RgbaImage {
  const canvas: RgbaImage = {
    width: frameWidth,
    height: frameHeight,
    data: new Uint8Array(frameWidth * frameHeight * 4),
  };
  for (let row = 0; row < image.height; row++) {
    const y = top + row;
    if (y < 0 || y >= frameHeight) continue;
    for (let col = 0; col < image.width; col++) {
      const x = left + col;
      if (x < 0 || x >= frameWidth) continue;
      const s = (row * image.width + col) * 4;
      canvas.data.set(image.data.subarray(s, s + 4), (y * frameWidth + x) * 4);
    }
  }
  return canvas;
}

/**
 * Breathing step (0..BREATH_STEPS-1) of a frame: a pure function of its index, like every idle motion, scaled by the
 * session's `motion` (0: the middle step always, the figure still).
 */
export function breathStepAt(frameIdx: number, fps: number, motion = 1): number {
  return quantise(0.5 + 0.5 * motionScale(motion) * oscillate(frameIdx, fps, BREATH_PERIOD_SECONDS), BREATH_STEPS);
}

export { motionScale };

/** Eyelid step (0 = open .. BLINK_STEPS-1 = shut) of a frame. */
export function blinkStepAt(frameIdx: number, fps: number): number {
  return Math.round(blinkClosure(frameIdx, fps) * (BLINK_STEPS - 1));
}

/** Index of the mouth shape (quantised open × wide × round) a request shows. */
export function drawnMouthKey(request: FrameRequest): number {
  const open = quantise(request.mouth.open, OPEN_STEPS);
  const wide = quantise(request.mouth.wide, SHAPE_STEPS);
  const round = quantise(request.mouth.round, SHAPE_STEPS);
  return open * SHAPE_STEPS * SHAPE_STEPS + wide * SHAPE_STEPS + round;
}

/** The quantised expression a request shows: mouth curve step and brow pose step (0 = neutral brows). */
export function drawnExpressionSteps(request: FrameRequest): { curve: number; brows: number } {
  if (isNeutral(request.expression)) return { curve: (CURVE_STEPS - 1) / 2, brows: 0 };
  const face = faceExpression(request.expression);
  const raise = quantise(face.browRaise, BROW_RAISE_STEPS);
  const knit = quantise(face.browKnit, BROW_KNIT_STEPS);
  return { curve: quantise((face.mouthCurve + 1) / 2, CURVE_STEPS), brows: raise * BROW_KNIT_STEPS + knit };
}

function browPoseOf(step: number): BrowPose {
  return {
    raise: Math.floor(step / BROW_KNIT_STEPS) / (BROW_RAISE_STEPS - 1),
    knit: (step % BROW_KNIT_STEPS) / (BROW_KNIT_STEPS - 1),
  };
}

/**
 * Everything an `rt` frame's pixels depend on: breathing step, mouth shape, eyelid step and expression (rt keeps
 * the head still, so nothing else). Two requests with the same key render the same frame.
 */
export function rtLookKey(request: FrameRequest, fps: number): string {
  const expression = drawnExpressionSteps(request);
  return `${breathStepAt(request.frameIdx, fps, request.motion)}:${drawnMouthKey(request)}:${blinkStepAt(request.frameIdx, fps)}:${expression.curve}:${expression.brows}`;
}

export interface HeadMotion {
  /** Radians, positive = clockwise on screen. */
  tilt: number;
  /** Pixels, positive = down. */
  nod: number;
  /** Pixels, positive = right (a glance aside); absent: 0. */
  shift?: number;
}

const DEG = Math.PI / 180;
/**
 * Attention on a drawn head, at 512 px frame height: a listener's nod at the user's pause (8 px), thinking's glance
 * aside (8 px) or up (6 px) with a 3° tilt. Larger than on a photo: a drawn head is a layer of its own and turns
 * without bending anything around it.
 */
const LISTEN_NOD_PX_AT_512 = 8;
const THINK_LOOK_X_PX_AT_512 = 8;
const THINK_LOOK_UP_PX_AT_512 = 6;
const THINK_TILT_DEG = 3;

/** The head motion of a request's attention (`actors/attention.ts`) on a drawn face `frameHeight` px tall. */
export function attentionHeadMotion(attention: AttentionPose | undefined, frameHeight: number): Required<HeadMotion> {
  const a = attention ?? NO_ATTENTION;
  const scale = frameHeight / 512;
  return {
    tilt: DEG * THINK_TILT_DEG * a.tilt,
    nod: scale * (LISTEN_NOD_PX_AT_512 * a.nod + THINK_LOOK_UP_PX_AT_512 * a.lookY),
    shift: scale * THINK_LOOK_X_PX_AT_512 * a.lookX,
  };
}

export abstract class DrawnRenderer implements Renderer {
  protected params: FaceParams | null = null;
  protected geometry: FaceGeometry | null = null;
  protected fps = 25;
  private bases: I420Frame[] = [];
  private mouthCells: RgbaImage[] = [];
  private eyelidCells: RgbaImage[] = [];
  private mouthOrigin = { x: 0, y: 0 };
  private eyelidOrigin = { x: 0, y: 0 };
  /** Brow sprites by pose step (index 0, neutral, is the head as drawn and never blended). */
  private browCells: RgbaImage[] = [];
  private browOrigin = { x: 0, y: 0 };
  private readonly browPatches = new Map<number, I420Patch>();
  private readonly browLayers = new Map<number, YuvaLayer>();
  private readonly mouthPatches = new Map<number, I420Patch>();
  private readonly eyelidPatches = new Map<number, I420Patch>();
  private readonly mouthLayers = new Map<number, YuvaLayer>();
  private readonly eyelidLayers = new Map<number, YuvaLayer>();
  private headLayer: YuvaLayer | null = null;
  /** The body per breathing step without the head: what a moved head is composited on (rt_head always, rt on a nod or glance). */
  private bodyBases: I420Frame[] = [];

  /** rt_head moves the head as a separate layer; rt bakes it into the base frames (and moves the layer only for attention). */
  protected abstract readonly movesHead: boolean;

  /** Head pose for this frame; rt keeps it still. */
  protected headMotion(_request: FrameRequest): HeadMotion {
    return { tilt: 0, nod: 0 };
  }

  async prepare(avatar: AvatarSource): Promise<void> {
    const { width, height } = avatar.manifest;
    const params = faceParams(avatar.manifest);
    const geometry = faceGeometry(params, width, height);
    this.params = params;
    this.geometry = geometry;
    this.fps = avatar.manifest.fps > 0 ? avatar.manifest.fps : 25;
    this.mouthPatches.clear();
    this.eyelidPatches.clear();
    this.mouthLayers.clear();
    this.eyelidLayers.clear();
    this.browPatches.clear();
    this.browLayers.clear();

    const [background, head, , , ...bodies] = await Promise.all([
      rasteriseSvg(backgroundSvg(params, geometry)),
      rasteriseSvg(headSvg(params, geometry)),
      this.renderAtlas(params, geometry),
      this.renderBrows(params, geometry),
      ...Array.from({ length: BREATH_STEPS }, (_, step) =>
        rasteriseSvg(bodySvg(params, geometry, this.bodyRise(step))),
      ),
    ]);
    this.bodyBases = bodies.map((body) => {
      const canvas: RgbaImage = { width, height, data: background.data.slice() };
      compositeRgba(canvas, body);
      return rgbaToI420(canvas.data, width, height);
    });
    this.bases = this.movesHead
      ? this.bodyBases
      : bodies.map((body, step) => {
          const canvas: RgbaImage = { width, height, data: background.data.slice() };
          compositeRgba(canvas, body);
          compositeRgba(canvas, head, -this.headRise(step));
          return rgbaToI420(canvas.data, width, height);
        });
    const bounds = alphaBounds(head);
    this.headLayer = yuvaFromRgba(head, bounds.x, bounds.y, bounds.width, bounds.height);
    dilateColour(this.headLayer);
  }

  private async renderAtlas(params: FaceParams, geometry: FaceGeometry): Promise<RgbaImage> {
    const mouth = mouthBox(geometry);
    const eyelid = eyelidBox(geometry);
    const columns = SHAPE_STEPS * SHAPE_STEPS;
    const mouthCells: Cell[] = [];
    const parts: string[] = [];
    for (let open = 0; open < OPEN_STEPS; open++) {
      for (let shape = 0; shape < columns; shape++) {
        const cell = { x: shape * mouth.width, y: open * mouth.height, width: mouth.width, height: mouth.height };
        mouthCells.push(cell);
        const wide = Math.floor(shape / SHAPE_STEPS) / (SHAPE_STEPS - 1);
        const round = (shape % SHAPE_STEPS) / (SHAPE_STEPS - 1);
        parts.push(
          mouthShape(
            params,
            geometry,
            open / (OPEN_STEPS - 1),
            wide,
            round,
            cell.x - mouth.x,
            cell.y - mouth.y,
            `m${mouthCells.length}`,
          ),
        );
      }
    }
    const eyelidTop = OPEN_STEPS * mouth.height;
    const eyelidCells: Cell[] = [];
    for (let step = 0; step < BLINK_STEPS; step++) {
      const cell = { x: step * eyelid.width, y: eyelidTop, width: eyelid.width, height: eyelid.height };
      eyelidCells.push(cell);
      parts.push(
        eyelidShape(params, geometry, step / (BLINK_STEPS - 1), cell.x - eyelid.x, cell.y - eyelid.y, `e${step}`),
      );
    }
    const atlasWidth = Math.max(columns * mouth.width, BLINK_STEPS * eyelid.width);
    const atlasHeight = eyelidTop + eyelid.height;
    const atlas = await rasteriseSvg(
      `<svg xmlns="http://www.w3.org/2000/svg" width="${atlasWidth}" height="${atlasHeight}" viewBox="0 0 ${atlasWidth} ${atlasHeight}">${parts.join('')}</svg>`,
    );
    this.mouthCells = mouthCells.map((cell) => cropRgba(atlas, cell));
    this.eyelidCells = eyelidCells.map((cell) => cropRgba(atlas, cell));
    this.mouthOrigin = { x: Math.round(geometry.mouthX + mouth.x), y: Math.round(geometry.mouthY + mouth.y) };
    this.eyelidOrigin = { x: Math.round(geometry.leftEyeX + eyelid.x), y: Math.round(geometry.eyeY + eyelid.y) };
    return atlas;
  }

  /** Each brow pose as the head region around the brows, drawn with the head's own SVG in that pose. */
  private async renderBrows(params: FaceParams, geometry: FaceGeometry): Promise<void> {
    const box = browBox(geometry);
    const left = Math.round(geometry.leftEyeX + box.x);
    const top = Math.round(geometry.eyeY + box.y);
    const crop = (svg: string) =>
      svg.replace(
        /^<svg [^>]*>/u,
        `<svg xmlns="http://www.w3.org/2000/svg" width="${box.width}" height="${box.height}" viewBox="${left} ${top} ${box.width} ${box.height}">`,
      );
    this.browOrigin = { x: left, y: top };
    const poses = Array.from({ length: BROW_RAISE_STEPS * BROW_KNIT_STEPS }, (_, step) => step);
    this.browCells = await Promise.all(
      poses.map((step) => rasteriseSvg(crop(headSvg(params, geometry, browPoseOf(step))))),
    );
  }

  private bodyRise(step: number): number {
    return Math.round((step / (BREATH_STEPS - 1)) * BREATH_RISE_PX_AT_512 * ((this.geometry?.height ?? 512) / 512));
  }

  /** The head follows the shoulders part of the way. */
  protected headRise(step: number): number {
    return Math.round(this.bodyRise(step) * 0.75);
  }

  private breathStep(request: FrameRequest): number {
    return breathStepAt(request.frameIdx, this.fps, request.motion);
  }

  render(request: FrameRequest, target?: SharedArrayBuffer): I420Frame {
    if (!this.geometry || this.bases.length === 0) throw new Error('drawn renderer used before prepare');
    const step = this.breathStep(request);
    // rt's head is baked into its bases; a listening nod or a thinking glance moves it as rt_head's layer instead.
    const layered = this.movesHead || (attentionMovesHead(request.attention) && motionScale(request.motion) > 0);
    const base = layered ? this.bodyBases[step] : this.bases[step];
    const frame = frameFromBase(base, target);
    const expression = drawnExpressionSteps(request);
    const mouthKey = expression.curve * MOUTH_SHAPES + this.mouthKey(request);
    const brows = expression.brows;
    const blink = blinkStepAt(request.frameIdx, this.fps);
    if (!layered) {
      const lift = -this.headRise(step);
      if (brows > 0)
        blendPatch(
          frame,
          this.sprite(this.browPatches, brows, () => this.browCells[brows], this.browOrigin),
          0,
          lift,
        );
      // Cells are asked for inline (an anonymous arrow): a closure bound to a name is wrapped by tsx's keepNames helper
      // (`__name`, a defineProperty) on every frame, ~2–3 µs each (docs/performance.md, issue 43).
      blendPatch(
        frame,
        this.sprite(this.mouthPatches, mouthKey, () => this.curvedMouth(mouthKey), this.mouthOrigin),
        0,
        lift,
      );
      if (blink > 0)
        blendPatch(
          frame,
          this.sprite(this.eyelidPatches, blink, () => this.eyelidCells[blink], this.eyelidOrigin),
          0,
          lift,
        );
      return frame;
    }
    const head = cloneLayer(this.headLayer!);
    if (brows > 0)
      blendLayerInto(
        head,
        this.layer(this.browLayers, brows, () => this.browCells[brows], this.browOrigin),
      );
    blendLayerInto(
      head,
      this.layer(this.mouthLayers, mouthKey, () => this.curvedMouth(mouthKey), this.mouthOrigin),
    );
    if (blink > 0)
      blendLayerInto(
        head,
        this.layer(this.eyelidLayers, blink, () => this.eyelidCells[blink], this.eyelidOrigin),
      );
    const own = this.headMotion(request);
    const g = this.geometry;
    const attention = attentionHeadMotion(request.attention, g.height);
    const scale = motionScale(request.motion);
    compositeTransformed(
      frame,
      head,
      (own.tilt + attention.tilt) * scale,
      g.pivotX,
      g.pivotY,
      ((own.shift ?? 0) + attention.shift) * scale,
      (own.nod + attention.nod) * scale - this.headRise(step),
    );
    return frame;
  }

  private mouthKey(request: FrameRequest): number {
    return drawnMouthKey(request);
  }

  /** The mouth sprite for a key of curve step × viseme; bent on first use (the neutral curve is the atlas cell). */
  private curvedMouth(key: number): RgbaImage {
    const cell = this.mouthCells[key % MOUTH_SHAPES];
    const curve = (Math.floor(key / MOUTH_SHAPES) / (CURVE_STEPS - 1)) * 2 - 1;
    if (curve === 0) return cell;
    const g = this.geometry!;
    const box = mouthBox(g);
    return curveMouth(cell, { x: -box.x, y: -box.y }, g.mouthHalfWidth, curve);
  }

  private sprite(
    cache: Map<number, I420Patch>,
    key: number,
    cell: () => RgbaImage,
    origin: { x: number; y: number },
  ): I420Patch {
    let patch = cache.get(key);
    if (!patch) {
      const image = cell();
      const g = this.geometry!;
      // Odd origins would misalign chroma: place the sprite on a frame-sized canvas and cut on even bounds.
      patch = patchFromRgba(
        spriteAt(image, origin.x, origin.y, g.width, g.height),
        origin.x,
        origin.y,
        image.width + 1,
        image.height + 1,
      );
      cache.set(key, patch);
    }
    return patch;
  }

  private layer(
    cache: Map<number, YuvaLayer>,
    key: number,
    cell: () => RgbaImage,
    origin: { x: number; y: number },
  ): YuvaLayer {
    let layer = cache.get(key);
    if (!layer) {
      const image = cell();
      layer = yuvaFromRgba(image, 0, 0, image.width, image.height);
      layer.x = origin.x;
      layer.y = origin.y;
      cache.set(key, layer);
    }
    return layer;
  }
}

function alphaBounds(image: RgbaImage): { x: number; y: number; width: number; height: number } {
  let minX = image.width,
    minY = image.height,
    maxX = -1,
    maxY = -1;
  for (let y = 0; y < image.height; y++) {
    for (let x = 0; x < image.width; x++) {
      if (image.data[(y * image.width + x) * 4 + 3] === 0) continue;
      if (x < minX) minX = x;
      if (x > maxX) maxX = x;
      if (y < minY) minY = y;
      if (y > maxY) maxY = y;
    }
  }
  if (maxX < 0) return { x: 0, y: 0, width: 1, height: 1 };
  // One transparent pixel of margin so bilinear sampling fades out at the border.
  const x = Math.max(0, minX - 1);
  const y = Math.max(0, minY - 1);
  return { x, y, width: Math.min(image.width, maxX + 2) - x, height: Math.min(image.height, maxY + 2) - y };
}
