/**
 * Mock renderer: a deterministic test card for any avatar. The avatar's still frame with the frame
 * index, pts, an audio level bar, a mouth-open bar and a machine-readable timecode strip
 * (`../timecode.ts`) that survives lossy video coding.
 */
import { frameFromBase } from '../frame-buffers.ts';
import type { AvatarSource, FrameRequest, I420Frame, Renderer } from '../types.ts';
import { rgbaToI420 } from '../i420.ts';
import { loadBundleFrame } from '../image.ts';
import { encodeTimecode, timecodeGeometry } from '../timecode.ts';
import { drawText, fillRect, textWidth, BLACK, WHITE, type Yuv } from '../draw-i420.ts';

const LEVEL_GREEN: Yuv = { y: 145, u: 54, v: 34 };
const SPEAKING_RED: Yuv = { y: 82, u: 90, v: 240 };
const MOUTH_BLUE: Yuv = { y: 41, u: 240, v: 110 };

export class MockRenderer implements Renderer {
  private base: I420Frame | null = null;

  async prepare(avatar: AvatarSource): Promise<void> {
    const image = await loadBundleFrame(avatar);
    this.base = rgbaToI420(image.data, image.width, image.height);
  }

  render(request: FrameRequest, target?: SharedArrayBuffer): I420Frame {
    if (!this.base) throw new Error('MockRenderer.render called before prepare');
    const frame = frameFromBase(this.base, target);
    const { width, height } = frame;
    encodeTimecode(frame, request.frameIdx, request.ptsMs);

    const scale = Math.max(2, Math.floor(width / 128));
    const lineHeight = 7 * scale;
    const top = timecodeGeometry(width).stripHeight + scale;
    const lines = [`#${request.frameIdx}`, `${Math.round(request.ptsMs)}ms`];
    lines.forEach((line, i) => {
      const y = top + i * lineHeight;
      fillRect(frame, 0, y - scale, textWidth(line, scale) + 2 * scale, lineHeight, BLACK);
      drawText(frame, line, scale, y, scale, WHITE);
    });

    // Bottom: level bar (green) and mouth-open bar (blue), full width = 1.0.
    const barHeight = Math.max(6, Math.floor(height / 40));
    const levelY = height - 2 * barHeight;
    const mouthY = height - barHeight;
    fillRect(frame, 0, levelY, width, 2 * barHeight, BLACK);
    fillRect(frame, 0, levelY, Math.round(clamp01(request.level) * width), barHeight, LEVEL_GREEN);
    fillRect(frame, 0, mouthY, Math.round(clamp01(request.mouth.open) * width), barHeight, MOUTH_BLUE);
    if (request.speaking) fillRect(frame, width - 4 * scale, top - scale, 3 * scale, 3 * scale, SPEAKING_RED);
    return frame;
  }
}

function clamp01(value: number): number {
  return Number.isFinite(value) ? Math.min(1, Math.max(0, value)) : 0;
}
