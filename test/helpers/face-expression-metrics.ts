/**
 * How an expression moves a face between two decoded frames (one neutral, one showing the expression), anchored on
 * the face the detector found on the neutral one (`MouthAnimation`). The landmark model (face-api's 68 points) hardly
 * moves its mouth corners for a smile it is shown (a mouth warped 40 % wider read 2 % wider), and the stored landmarks
 * have no brows, so each point's move is found by block matching: the shift of a small luma patch around it from the
 * neutral frame to the other, sub-pixel, less the shift of the nose bridge between the eyes (which no expression
 * moves), so a clip's loop or a photo's sway between the two frames cancels out.
 */
import type { I420Frame, MouthAnimation, Point } from '../../actors/render/types.ts';

/** Patch half size, px (a face of ~80 px: the astronaut's). */
const PATCH_HALF = 5;
/** Search reach of the nose bridge (a clip's loop or a sway may move the whole face this far) and of a point from it. */
const BRIDGE_REACH = 16;
const POINT_REACH = 8;

function sad(a: I420Frame, b: I420Frame, p: Point, dx: number, dy: number): number {
  let sum = 0;
  const px = Math.round(p.x);
  const py = Math.round(p.y);
  for (let y = py - PATCH_HALF; y <= py + PATCH_HALF; y++)
    for (let x = px - PATCH_HALF; x <= px + PATCH_HALF; x++)
      sum += Math.abs(a.data[y * a.width + x] - b.data[(y + dy) * b.width + x + dx]);
  return sum;
}

/** Where the patch around `p` in `a` went in `b`, px, with a parabola through the best integer shift's neighbours. */
export function patchShift(
  a: I420Frame,
  b: I420Frame,
  p: Point,
  reach: number,
  around = { dx: 0, dy: 0 },
): { dx: number; dy: number } {
  let best = { dx: 0, dy: 0 };
  let bestCost = Infinity;
  for (let dy = around.dy - reach; dy <= around.dy + reach; dy++)
    for (let dx = around.dx - reach; dx <= around.dx + reach; dx++) {
      const cost = sad(a, b, p, dx, dy);
      if (cost < bestCost) {
        bestCost = cost;
        best = { dx, dy };
      }
    }
  const refine = (minus: number, zero: number, plus: number) => {
    const curvature = minus - 2 * zero + plus;
    return curvature > 0 ? Math.max(-0.5, Math.min(0.5, (0.5 * (minus - plus)) / curvature)) : 0;
  };
  return {
    dx: best.dx + refine(sad(a, b, p, best.dx - 1, best.dy), bestCost, sad(a, b, p, best.dx + 1, best.dy)),
    dy: best.dy + refine(sad(a, b, p, best.dx, best.dy - 1), bestCost, sad(a, b, p, best.dx, best.dy + 1)),
  };
}

export interface ExpressionMoves {
  /** Growth of the distance between the mouth corners over the mouth width (0.08 = 8 % wider). */
  widening: number;
  /** How far the corners rose against the upper lip's middle, px (positive = up). */
  cornerRise: number;
  /** How far the brows rose, over the eye–brow distance (taken as 0.3 eye distances: brows are not landmarks). */
  browRise: number;
}

/** Brows sit about this far above the eye centres, in eye distances (the renderer's assumption as well). */
const EYE_TO_BROW = 0.3;

export function expressionMoves(neutral: I420Frame, shown: I420Frame, face: MouthAnimation): ExpressionMoves {
  const { left_eye: le, right_eye: re, outer_lip: lip } = face;
  const ed = Math.hypot(re.x - le.x, re.y - le.y);
  const bridge = patchShift(neutral, shown, { x: (le.x + re.x) / 2, y: (le.y + re.y) / 2 + 0.1 * ed }, BRIDGE_REACH);
  const whole = { dx: Math.round(bridge.dx), dy: Math.round(bridge.dy) };
  const move = (p: Point) => {
    const s = patchShift(neutral, shown, p, POINT_REACH, whole);
    return { dx: s.dx - bridge.dx, dy: s.dy - bridge.dy };
  };
  const [left, right] = (lip[0].x <= lip[6].x ? [lip[0], lip[6]] : [lip[6], lip[0]]).map(move);
  const middle = move(lip[3]);
  const brows = [le, re].map((eye) => move({ x: eye.x, y: eye.y - EYE_TO_BROW * ed }));
  return {
    widening: (right.dx - left.dx) / face.mouth_width,
    cornerRise: middle.dy - (left.dy + right.dy) / 2,
    browRise: -(brows[0].dy + brows[1].dy) / 2 / (EYE_TO_BROW * ed),
  };
}
