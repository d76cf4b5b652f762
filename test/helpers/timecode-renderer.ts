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
    const blockWidth = width / BITS;
    for (let bit = 0; bit < BITS; bit++) {
      const on = (request.frameIdx >> bit) & 1;
      this.fillBlock(data, bit * blockWidth, 0, blockWidth, ROW_HEIGHT, on ? BRIGHT : DARK);
    }
    this.fillBlock(data, 0, ROW_HEIGHT * 2, width / 2, ROW_HEIGHT, request.level > VOICED_LEVEL ? BRIGHT : DARK);
    return { width, height, data };
  }

  private fillBlock(data: Uint8Array, x0: number, y0: number, w: number, h: number, value: number): void {
    for (let y = y0; y < y0 + h; y++) data.fill(value, y * this.width + x0, y * this.width + x0 + w);
  }
}

export function decodeTestTimecode(y: Uint8Array, width: number): { frameIdx: number; voiced: boolean } {
  const blockWidth = width / BITS;
  const at = (x: number, row: number) => y[row * width + x];
  let frameIdx = 0;
  for (let bit = 0; bit < BITS; bit++)
    if (at(bit * blockWidth + blockWidth / 2, ROW_HEIGHT / 2) > 128) frameIdx |= 1 << bit;
  return { frameIdx, voiced: at(width / 4, ROW_HEIGHT * 2 + ROW_HEIGHT / 2) > 128 };
}
