import { loadBaseRgba } from '../base-image.ts';
import { rgbaToI420 } from '../i420.ts';
import { Canvas, mix, type Rgb } from '../raster.ts';
import type { AvatarSource, FrameRequest, I420Frame, MouthAnimation, MouthPose, Renderer } from '../types.ts';
import { blinkAmount } from './face-params.ts';

/** Pose quantisation of the mouth-patch cache: 8 openings × 3 spreads × 3 roundings = 72 patches at most. */
const OPEN_STEPS = 8;
const SHAPE_STEPS = 3;
const BLINK_EVERY_S = 4.5;

interface MouthBox {
  x0: number;
  y0: number;
  x1: number;
  y1: number;
}

/**
 * `lipsync`: animates the mouth of a photo avatar from `metadata.animation`. The lower face below the lip
 * line is warped down with the jaw, a dark inner mouth (teeth at wide openings) opens between the lips,
 * and the patch is feathered back into the face. Patches are rendered once per quantised pose and cached,
 * so a frame costs a copy, a patch paste and the I420 conversion. Without `animation` it serves the still.
 */
export class LipsyncRenderer implements Renderer {
  private base: Uint8Array | null = null;
  private width = 0;
  private height = 0;
  private fps = 25;
  private animation: MouthAnimation | null = null;
  private box: MouthBox | null = null;
  private skin: Rgb = [200, 160, 140];
  private readonly patches = new Map<string, Uint8Array>();

  async prepare(avatar: AvatarSource): Promise<void> {
    this.width = avatar.manifest.width;
    this.height = avatar.manifest.height;
    this.fps = avatar.manifest.fps;
    this.base = await loadBaseRgba(avatar);
    const animation = avatar.manifest.metadata.animation;
    if (animation && animation.mouth_width > 2) {
      this.animation = animation;
      const { x, y } = animation.mouth_center;
      const w = animation.mouth_width;
      this.box = {
        x0: clampInt(x - w * 0.95, 0, this.width),
        x1: clampInt(x + w * 0.95, 0, this.width),
        y0: clampInt(y - w * 0.45, 0, this.height),
        y1: clampInt(y + w * 1.1, 0, this.height),
      };
      this.skin = this.sample(x, y - w * 0.55, Math.max(2, w * 0.08));
    }
  }

  get animated(): boolean {
    return this.animation !== null;
  }

  render(request: FrameRequest): I420Frame {
    if (!this.base) throw new Error('lipsync renderer not prepared');
    const frame = new Uint8Array(this.base);
    if (this.animation && this.box) {
      this.paste(frame, this.patchFor(request.mouth));
      const blink = blinkAmount(request.frameIdx, this.fps, BLINK_EVERY_S);
      if (blink > 0) this.drawBlink(new Canvas(this.width, this.height, frame), blink);
    }
    return rgbaToI420(frame, this.width, this.height);
  }

  private patchFor(pose: MouthPose): Uint8Array {
    const open = Math.round(clamp01(pose.open) * (OPEN_STEPS - 1));
    const wide = Math.round(clamp01(pose.wide) * (SHAPE_STEPS - 1));
    const round = Math.round(clamp01(pose.round) * (SHAPE_STEPS - 1));
    const key = `${open}:${wide}:${round}`;
    let patch = this.patches.get(key);
    if (!patch) {
      patch = this.buildPatch(open / (OPEN_STEPS - 1), wide / (SHAPE_STEPS - 1), round / (SHAPE_STEPS - 1));
      this.patches.set(key, patch);
    }
    return patch;
  }

  private buildPatch(open: number, wide: number, round: number): Uint8Array {
    const base = this.base!;
    const box = this.box!;
    const a = this.animation!;
    const { x: cx, y: cy } = a.mouth_center;
    const w = a.mouth_width;
    const bw = box.x1 - box.x0;
    const bh = box.y1 - box.y0;
    const patch = new Uint8Array(bw * bh * 4);
    const drop = open * w * 0.32;
    const halfWidth = (w / 2) * (1 + 0.15 * wide - 0.3 * round);
    const squeeze = (round - wide * 0.5) * 0.12;
    for (let py = 0; py < bh; py++) {
      const y = box.y0 + py;
      for (let px = 0; px < bw; px++) {
        const x = box.x0 + px;
        // Jaw: rows below the lip line move down; the move fades out sideways and towards the box bottom.
        const side = Math.min(1, Math.abs(x - cx) / (w * 0.95));
        const sideWeight = 0.5 + 0.5 * Math.cos(Math.PI * side);
        const below = y > cy ? Math.min(1, (box.y1 - y) / Math.max(1, box.y1 - cy)) : 0;
        const shift = y > cy - 1 ? drop * sideWeight * Math.min(1, 0.3 + below) : 0;
        // Lip spread/rounding: pull the mouth corners horizontally towards or away from the centre.
        const vertical = Math.max(0, 1 - Math.abs(y - cy) / (w * 0.35));
        const sx = x + (x - cx) * squeeze * vertical * sideWeight;
        const sy = y - shift;
        const o = (py * bw + px) * 4;
        bilinear(base, this.width, this.height, sx, sy, patch, o);
      }
    }
    const canvas = new Canvas(bw, bh, patch);
    if (drop > 0.8) {
      const mx = cx - box.x0;
      const my = cy - box.y0 + drop * 0.45;
      canvas.ellipse(mx, my, halfWidth * 0.9, drop * 0.55, [52, 18, 24], 0.95, 1.5);
      if (open > 0.5) canvas.ellipse(mx, my - drop * 0.38, halfWidth * 0.62, drop * 0.14, [232, 228, 220], 0.85, 1.2);
    }
    // Feather the patch edge into the untouched face so no seam shows.
    for (let py = 0; py < bh; py++) {
      for (let px = 0; px < bw; px++) {
        const edge = Math.min(px, py, bw - 1 - px, bh - 1 - py);
        const alpha = Math.min(1, edge / Math.max(2, Math.min(bw, bh) * 0.12));
        const o = (py * bw + px) * 4;
        patch[o + 3] = Math.round(alpha * 255);
      }
    }
    return patch;
  }

  private paste(frame: Uint8Array, patch: Uint8Array): void {
    const box = this.box!;
    const bw = box.x1 - box.x0;
    for (let py = 0; py < box.y1 - box.y0; py++) {
      let o = ((box.y0 + py) * this.width + box.x0) * 4;
      let p = py * bw * 4;
      for (let px = 0; px < bw; px++, o += 4, p += 4) {
        const alpha = patch[p + 3];
        if (alpha === 255) {
          frame[o] = patch[p];
          frame[o + 1] = patch[p + 1];
          frame[o + 2] = patch[p + 2];
        } else if (alpha > 0) {
          const t = alpha / 255;
          frame[o] += (patch[p] - frame[o]) * t;
          frame[o + 1] += (patch[p + 1] - frame[o + 1]) * t;
          frame[o + 2] += (patch[p + 2] - frame[o + 2]) * t;
        }
      }
    }
  }

  private drawBlink(canvas: Canvas, blink: number): void {
    const a = this.animation!;
    const eyeWidth = Math.max(6, Math.hypot(a.right_eye.x - a.left_eye.x, a.right_eye.y - a.left_eye.y) * 0.42);
    for (const eye of [a.left_eye, a.right_eye]) {
      const lid = this.sample(eye.x, eye.y - eyeWidth * 0.55, Math.max(1.5, eyeWidth * 0.1));
      canvas.ellipse(eye.x, eye.y, eyeWidth * 0.55, eyeWidth * 0.32 * blink, lid, 0.95, 1.5);
      canvas.ellipse(eye.x, eye.y + eyeWidth * 0.3 * blink * 0.9, eyeWidth * 0.5, Math.max(0.6, eyeWidth * 0.04), mix(lid, [0, 0, 0], 0.45), 0.8 * blink, 1);
    }
  }

  private sample(x: number, y: number, radius: number): Rgb {
    const base = this.base!;
    let r = 0;
    let g = 0;
    let b = 0;
    let n = 0;
    for (let yy = Math.round(y - radius); yy <= Math.round(y + radius); yy++) {
      for (let xx = Math.round(x - radius); xx <= Math.round(x + radius); xx++) {
        if (xx < 0 || yy < 0 || xx >= this.width || yy >= this.height) continue;
        const o = (yy * this.width + xx) * 4;
        r += base[o];
        g += base[o + 1];
        b += base[o + 2];
        n++;
      }
    }
    return n ? [r / n, g / n, b / n] : this.skin;
  }
}

function bilinear(src: Uint8Array, width: number, height: number, x: number, y: number, out: Uint8Array, o: number): void {
  const x0 = Math.max(0, Math.min(width - 1, Math.floor(x)));
  const y0 = Math.max(0, Math.min(height - 1, Math.floor(y)));
  const x1 = Math.min(width - 1, x0 + 1);
  const y1 = Math.min(height - 1, y0 + 1);
  const fx = Math.max(0, Math.min(1, x - x0));
  const fy = Math.max(0, Math.min(1, y - y0));
  for (let c = 0; c < 3; c++) {
    const top = src[(y0 * width + x0) * 4 + c] * (1 - fx) + src[(y0 * width + x1) * 4 + c] * fx;
    const bottom = src[(y1 * width + x0) * 4 + c] * (1 - fx) + src[(y1 * width + x1) * 4 + c] * fx;
    out[o + c] = top * (1 - fy) + bottom * fy;
  }
  out[o + 3] = 255;
}

const clamp01 = (v: number) => (v < 0 ? 0 : v > 1 ? 1 : v);
const clampInt = (v: number, lo: number, hi: number) => Math.max(lo, Math.min(hi, Math.round(v)));
