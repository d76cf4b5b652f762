import { rgbaToI420 } from '../i420.ts';
import { Canvas, mix } from '../raster.ts';
import type { AvatarSource, FrameRequest, I420Frame, Renderer } from '../types.ts';
import { blinkAmount, faceParamsOf, type FaceParams } from './face-params.ts';

/** Breathing: a slow vertical bob of the whole head, in pixels at 512 px height. */
const BREATH_PERIOD_S = 4.2;
const BREATH_AMPLITUDE = 1.5;

/**
 * The real-time family for drawn avatars: the face is drawn from `metadata.face`; the static layers
 * (background, hair, head, nose) are rendered once at prepare, then each frame copies them and draws
 * eyes (with blinks) and the mouth for the pose.
 */
export class RtRenderer implements Renderer {
  protected face!: FaceParams;
  protected width = 0;
  protected height = 0;
  protected fps = 25;
  private layers = new Map<string, Uint8Array>();

  async prepare(avatar: AvatarSource): Promise<void> {
    this.face = faceParamsOf(avatar.manifest.metadata.face);
    this.width = avatar.manifest.width;
    this.height = avatar.manifest.height;
    this.fps = avatar.manifest.fps;
  }

  /** Head offset in pixels for this frame; rt_head overrides it with prosody-driven motion. */
  protected headOffset(request: FrameRequest): { dx: number; dy: number } {
    const t = request.ptsMs / 1000;
    return { dx: 0, dy: Math.sin((2 * Math.PI * t) / BREATH_PERIOD_S) * BREATH_AMPLITUDE * (this.height / 512) };
  }

  render(request: FrameRequest): I420Frame {
    const { dx, dy } = this.headOffset(request);
    // Offsets are quantised to whole pixels so the static layer can be cached per offset.
    const ox = Math.round(dx);
    const oy = Math.round(dy);
    const canvas = new Canvas(this.width, this.height, this.translatedStaticLayer(ox, oy));
    this.drawEyes(canvas, ox, oy, blinkAmount(request.frameIdx, this.fps, this.face.blinkEvery));
    this.drawMouth(canvas, ox, oy, request);
    return rgbaToI420(canvas.data, this.width, this.height);
  }

  /**
   * The static layer moved by whole pixels: row copies of the one cached layer, uncovered edges repeating
   * the nearest edge pixels (background at the sides, the neck at the bottom). Head motion therefore costs
   * a copy, however many distinct offsets it visits.
   */
  private translatedStaticLayer(ox: number, oy: number): Uint8Array {
    const layer = this.staticLayer(0, 0);
    if (ox === 0 && oy === 0) return new Uint8Array(layer);
    const { width, height } = this;
    const out = new Uint8Array(layer.length);
    const rowBytes = width * 4;
    const dx = Math.max(-width + 1, Math.min(width - 1, ox));
    for (let y = 0; y < height; y++) {
      const srcRow = Math.max(0, Math.min(height - 1, y - oy)) * rowBytes;
      const dstRow = y * rowBytes;
      if (dx >= 0) {
        out.set(layer.subarray(srcRow, srcRow + (width - dx) * 4), dstRow + dx * 4);
        for (let x = 0; x < dx; x++) out.set(layer.subarray(srcRow, srcRow + 4), dstRow + x * 4);
      } else {
        out.set(layer.subarray(srcRow - dx * 4, srcRow + rowBytes), dstRow);
        for (let x = width + dx; x < width; x++) out.set(layer.subarray(srcRow + rowBytes - 4, srcRow + rowBytes), dstRow + x * 4);
      }
    }
    return out;
  }

  private staticLayer(ox: number, oy: number): Uint8Array {
    const key = `${ox},${oy}`;
    let layer = this.layers.get(key);
    if (!layer) {
      const c = new Canvas(this.width, this.height);
      const f = this.face;
      const W = this.width;
      const H = this.height;
      c.fill(f.background);
      const cx = W / 2 + ox;
      const cy = H * f.faceY + oy;
      // Hair behind the head, neck, head, ears, fringe, nose.
      c.ellipse(cx, cy - H * 0.05, W * f.faceWidth * 1.12, H * f.faceHeight * 1.08, f.hair, 1, 1.5);
      c.rect(cx - W * 0.08, cy + H * f.faceHeight * 0.7, W * 0.16, H, mix(f.skin, [0, 0, 0], 0.12));
      c.ellipse(cx - W * f.faceWidth, cy, W * 0.04, H * 0.06, mix(f.skin, [0, 0, 0], 0.08), 1, 1.5);
      c.ellipse(cx + W * f.faceWidth, cy, W * 0.04, H * 0.06, mix(f.skin, [0, 0, 0], 0.08), 1, 1.5);
      c.ellipse(cx, cy, W * f.faceWidth, H * f.faceHeight, f.skin, 1, 1.5);
      c.ellipse(cx, cy - H * f.faceHeight * 0.78, W * f.faceWidth * 0.9, H * f.faceHeight * 0.32, f.hair, 1, 1.5);
      c.ellipse(cx, H * (f.eyeY + 0.09) + oy, W * 0.018, H * 0.03, mix(f.skin, [0, 0, 0], 0.15), 1, 1.5);
      // Cheeks.
      c.ellipse(cx - W * 0.16, H * (f.mouthY - 0.04) + oy, W * 0.045, H * 0.03, [230, 120, 120], 0.25, 4);
      c.ellipse(cx + W * 0.16, H * (f.mouthY - 0.04) + oy, W * 0.045, H * 0.03, [230, 120, 120], 0.25, 4);
      layer = c.data;
      // Breathing and head motion take a handful of offsets; bound the cache anyway.
      if (this.layers.size > 64) this.layers.clear();
      this.layers.set(key, layer);
    }
    return layer;
  }

  private drawEyes(c: Canvas, ox: number, oy: number, blink: number): void {
    const f = this.face;
    const W = this.width;
    const H = this.height;
    for (const side of [-1, 1]) {
      const ex = W / 2 + side * W * f.eyeSpacing + ox;
      const ey = H * f.eyeY + oy;
      const r = W * f.eyeSize;
      c.ellipse(ex, ey - r * 1.9, r * 1.4, r * 0.28, mix(f.hair, [0, 0, 0], 0.2), 1, 1);
      const open = 1 - blink;
      if (open > 0.15) {
        c.ellipse(ex, ey, r * 1.25, r * 0.85 * open, [250, 250, 250], 1, 1);
        c.ellipse(ex, ey, r * 0.6, Math.min(r * 0.6, r * 0.85 * open), f.iris, 1, 1);
        c.ellipse(ex, ey, r * 0.28, Math.min(r * 0.28, r * 0.85 * open), [15, 15, 20], 1, 1);
        c.ellipse(ex + r * 0.2, ey - r * 0.2, r * 0.12, r * 0.12 * open, [255, 255, 255], 0.9, 1);
      }
      // Lid line: a skin-coloured lid closes from the top as the blink progresses.
      c.ellipse(ex, ey - r * 0.85 * open, r * 1.3, r * 0.3 + r * 0.9 * blink, f.skin, blink > 0 ? 1 : 0, 1);
      c.ellipse(ex, ey - r * 0.85 * open + r * 0.1, r * 1.25, r * 0.06, mix(f.skin, [0, 0, 0], 0.5), 1, 1);
    }
  }

  private drawMouth(c: Canvas, ox: number, oy: number, request: FrameRequest): void {
    const f = this.face;
    const W = this.width;
    const H = this.height;
    const { open, wide, round } = request.mouth;
    const mx = W / 2 + ox;
    const my = H * f.mouthY + oy;
    const halfWidth = W * f.mouthWidth * (1 + 0.25 * wide - 0.35 * round);
    const gap = H * 0.055 * open;
    // Upper lip, dark opening (teeth hint at large opening), lower lip dropping with the jaw.
    c.ellipse(mx, my - gap * 0.3, halfWidth, H * 0.012 + gap * 0.25, f.lips, 1, 1.2);
    if (gap > 0.5) {
      c.ellipse(mx, my + gap * 0.2, halfWidth * 0.92, gap * 0.75, f.mouthInside, 1, 1);
      if (open > 0.45) c.rect(mx - halfWidth * 0.55, my - gap * 0.45, halfWidth * 1.1, gap * 0.22, [240, 240, 235], 0.9);
    }
    c.ellipse(mx, my + gap * 0.9 + H * 0.006, halfWidth * 0.95, H * 0.014 + gap * 0.12, f.lips, 1, 1.2);
  }
}
