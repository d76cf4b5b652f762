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
  private lipLines: LipLines | null = null;

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
      this.lipLines = lipLinesOf(animation);
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

  /**
   * One mouth pose as a patch. The jaw opens at the inner lip line: rows above the upper inner lip stay,
   * the lower lip and chin move down by a drop that is largest mid-mouth and zero at the corners (so the
   * corners never tear), the band between the upper teeth and the lowered lip becomes a soft dark cavity,
   * and the chin stretch fades out towards the bottom of the box.
   */
  private buildPatch(open: number, wide: number, round: number): Uint8Array {
    const base = this.base!;
    const box = this.box!;
    const lips = this.lipLines!;
    const { x: cx, y: cy } = this.animation!.mouth_center;
    const w = this.animation!.mouth_width;
    const bw = box.x1 - box.x0;
    const bh = box.y1 - box.y0;
    const patch = new Uint8Array(bw * bh * 4);
    const maxDrop = open * w * 0.24;
    const halfSpan = Math.max(2, (lips.right - lips.left) / 2);
    const mid = (lips.right + lips.left) / 2;
    const squeeze = (round - wide * 0.5) * 0.14;
    const cavityDark: Rgb = [48, 14, 20];
    const cavityWarm: Rgb = [112, 42, 50];
    for (let px = 0; px < bw; px++) {
      const x = box.x0 + px;
      const u = (x - mid) / halfSpan;
      // Drop across the mouth: an ellipse profile between the corners, a wide cosine skirt for the chin.
      const lipProfile = Math.abs(u) < 1 ? Math.sqrt(1 - u * u) : 0;
      const skirt = Math.abs(u) < 2 ? 0.5 + 0.5 * Math.cos((Math.PI * Math.abs(u)) / 2) : 0;
      const yU = lips.upperAt(x);
      const yL = Math.max(yU, lips.lowerAt(x));
      const teeth = (yL - yU) * 0.55;
      const dLip = maxDrop * lipProfile;
      for (let py = 0; py < bh; py++) {
        const y = box.y0 + py;
        const o = (py * bw + px) * 4;
        // Rounding narrows and spreading widens the mouth near the lip line.
        const nearLips = Math.max(0, 1 - Math.abs(y - cy) / (w * 0.4)) * skirt;
        const sx = x - (x - cx) * squeeze * nearLips;
        if (y < yU + teeth || maxDrop < 0.25) {
          bilinear(base, this.width, this.height, sx, y, patch, o);
        } else if (y < yL - (yL - yU - teeth) + dLip && dLip >= 0.25 && y < yU + teeth + dLip) {
          // The opened cavity: darker in the middle, warmer towards the lips, with a soft top edge.
          const depth = (y - (yU + teeth)) / Math.max(1, dLip);
          const shade = mix(cavityWarm, cavityDark, Math.min(1, Math.sin(Math.PI * Math.min(1, depth)) * 1.4));
          const edge = Math.min(1, (y - (yU + teeth)) / 1.5);
          bilinear(base, this.width, this.height, sx, yU + teeth, patch, o);
          for (let c = 0; c < 3; c++) patch[o + c] += (shade[c] - patch[o + c]) * edge;
          patch[o + 3] = 255;
        } else {
          // Lower lip and chin: shifted down, the shift fading to zero at the bottom of the box.
          const below = Math.max(0, y - yL);
          const span = Math.max(1, box.y1 - yL);
          const fade = Math.max(0, 1 - below / span);
          const d = maxDrop * (lipProfile + (skirt - lipProfile) * Math.min(1, below / (w * 0.25))) * fade;
          bilinear(base, this.width, this.height, sx, y - Math.max(d, 0), patch, o);
        }
      }
    }
    // Feather the patch edge into the untouched face so no seam shows.
    for (let py = 0; py < bh; py++) {
      for (let px = 0; px < bw; px++) {
        const edge = Math.min(px, py, bw - 1 - px, bh - 1 - py);
        const alpha = Math.min(1, edge / Math.max(2, Math.min(bw, bh) * 0.12));
        patch[(py * bw + px) * 4 + 3] = Math.round(alpha * 255);
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

interface LipLines {
  left: number;
  right: number;
  upperAt(x: number): number;
  lowerAt(x: number): number;
}

/** Upper and lower inner-lip curves (landmarks 60–64 and 64–67,60), or a flat line from the mouth centre. */
function lipLinesOf(animation: MouthAnimation): LipLines {
  const inner = animation.inner_lip;
  const { x: cx, y: cy } = animation.mouth_center;
  const half = animation.mouth_width / 2;
  if (!Array.isArray(inner) || inner.length < 8) {
    return { left: cx - half, right: cx + half, upperAt: () => cy - 1, lowerAt: () => cy + 1 };
  }
  const upper = inner.slice(0, 5).map((p) => ({ x: p.x, y: p.y })).sort((a, b) => a.x - b.x);
  const lower = [inner[4], inner[5], inner[6], inner[7], inner[0]].map((p) => ({ x: p.x, y: p.y })).sort((a, b) => a.x - b.x);
  const at = (points: Array<{ x: number; y: number }>) => (x: number) => {
    if (x <= points[0].x) return points[0].y;
    for (let i = 1; i < points.length; i++) {
      if (x <= points[i].x) {
        const t = (x - points[i - 1].x) / Math.max(1e-6, points[i].x - points[i - 1].x);
        return points[i - 1].y + (points[i].y - points[i - 1].y) * t;
      }
    }
    return points[points.length - 1].y;
  };
  return { left: upper[0].x, right: upper[upper.length - 1].x, upperAt: at(upper), lowerAt: at(lower) };
}
