/** Minimal RGBA drawing for the CPU renderers: filled ellipses and rectangles with soft edges, digits. */

export type Rgb = [number, number, number];

export class Canvas {
  constructor(
    readonly width: number,
    readonly height: number,
    readonly data: Uint8Array = new Uint8Array(width * height * 4),
  ) {}

  fill(color: Rgb): void {
    for (let i = 0; i < this.data.length; i += 4) {
      this.data[i] = color[0];
      this.data[i + 1] = color[1];
      this.data[i + 2] = color[2];
      this.data[i + 3] = 255;
    }
  }

  blendPixel(x: number, y: number, color: Rgb, alpha: number): void {
    if (x < 0 || y < 0 || x >= this.width || y >= this.height || alpha <= 0) return;
    const o = (y * this.width + x) * 4;
    const a = alpha >= 1 ? 1 : alpha;
    this.data[o] += (color[0] - this.data[o]) * a;
    this.data[o + 1] += (color[1] - this.data[o + 1]) * a;
    this.data[o + 2] += (color[2] - this.data[o + 2]) * a;
  }

  /** Filled ellipse with a 1-px anti-aliased edge (or `feather` px of soft edge). */
  ellipse(cx: number, cy: number, rx: number, ry: number, color: Rgb, alpha = 1, feather = 1): void {
    if (rx <= 0 || ry <= 0) return;
    const x0 = Math.floor(cx - rx - feather);
    const x1 = Math.ceil(cx + rx + feather);
    const y0 = Math.floor(cy - ry - feather);
    const y1 = Math.ceil(cy + ry + feather);
    for (let y = Math.max(0, y0); y <= Math.min(this.height - 1, y1); y++) {
      const dy = (y + 0.5 - cy) / ry;
      for (let x = Math.max(0, x0); x <= Math.min(this.width - 1, x1); x++) {
        const dx = (x + 0.5 - cx) / rx;
        const d = Math.sqrt(dx * dx + dy * dy);
        // Distance from the edge in pixels, approximately.
        const edge = (1 - d) * Math.min(rx, ry);
        const coverage = edge >= feather ? 1 : edge <= -feather ? 0 : (edge + feather) / (2 * feather);
        if (coverage > 0) this.blendPixel(x, y, color, coverage * alpha);
      }
    }
  }

  rect(x: number, y: number, w: number, h: number, color: Rgb, alpha = 1): void {
    for (let yy = Math.max(0, Math.floor(y)); yy < Math.min(this.height, Math.ceil(y + h)); yy++) {
      for (let xx = Math.max(0, Math.floor(x)); xx < Math.min(this.width, Math.ceil(x + w)); xx++) this.blendPixel(xx, yy, color, alpha);
    }
  }

  /** Draws digits 0-9 (and '.', ':') with a 3×5 bitmap font scaled by `scale`. */
  text(x: number, y: number, text: string, scale: number, color: Rgb): void {
    let cursor = x;
    for (const ch of text) {
      const glyph = FONT[ch];
      if (glyph) {
        for (let row = 0; row < 5; row++) {
          for (let col = 0; col < 3; col++) {
            if (glyph[row] & (4 >> col)) this.rect(cursor + col * scale, y + row * scale, scale, scale, color);
          }
        }
      }
      cursor += 4 * scale;
    }
  }
}

const FONT: Record<string, number[]> = {
  '0': [7, 5, 5, 5, 7],
  '1': [2, 6, 2, 2, 7],
  '2': [7, 1, 7, 4, 7],
  '3': [7, 1, 7, 1, 7],
  '4': [5, 5, 7, 1, 1],
  '5': [7, 4, 7, 1, 7],
  '6': [7, 4, 7, 5, 7],
  '7': [7, 1, 1, 1, 1],
  '8': [7, 5, 7, 5, 7],
  '9': [7, 5, 7, 1, 7],
  '.': [0, 0, 0, 0, 2],
  ':': [0, 2, 0, 2, 0],
  '#': [5, 7, 5, 7, 5],
  ' ': [0, 0, 0, 0, 0],
};

export const mix = (a: Rgb, b: Rgb, t: number): Rgb => [a[0] + (b[0] - a[0]) * t, a[1] + (b[1] - a[1]) * t, a[2] + (b[2] - a[2]) * t];
