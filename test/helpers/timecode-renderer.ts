import type { FrameRequest, I420Frame } from '../../actors/render/types.ts';

const BITS = 16;
const ROW_HEIGHT = 16;
const DARK = 16;
const BRIGHT = 235;
/** Audio level (0..1 ≈ -60..0 dBFS) above which the frame is flagged voiced. */
const VOICED_LEVEL = 0.3;

/**
 * A tiny FrameRenderer for recording tests that do not need the render pool: frame index as 16 black/white
 * blocks (top row) and whether the audio under the frame is voiced (level) as a block below, coarse enough to survive H.264.
 * Renders asynchronously (next macrotask) like a worker pool would.
 */
export class TimecodeTestRenderer {
  closed = false;
  constructor(
    readonly width = 128,
    readonly height = 96,
    readonly fps = 25,
  ) {}

  async render(requests: FrameRequest[], signal?: AbortSignal): Promise<I420Frame[]> {
    await new Promise((resolve) => setImmediate(resolve));
    signal?.throwIfAborted();
    return requests.map((request) => this.draw(request));
  }

  close(): void {
    this.closed = true;
  }

  private draw(request: FrameRequest): I420Frame {
    const { width, height } = this;
    const data = new Uint8Array((width * height * 3) / 2).fill(128);
    data.fill(DARK, 0, width * height);
    stampFrameIndex(data, width, request.frameIdx, 0);
    fillBlock(data, width, 0, ROW_HEIGHT * 2, width / 2, ROW_HEIGHT, request.level > VOICED_LEVEL ? BRIGHT : DARK);
    return { width, height, data };
  }
}

export function decodeTestTimecode(y: Uint8Array, width: number): { frameIdx: number; voiced: boolean } {
  return {
    frameIdx: readFrameIndex(y, width, 0),
    voiced: y[(ROW_HEIGHT * 2 + ROW_HEIGHT / 2) * width + width / 4] > 128,
  };
}

/** Rows a frame index takes (`stampFrameIndex`): one macroblock row. */
export const FRAME_INDEX_ROWS = ROW_HEIGHT;

/**
 * Writes `frameIdx` into the luma rows `top`…`top + FRAME_INDEX_ROWS` of an I420 frame `width` wide, as 16 black or
 * white blocks across the width: coarse enough to survive H.264 and VP8, so a receiver knows which frame it decoded.
 */
export function stampFrameIndex(data: Uint8Array, width: number, frameIdx: number, top: number): void {
  const blockWidth = width / BITS;
  for (let bit = 0; bit < BITS; bit++)
    fillBlock(data, width, bit * blockWidth, top, blockWidth, ROW_HEIGHT, (frameIdx >> bit) & 1 ? BRIGHT : DARK);
}

/** The frame index `stampFrameIndex` wrote at row `top` of a decoded luma plane. */
export function readFrameIndex(y: Uint8Array, width: number, top: number): number {
  const blockWidth = width / BITS;
  let frameIdx = 0;
  for (let bit = 0; bit < BITS; bit++)
    if (y[(top + ROW_HEIGHT / 2) * width + bit * blockWidth + blockWidth / 2] > 128) frameIdx |= 1 << bit;
  return frameIdx;
}

function fillBlock(data: Uint8Array, width: number, x0: number, y0: number, w: number, h: number, value: number) {
  for (let y = y0; y < y0 + h; y++) data.fill(value, y * width + x0, y * width + x0 + w);
}
