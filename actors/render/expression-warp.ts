/**
 * Expressions on a photo or a clip frame (`actors/expression.ts`): a smooth warp of the face along its stored
 * landmarks (`MouthAnimation`: the lip contour's corners, the eye centres), laid over a frame whose mouth already
 * shows its viseme, so a smile while speaking keeps the spoken opening and bends it. What moves:
 *
 * - smile: the mouth corners out and up, the cheeks above them up, the lower lids a little up (the eyes narrow);
 * - concern: the corners down; the inner brow ends up and towards the nose (`browKnit`);
 * - surprise, emphasis: both brows up, the upper lids with them a little (`browRaise`).
 *
 * Each movement is a bump: a displacement that is full at its centre and falls to nothing at its radii (a compact
 * (1 − r²)² kernel, so the warp touches nothing outside the face and leaves no seam). Radii and travels are in
 * mouth widths (mouth) and eye distances (brows, lids), along the eye line, so they scale and tilt with the face.
 * Every travel stays under half its radius: the map never folds.
 *
 * Photo and clip renderers call `warpExpression` once per frame with the frame's own landmarks (a photo's
 * `metadata.animation`, a clip frame's track entry); a neutral frame is left untouched (no cost, same bytes).
 */
import { faceExpression, isNeutral, type ExpressionWeights } from '../expression.ts';
import { planes } from './i420.ts';
import type { I420Frame, MouthAnimation, Point } from './types.ts';

/** Smile at 1: each mouth corner moves out by this many mouth widths (the mouth ~20 % wider) and up by the other. */
const CORNER_OUT = 0.1;
const CORNER_UP = 0.08;
/** Reach of the corner bump along and across the eye line, mouth widths: under half a mouth, so the lips' middle stays. */
const CORNER_RADII = { along: 0.42, across: 0.34 };
/** Concern at 1 lowers the corners by this much (mouth widths), and narrows nothing. */
const CORNER_DOWN = 0.06;
/** The cheek above each corner rises with a smile (mouth widths), centred this far out and up from the corner. */
const CHEEK_UP = 0.06;
const CHEEK_CENTRE = { out: 0.2, up: 0.55 };
const CHEEK_RADII = { along: 0.55, across: 0.45 };
/** Brows sit about this far above the eye centres (eye distances; landmarks for brows are not stored). */
const BROW_ABOVE_EYE = 0.3;
/** Surprise at 1 lifts each brow by this many eye distances (~30 % of the eye–brow distance). */
const BROW_UP = 0.09;
const BROW_RADII = { along: 0.38, across: 0.3 };
/** Concern at 1: the inner brow end rises and moves towards the nose by these (eye distances). */
const KNIT_UP = 0.07;
const KNIT_IN = 0.03;
const KNIT_CENTRE_IN = 0.18;
const KNIT_RADII = { along: 0.22, across: 0.26 };
/** A smile raises the lower lids by this (eye distances): the eyes narrow a little, as a felt smile's do. */
const LOWER_LID_UP = 0.025;
const LOWER_LID_BELOW_EYE = 0.16;
const LOWER_LID_RADII = { along: 0.3, across: 0.14 };
/** Travels under this (px) are not drawn: the frame stays byte-identical to the neutral one. */
const STILL_PX = 0.05;

/** One displacement: `move` (px, image axes) at `centre`, falling to zero at the radii along `axis` and across it. */
interface Bump {
  cx: number;
  cy: number;
  /** Unit vector along the eye line; across is its perpendicular pointing down the face. */
  ax: number;
  ay: number;
  along: number;
  across: number;
  dx: number;
  dy: number;
  /** Axis-aligned bounds of the support, px. */
  x0: number;
  y0: number;
  x1: number;
  y1: number;
}

interface FaceAxes {
  /** Unit vector from the left eye to the right eye. */
  ax: number;
  ay: number;
  eyeDistance: number;
}

function axesOf(face: MouthAnimation): FaceAxes {
  const dx = face.right_eye.x - face.left_eye.x;
  const dy = face.right_eye.y - face.left_eye.y;
  const eyeDistance = Math.hypot(dx, dy);
  if (!(eyeDistance > 1)) return { ax: 1, ay: 0, eyeDistance: face.mouth_width * 1.3 };
  return { ax: dx / eyeDistance, ay: dy / eyeDistance, eyeDistance };
}

/** A point `along` the eye line and `across` it (down the face) from `origin`, px. */
function offset(origin: Point, axes: FaceAxes, along: number, across: number): Point {
  return { x: origin.x + along * axes.ax - across * axes.ay, y: origin.y + along * axes.ay + across * axes.ax };
}

function bump(
  centre: Point,
  axes: FaceAxes,
  radii: { along: number; across: number },
  move: { along: number; across: number },
): Bump {
  const reach = Math.max(radii.along, radii.across);
  return {
    cx: centre.x,
    cy: centre.y,
    ax: axes.ax,
    ay: axes.ay,
    along: radii.along,
    across: radii.across,
    dx: move.along * axes.ax - move.across * axes.ay,
    dy: move.along * axes.ay + move.across * axes.ax,
    x0: centre.x - reach,
    y0: centre.y - reach,
    x1: centre.x + reach,
    y1: centre.y + reach,
  };
}

/**
 * The mouth corners, the one towards the left eye first: the outer lip contour's ends (iBUG 48 and 54, in whichever
 * order a track lists them), or either side of the centre.
 */
function cornersOf(face: MouthAnimation, axes: FaceAxes): [Point, Point] {
  const lip = face.outer_lip;
  if (lip && lip.length >= 7) {
    const along = (p: Point) => p.x * axes.ax + p.y * axes.ay;
    return along(lip[0]) <= along(lip[6]) ? [lip[0], lip[6]] : [lip[6], lip[0]];
  }
  const half = face.mouth_width / 2;
  return [offset(face.mouth_center, axes, -half, 0), offset(face.mouth_center, axes, half, 0)];
}

/** The bumps an expression makes on this face; empty when nothing moves. */
export function expressionBumps(face: MouthAnimation, weights: ExpressionWeights): Bump[] {
  const { mouthCurve, browRaise, browKnit } = faceExpression(weights);
  const axes = axesOf(face);
  const mw = face.mouth_width;
  const ed = axes.eyeDistance;
  const smile = Math.max(0, mouthCurve);
  const frown = Math.max(0, -mouthCurve);
  const bumps: Bump[] = [];
  const scaled = (radii: { along: number; across: number }, unit: number) => ({
    along: radii.along * unit,
    across: radii.across * unit,
  });
  cornersOf(face, axes).forEach((corner, index) => {
    const side = index === 0 ? -1 : 1;
    const up = (CORNER_UP * smile - CORNER_DOWN * frown) * mw;
    if (smile > 0 || frown > 0)
      bumps.push(bump(corner, axes, scaled(CORNER_RADII, mw), { along: side * CORNER_OUT * smile * mw, across: -up }));
    if (smile > 0) {
      const cheek = offset(corner, axes, side * CHEEK_CENTRE.out * mw, -CHEEK_CENTRE.up * mw);
      bumps.push(bump(cheek, axes, scaled(CHEEK_RADII, mw), { along: 0, across: -CHEEK_UP * smile * mw }));
    }
  });
  [face.left_eye, face.right_eye].forEach((eye, index) => {
    const side = index === 0 ? -1 : 1;
    const brow = offset(eye, axes, 0, -BROW_ABOVE_EYE * ed);
    if (browRaise > 0)
      bumps.push(bump(brow, axes, scaled(BROW_RADII, ed), { along: 0, across: -BROW_UP * browRaise * ed }));
    if (browKnit > 0) {
      const inner = offset(brow, axes, -side * KNIT_CENTRE_IN * ed, 0);
      bumps.push(
        bump(inner, axes, scaled(KNIT_RADII, ed), {
          along: -side * KNIT_IN * browKnit * ed,
          across: -KNIT_UP * browKnit * ed,
        }),
      );
    }
    if (smile > 0) {
      const lid = offset(eye, axes, 0, LOWER_LID_BELOW_EYE * ed);
      bumps.push(bump(lid, axes, scaled(LOWER_LID_RADII, ed), { along: 0, across: -LOWER_LID_UP * smile * ed }));
    }
  });
  return bumps.filter((b) => Math.hypot(b.dx, b.dy) >= STILL_PX);
}

/** The summed displacement at (x, y), px, into `out`. */
function displacementAt(bumps: readonly Bump[], x: number, y: number, out: { dx: number; dy: number }): void {
  let dx = 0;
  let dy = 0;
  for (const b of bumps) {
    if (x <= b.x0 || x >= b.x1 || y <= b.y0 || y >= b.y1) continue;
    const rx = x - b.cx;
    const ry = y - b.cy;
    const u = (rx * b.ax + ry * b.ay) / b.along;
    const v = (-rx * b.ay + ry * b.ax) / b.across;
    const r2 = u * u + v * v;
    if (r2 >= 1) continue;
    const k = (1 - r2) * (1 - r2);
    dx += k * b.dx;
    dy += k * b.dy;
  }
  out.dx = dx;
  out.dy = dy;
}

function bilinear(
  plane: Uint8Array,
  stride: number,
  x0: number,
  y0: number,
  w: number,
  h: number,
  x: number,
  y: number,
): number {
  // `plane` holds a w×h copy of the region starting at (x0, y0); coordinates are the frame's, clamped into the copy.
  const cx = Math.min(w - 1, Math.max(0, x - x0));
  const cy = Math.min(h - 1, Math.max(0, y - y0));
  const ix = Math.min(w - 2, Math.floor(cx));
  const iy = Math.min(h - 2, Math.floor(cy));
  const fx = cx - ix;
  const fy = cy - iy;
  const a = iy * stride + ix;
  const top = plane[a] + (plane[a + 1] - plane[a]) * fx;
  const bottom = plane[a + stride] + (plane[a + stride + 1] - plane[a + stride]) * fx;
  return top + (bottom - top) * fy;
}

/** Warps one plane's region in place: each pixel takes the colour from where the displacement brings it from. */
function warpRegion(
  plane: Uint8Array,
  planeWidth: number,
  region: { x0: number; y0: number; x1: number; y1: number },
  /** Plane pixels per luma pixel (1 for Y, 0.5 for U and V). */
  scale: number,
  bumps: readonly Bump[],
): void {
  const w = region.x1 - region.x0;
  const h = region.y1 - region.y0;
  if (w < 2 || h < 2) return;
  const copy = new Uint8Array(w * h);
  for (let y = 0; y < h; y++)
    copy.set(plane.subarray((region.y0 + y) * planeWidth + region.x0, (region.y0 + y) * planeWidth + region.x1), y * w);
  const d = { dx: 0, dy: 0 };
  for (let y = region.y0; y < region.y1; y++) {
    for (let x = region.x0; x < region.x1; x++) {
      // In luma pixels: the pixel's centre, then one fixed-point step towards the inverse of the forward move.
      const lx = (x + 0.5) / scale - 0.5;
      const ly = (y + 0.5) / scale - 0.5;
      displacementAt(bumps, lx, ly, d);
      if (d.dx === 0 && d.dy === 0) continue;
      displacementAt(bumps, lx - d.dx, ly - d.dy, d);
      const value = bilinear(copy, w, region.x0, region.y0, w, h, x - d.dx * scale, y - d.dy * scale);
      plane[y * planeWidth + x] = (value + 0.5) | 0;
    }
  }
}

/**
 * Shows `expression` on `frame` whose face has `face`'s landmarks, in place. Neutral (or absent) weights leave the
 * frame as it is.
 */
export function warpExpression(
  frame: I420Frame,
  face: MouthAnimation,
  expression: ExpressionWeights | undefined,
): void {
  if (!expression || isNeutral(expression)) return;
  const bumps = expressionBumps(face, expression);
  if (bumps.length === 0) return;
  const x0 = Math.max(0, Math.floor(Math.min(...bumps.map((b) => b.x0))));
  const y0 = Math.max(0, Math.floor(Math.min(...bumps.map((b) => b.y0))));
  const x1 = Math.min(frame.width, Math.ceil(Math.max(...bumps.map((b) => b.x1))) + 1);
  const y1 = Math.min(frame.height, Math.ceil(Math.max(...bumps.map((b) => b.y1))) + 1);
  if (x1 <= x0 || y1 <= y0) return;
  const { y, u, v, cw, ch } = planes(frame);
  warpRegion(y, frame.width, { x0, y0, x1, y1 }, 1, bumps);
  const chroma = {
    x0: x0 >> 1,
    y0: y0 >> 1,
    x1: Math.min(cw, (x1 + 1) >> 1),
    y1: Math.min(ch, (y1 + 1) >> 1),
  };
  warpRegion(u, cw, chroma, 0.5, bumps);
  warpRegion(v, cw, chroma, 0.5, bumps);
}
