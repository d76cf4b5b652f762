import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { blendPlane } from '../actors/render/patch.ts';

/** The blend as written first: every pixel of the patch visited, bounds checked per pixel, float division. */
function referenceBlend(
  dst: Uint8Array,
  stride: number,
  rows: number,
  src: Uint8Array,
  alpha: Uint8Array,
  width: number,
  height: number,
  left: number,
  top: number,
  shift: number,
): void {
  for (let row = 0; row < height; row++) {
    const y = top + row;
    if (y < 0 || y >= rows) continue;
    for (let col = 0; col < width; col++) {
      const x = left + col;
      if (x < 0 || x >= stride) continue;
      const i = row * width + col;
      const a = alpha[i];
      if (a === 0) continue;
      const value = Math.min(255, Math.max(0, src[i] + shift));
      const d = y * stride + x;
      dst[d] = (dst[d] * (255 - a) + value * a + 127) / 255;
    }
  }
}

const bytes = (length: number) => fc.uint8Array({ minLength: length, maxLength: length });

describe('blending a patch plane into a frame', () => {
  it('gives exactly the per-pixel blend for any patch, alpha (sparse, opaque or mixed), offset (partly or wholly off the frame) and colour shift', () => {
    fc.assert(
      fc.property(
        fc
          .record({
            frameW: fc.integer({ min: 1, max: 48 }),
            frameH: fc.integer({ min: 1, max: 24 }),
            w: fc.integer({ min: 1, max: 40 }),
            h: fc.integer({ min: 1, max: 16 }),
          })
          .chain((size) =>
            fc.record({
              size: fc.constant(size),
              frame: bytes(size.frameW * size.frameH),
              src: bytes(size.w * size.h),
              // Runs of transparent, opaque and partial alpha, long and short, as a video avatar's mouth pose has: long
              // opaque runs are copied and short gaps blended through (`runsOf`), so both must occur.
              alpha: fc
                .array(
                  fc.record({
                    value: fc.oneof(
                      { weight: 3, arbitrary: fc.constant(0) },
                      { weight: 2, arbitrary: fc.constant(255) },
                      { weight: 2, arbitrary: fc.integer({ min: 1, max: 254 }) },
                    ),
                    length: fc.integer({ min: 1, max: 20 }),
                  }),
                  { minLength: 1, maxLength: 60 },
                )
                .map((runs) => {
                  const plane: number[] = [];
                  while (plane.length < size.w * size.h)
                    for (const run of runs) plane.push(...new Array<number>(run.length).fill(run.value));
                  return plane.slice(0, size.w * size.h);
                }),
              left: fc.integer({ min: -20, max: 30 }),
              top: fc.integer({ min: -20, max: 30 }),
              shift: fc.integer({ min: -40, max: 40 }),
            }),
          ),
        ({ size, frame, src, alpha, left, top, shift }) => {
          const alphaPlane = Uint8Array.from(alpha);
          const expected = Uint8Array.from(frame);
          referenceBlend(expected, size.frameW, size.frameH, src, alphaPlane, size.w, size.h, left, top, shift);
          const actual = Uint8Array.from(frame);
          blendPlane(actual, size.frameW, size.frameH, src, alphaPlane, size.w, size.h, left, top, shift);
          expect(actual).toEqual(expected);
          // Twice with the same patch (its row spans kept from the first blend): still exact.
          const again = Uint8Array.from(frame);
          blendPlane(again, size.frameW, size.frameH, src, alphaPlane, size.w, size.h, left, top, shift);
          expect(again).toEqual(expected);
        },
      ),
      { numRuns: 400 },
    );
  });

  it('one alpha plane read as two shapes (its row spans are not reused for the other)', () => {
    // 4 × 2: transparent but for the last column; as 2 × 4 the second column is opaque on every row.
    const alpha = Uint8Array.of(0, 0, 0, 255, 0, 0, 0, 255);
    const src = new Uint8Array(8).fill(200);
    const wide = new Uint8Array(8);
    blendPlane(wide, 4, 2, src, alpha, 4, 2, 0, 0);
    expect(Array.from(wide)).toEqual([0, 0, 0, 200, 0, 0, 0, 200]);
    const tall = new Uint8Array(8);
    blendPlane(tall, 2, 4, src, alpha, 2, 4, 0, 0);
    expect(Array.from(tall)).toEqual([0, 0, 0, 200, 0, 0, 0, 200]);
    const expected = new Uint8Array(8);
    referenceBlend(expected, 2, 4, src, alpha, 2, 4, 0, 0, 0);
    expect(tall).toEqual(expected);
  });

  it('every blend of a value over a value at every alpha rounds as the division does', () => {
    const dst = new Uint8Array(1);
    const src = new Uint8Array(1);
    const wrong: string[] = [];
    for (let a = 1; a <= 255; a++) {
      const alpha = Uint8Array.of(a);
      for (let under = 0; under < 256; under += 5) {
        for (let over = 0; over < 256; over += 3) {
          dst[0] = under;
          src[0] = over;
          blendPlane(dst, 1, 1, src, alpha, 1, 1, 0, 0);
          if (dst[0] !== Math.floor((under * (255 - a) + over * a + 127) / 255))
            wrong.push(`${over} over ${under} at ${a}`);
        }
      }
    }
    expect(wrong).toEqual([]);
  });
});
