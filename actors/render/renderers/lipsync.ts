/**
 * Photo lip-sync renderer: animates the mouth of a still portrait from `metadata.animation`.
 *
 * Per pose (quantised to OPEN_STEPS x SHAPE_STEPS x SHAPE_STEPS) the mouth region is warped once —
 * chin and lower lip dropped by `open`, lips spread by `wide` / narrowed by `round` — a dark inner
 * mouth with a hint of upper teeth is painted into the gap, and the result is cached as an opaque
 * I420 patch whose border equals the untouched photo (the warp field fades to zero there). Blinks
 * (eyelid patches per closure step) and an idle sub-pixel head sway (patches per quantised offset)
 * are cached the same way, so a frame is a copy of the base I420 plus one or two small patches.
 * Without `animation` the renderer serves the still image.
 */
import type { AvatarSource, FrameRequest, I420Frame, MouthAnimation, Renderer } from '../types.ts';
import { rgbaToI420 } from '../i420.ts';
import { loadBundleFrame, type RgbaImage } from '../image.ts';
import { blendPatch, patchFromRgba, type I420Patch } from '../patch.ts';
import { blinkClosure, oscillate, quantise, smoothstep } from '../idle-motion.ts';

export const OPEN_STEPS = 8;
export const SHAPE_STEPS = 3;
const BLINK_STEPS = 4;
/** Sway amplitude in px: visible as life, far below anything that looks like camera shake. */
const SWAY_AMPLITUDE_X = 0.6;
const SWAY_AMPLITUDE_Y = 0.4;
const SWAY_STEP_PX = 0.2;

/** Region geometry in units of mouth width, relative to the mouth centre. */
const REGION = { left: -1.35, right: 1.35, top: -0.75, bottom: 1.7 };
/** Maximum jaw drop as a fraction of mouth width. */
const MAX_JAW_DROP = 0.34;

interface Rgb {
  r: number;
  g: number;
  b: number;
}

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

export class LipsyncRenderer implements Renderer {
  private source: RgbaImage | null = null;
  private base: I420Frame | null = null;
  private animation: MouthAnimation | null = null;
  private fps = 25;
  private readonly mouthPatches = new Map<number, I420Patch>();
  private readonly blinkPatches = new Map<number, I420Patch[]>();
  private readonly swayPatches = new Map<number, I420Patch>();

  async prepare(avatar: AvatarSource): Promise<void> {
    this.source = await loadBundleFrame(avatar);
    this.base = rgbaToI420(this.source.data, this.source.width, this.source.height);
    this.fps = avatar.manifest.fps > 0 ? avatar.manifest.fps : 25;
    this.animation = usableAnimation(avatar.manifest.metadata.animation, avatar.manifest.width, avatar.manifest.height);
    this.mouthPatches.clear();
    this.blinkPatches.clear();
    this.swayPatches.clear();
    if (!this.animation) return;
    // Warm the cache for the poses speech hits most (jaw steps at neutral shape); the rest fill lazily.
    for (let open = 1; open < OPEN_STEPS; open++) this.mouthPatch(open, 0, 0);
    for (let step = 1; step < BLINK_STEPS; step++) this.blinkPatch(step);
  }

  /** Whether the avatar has usable mouth animation (otherwise frames are the still image). */
  get animated(): boolean {
    return this.animation !== null;
  }

  render(request: FrameRequest): I420Frame {
    if (!this.base) throw new Error('LipsyncRenderer.render called before prepare');
    const frame: I420Frame = { width: this.base.width, height: this.base.height, data: this.base.data.slice() };
    if (!this.animation) return frame;
    const open = quantise(request.mouth.open, OPEN_STEPS);
    const wide = quantise(request.mouth.wide, SHAPE_STEPS);
    const round = quantise(request.mouth.round, SHAPE_STEPS);
    if (open > 0 || wide > 0 || round > 0) {
      blendPatch(frame, this.mouthPatch(open, wide, round));
    } else if (!request.speaking) {
      const swayX = Math.round((SWAY_AMPLITUDE_X * oscillate(request.frameIdx, this.fps, 5.3)) / SWAY_STEP_PX);
      const swayY = Math.round((SWAY_AMPLITUDE_Y * oscillate(request.frameIdx, this.fps, 7.1, 0.3)) / SWAY_STEP_PX);
      if (swayX !== 0 || swayY !== 0) blendPatch(frame, this.swayPatch(swayX, swayY));
    }
    const blink = Math.round(blinkClosure(request.frameIdx, this.fps) * (BLINK_STEPS - 1));
    if (blink > 0) for (const patch of this.blinkPatch(blink)) blendPatch(frame, patch);
    return frame;
  }

  private mouthPatch(open: number, wide: number, round: number): I420Patch {
    const key = (open * SHAPE_STEPS + wide) * SHAPE_STEPS + round;
    let patch = this.mouthPatches.get(key);
    if (!patch) {
      patch = this.buildMouthPatch(open / (OPEN_STEPS - 1), wide / (SHAPE_STEPS - 1), round / (SHAPE_STEPS - 1));
      this.mouthPatches.set(key, patch);
    }
    return patch;
  }

  private buildMouthPatch(open: number, wide: number, round: number): I420Patch {
    const src = this.source!;
    const anim = this.animation!;
    const { x: cx, y: cy } = anim.mouth_center;
    const mw = anim.mouth_width;
    const box = clampBox(cx + REGION.left * mw, cy + REGION.top * mw, cx + REGION.right * mw, cy + REGION.bottom * mw, src.width, src.height);
    const out: RgbaImage = { width: src.width, height: src.height, data: new Uint8Array(src.data.length) };
    const jawDrop = open * MAX_JAW_DROP * mw;
    const upperLift = 0.12 * jawDrop;
    const spread = 0.14 * wide - 0.2 * round;
    // Inner-mouth opening (dest coordinates).
    const openTop = cy - upperLift;
    const openBottom = cy + 0.78 * jawDrop;
    const openMid = (openTop + openBottom) / 2;
    const halfHeight = (openBottom - openTop) / 2 + 0.2 * round * jawDrop;
    const halfWidth = 0.5 * mw * 0.92 * (1 + spread - 0.25 * round);
    const teethDepth = Math.min(0.11 * mw, halfHeight * 0.55) * smoothstep(0.3, 0.6, open);
    const rgb: Rgb = { r: 0, g: 0, b: 0 };

    for (let y = box.y; y < box.y + box.height; y++) {
      for (let x = box.x; x < box.x + box.width; x++) {
        const u = (x - cx) / mw;
        const v = (y - cy) / mw;
        // Horizontal window: flat over the mouth, fading out towards the cheeks.
        const wx = 1 - smoothstep(0.45, 1.25, Math.abs(u));
        // Jaw and lower lip move down as one block; upper lip rises a little. Inside the mouth width the
        // lips part at the lip line (the gap is painted over below); beyond the corners the transition is
        // spread out so the skin stretches instead of tearing.
        const corner = smoothstep(0.3, 0.58, Math.abs(u));
        const split = smoothstep(-0.02 - 0.35 * corner, 0.08 + 0.55 * corner, v);
        const lower = split * (1 - smoothstep(1.0, 1.6, v));
        const upper = (1 - split) * (1 - smoothstep(0.2, 0.65, -v));
        const dy = wx * (jawDrop * lower - upperLift * upper);
        const lipZone = (1 - smoothstep(0.25, 0.5, Math.abs(v))) * (1 - smoothstep(0.5, 0.9, Math.abs(u)));
        const dx = (x - cx) * (1 - 1 / (1 + spread)) * lipZone;
        sampleBilinear(src, x - dx, y - dy, rgb);
        let { r, g, b } = rgb;

        // Inner mouth: soft-edged lens between the lips (pointed at the corners), darker towards the throat.
        if (jawDrop > 0.5 && halfHeight > 0.3) {
          const nx = (x - cx) / halfWidth;
          const profile = Math.abs(nx) < 1 ? Math.pow(1 - nx * nx, 0.7) : 0;
          const edgePx = profile * halfHeight - Math.abs(y - openMid);
          const alpha = profile > 0 ? Math.min(1, Math.max(0, edgePx / 1.2 + 0.5)) * (1 - smoothstep(0.9, 1, Math.abs(nx))) : 0;
          if (alpha > 0) {
            const depth = Math.min(1, Math.max(0, edgePx / (halfHeight + 0.01)));
            let ir = mix(96, 40, depth);
            let ig = mix(38, 12, depth);
            let ib = mix(42, 16, depth);
            // Upper teeth: light band hanging from the upper lip, only across the front of the mouth.
            const teethBottom = openMid - profile * halfHeight + teethDepth;
            if (teethDepth > 0.5 && y < teethBottom + 1 && Math.abs(nx) < 0.7) {
              const t = Math.min(1, Math.max(0, teethBottom - y + 0.5)) * (1 - smoothstep(0.5, 0.7, Math.abs(nx)));
              ir = mix(ir, 210, t);
              ig = mix(ig, 202, t);
              ib = mix(ib, 192, t);
            }
            r = mix(r, ir, alpha);
            g = mix(g, ig, alpha);
            b = mix(b, ib, alpha);
          }
        }
        const o = (y * src.width + x) * 4;
        out.data[o] = r;
        out.data[o + 1] = g;
        out.data[o + 2] = b;
        out.data[o + 3] = 255;
      }
    }
    return patchFromRgba(out, box.x, box.y, box.width, box.height, true);
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
    const eyeDistance = Math.hypot(anim.right_eye.x - anim.left_eye.x, anim.right_eye.y - anim.left_eye.y) || anim.mouth_width;
    const halfWidth = 0.21 * eyeDistance;
    const halfHeight = 0.1 * eyeDistance;
    const box = clampBox(ex - halfWidth - 2, ey - 2 * halfHeight - 2, ex + halfWidth + 2, ey + 1.5 * halfHeight + 2, src.width, src.height);
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
        const lash = closure > 0.3 ? Math.max(0, 1 - Math.abs(y - lidEdge + 0.7) / 1.4) * (1 - smoothstep(0.65, 1.0, Math.abs(nx))) : 0;
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

  private swayPatch(stepX: number, stepY: number): I420Patch {
    const key = stepX * 1000 + stepY;
    let patch = this.swayPatches.get(key);
    if (!patch) {
      patch = this.buildSway(stepX * SWAY_STEP_PX, stepY * SWAY_STEP_PX);
      this.swayPatches.set(key, patch);
    }
    return patch;
  }

  /** The head (face box grown to include hair) shifted by a sub-pixel offset, feathered to zero at the box edge. */
  private buildSway(shiftX: number, shiftY: number): I420Patch {
    const src = this.source!;
    const face = this.animation!.face_box;
    const centreX = face.x + face.width / 2;
    const centreY = face.y + face.height * 0.4;
    const radiusX = face.width * 0.95;
    const radiusY = face.height * 0.95;
    const box = clampBox(centreX - radiusX, centreY - radiusY, centreX + radiusX, centreY + radiusY, src.width, src.height);
    const out: RgbaImage = { width: src.width, height: src.height, data: new Uint8Array(src.data.length) };
    const rgb: Rgb = { r: 0, g: 0, b: 0 };
    for (let y = box.y; y < box.y + box.height; y++) {
      for (let x = box.x; x < box.x + box.width; x++) {
        const nx = (x - centreX) / radiusX;
        const ny = (y - centreY) / radiusY;
        const weight = 1 - smoothstep(0.6, 1.0, Math.sqrt(nx * nx + ny * ny));
        sampleBilinear(src, x - shiftX * weight, y - shiftY * weight, rgb);
        const o = (y * src.width + x) * 4;
        out.data[o] = rgb.r;
        out.data[o + 1] = rgb.g;
        out.data[o + 2] = rgb.b;
        out.data[o + 3] = 255;
      }
    }
    return patchFromRgba(out, box.x, box.y, box.width, box.height, true);
  }
}

/** Animation is usable when the mouth lies inside the frame and has a plausible width. */
function usableAnimation(animation: MouthAnimation | undefined, width: number, height: number): MouthAnimation | null {
  if (!animation || !animation.mouth_center || !animation.left_eye || !animation.right_eye || !animation.face_box) return null;
  const { x, y } = animation.mouth_center;
  if (!(x > 0 && x < width && y > 0 && y < height)) return null;
  if (!(animation.mouth_width > 4 && animation.mouth_width < width)) return null;
  return animation;
}
