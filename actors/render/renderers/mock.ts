import { loadBaseRgba } from '../base-image.ts';
import { rgbaToI420 } from '../i420.ts';
import { Canvas } from '../raster.ts';
import { encodeTimecode, timecodeGeometry } from '../timecode.ts';
import type { AvatarSource, FrameRequest, I420Frame, Renderer } from '../types.ts';

/**
 * The deterministic test card: the avatar image, the frame index and pts in digits, an audio level bar,
 * and a pixel timecode (`timecode.ts`) so a receiver can measure A/V sync. Renders any avatar.
 */
export class MockRenderer implements Renderer {
  private base: Uint8Array | null = null;
  private width = 0;
  private height = 0;

  async prepare(avatar: AvatarSource): Promise<void> {
    this.width = avatar.manifest.width;
    this.height = avatar.manifest.height;
    this.base = await loadBaseRgba(avatar);
  }

  render(request: FrameRequest): I420Frame {
    if (!this.base) throw new Error('mock renderer not prepared');
    const canvas = new Canvas(this.width, this.height, new Uint8Array(this.base));
    const scale = Math.max(1, Math.floor(this.width / 96));
    const { block } = timecodeGeometry(this.width);
    const textY = block * 2 + scale * 2;
    canvas.rect(0, textY - scale, this.width, scale * 14, [0, 0, 0], 0.6);
    canvas.text(scale * 2, textY, `#${request.frameIdx}`, scale, [255, 255, 255]);
    canvas.text(scale * 2, textY + scale * 7, `${(request.ptsMs / 1000).toFixed(2)}`, scale, [255, 255, 0]);
    // Level bar along the bottom edge: its length is the audio level under this frame.
    const barHeight = Math.max(4, Math.floor(this.height / 24));
    canvas.rect(0, this.height - barHeight, this.width, barHeight, [20, 20, 20]);
    canvas.rect(0, this.height - barHeight, Math.round(this.width * Math.min(1, request.level)), barHeight, request.speaking ? [0, 220, 90] : [120, 120, 120]);
    const frame = rgbaToI420(canvas.data, this.width, this.height);
    encodeTimecode(frame, request.frameIdx, request.ptsMs);
    return frame;
  }
}
