/**
 * The inside of an open mouth painted between a warped photo's lips: colours taken from the face itself and
 * shaded for depth, instead of one maroon lens with a white strip across it.
 *
 * - Interior: the lip colour darkened, lit near the lips and falling off towards the back and the corners, darkest
 *   in the shadow under the upper teeth; a tongue rises from the bottom of a wide opening: its own pink tinted by
 *   the lips, dark at its back under the palate, lit at its front, darker down its sides, a groove down its middle.
 * - Upper teeth: the photo's own tooth colour (at a tooth's brightness) when it showed teeth, else an ivory; each front tooth a
 *   shape of its own (rounded biting edge, a dark notch between neighbours, a faint shadow line up its side),
 *   shadowed under the upper lip, darker and shorter towards the corners, with a sliver of gum when the upper lip
 *   lifts far.
 */
import type { MouthAnimation } from './types.ts';
import type { RgbaImage } from './image.ts';
import { smoothstep } from './idle-motion.ts';

export interface Rgb {
  r: number;
  g: number;
  b: number;
}

export interface MouthPalette {
  /** The lips' colour, the shades of the inside derive from it. */
  lip: Rgb;
  teeth: Rgb;
}

/** Fallbacks: a pink lip and an ivory tooth, for a face whose own colours could not be read. */
const DEFAULT_LIP: Rgb = { r: 178, g: 100, b: 100 };
const DEFAULT_TEETH: Rgb = { r: 232, g: 222, b: 206 };
/** The inside's brightness relative to the lips: just inside the lip edge, and at the back of the mouth. */
const INSIDE_EDGE = 0.42;
const INSIDE_BACK = 0.1;
/** How much redder than the lips the inside is (its shadows are blood-red, not grey). */
const INSIDE_REDNESS = 1.25;
/** Tongue: brightness on its lit front, relative to its colour (`TONGUE` mixed `TONGUE_TINT` into the lips'). */
const TONGUE_CROWN = 0.78;
const TONGUE: Rgb = { r: 196, g: 92, b: 98 };
const TONGUE_TINT = 0.55;
/** The lower lip's inner edge relative to the lips' colour (`lowerLipEdge`). */
const LOWER_LIP_EDGE: Rgb = { r: 0.74, g: 0.54, b: 0.6 };
/** How much of the tongue a wide-open mouth shows (`tongueShown`). */
const TONGUE_STRENGTH = 0.75;
/** Half width of the groove down its middle (mouth widths) and the light it takes; the sheen on its top. */
const TONGUE_GROOVE = 0.035;
const TONGUE_GROOVE_SHADE = 0.18;
const TONGUE_SHEEN = 0.18;
/** Shadow the upper teeth and lip throw on the inside just below them (fraction of light removed) and its depth. */
const UNDER_TEETH_SHADOW = 0.55;
const UNDER_TEETH_SHADOW_PX = 2.5;
/** Front tooth edges from the mouth centre, in mouth widths: central incisors, laterals, canines. */
const TOOTH_EDGES = [0, 0.105, 0.19, 0.27, 0.35];
/** How far (px at a 40 px mouth) a tooth's biting edge rises at its sides, so neighbours show a notch between them. */
const TOOTH_ROUNDING_AT_40 = 0.9;
/** Light taken by the line between two teeth. */
const TOOTH_GAP_SHADE = 0.4;
/** Teeth read from a photo are brought into this brightness range; darker than the last they were not teeth. */
const TEETH_MAX_LUMA = 225;
const TEETH_MIN_LUMA = 205;
const TEETH_UNREADABLE_LUMA = 120;

function mix(a: number, b: number, t: number): number {
  return a + (b - a) * t;
}

function luma(c: Rgb): number {
  return 0.299 * c.r + 0.587 * c.g + 0.114 * c.b;
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[sorted.length >> 1];
}

function medianColour(pixels: Rgb[]): Rgb {
  return { r: median(pixels.map((p) => p.r)), g: median(pixels.map((p) => p.g)), b: median(pixels.map((p) => p.b)) };
}

/**
 * The lips' colour on the rest face (a band across the closed lips' middle, above and below the seam) and the
 * teeth's colour on the photo (bright, less red pixels between its lips), each a median.
 */
export function mouthPalette(
  photo: RgbaImage,
  rest: RgbaImage,
  animation: MouthAnimation,
  seamAt: (x: number) => number,
): MouthPalette {
  const { x: cx } = animation.mouth_center;
  const mw = animation.mouth_width;
  const lips: Rgb[] = [];
  const at = (image: RgbaImage, x: number, y: number): Rgb | null => {
    if (x < 0 || y < 0 || x >= image.width || y >= image.height) return null;
    const o = (y * image.width + x) * 4;
    return { r: image.data[o], g: image.data[o + 1], b: image.data[o + 2] };
  };
  for (let x = Math.round(cx - 0.25 * mw); x <= Math.round(cx + 0.25 * mw); x++) {
    const seam = Math.round(seamAt(x));
    for (const dy of [-3, -2, 2, 3, 4]) {
      const pixel = at(rest, x, seam + Math.round((dy * mw) / 40));
      if (pixel) lips.push(pixel);
    }
  }
  const lip = lips.length > 0 ? medianColour(lips) : DEFAULT_LIP;
  const teeth: Rgb[] = [];
  const inner = animation.inner_lip ?? [];
  if (inner.length >= 3) {
    const top = Math.min(...inner.map((p) => p.y));
    const bottom = Math.max(...inner.map((p) => p.y));
    for (let y = Math.floor(top); y <= Math.ceil(bottom); y++) {
      for (let x = Math.round(cx - 0.3 * mw); x <= Math.round(cx + 0.3 * mw); x++) {
        const pixel = at(photo, x, y);
        if (!pixel) continue;
        // A tooth: bright, and clearly less red than the lips.
        if (luma(pixel) > 1.25 * luma(lip) && pixel.r - pixel.g < 0.6 * (lip.r - lip.g)) teeth.push(pixel);
      }
    }
  }
  let tooth = teeth.length >= 6 ? medianColour(teeth) : DEFAULT_TEETH;
  // The photo's hue, at a brightness teeth have: a glare is toned down, teeth in a smile's shade brought up
  // (painted grey they read as a gap, not as teeth).
  const toothLuma = luma(tooth);
  const target = Math.min(TEETH_MAX_LUMA, Math.max(TEETH_MIN_LUMA, toothLuma));
  if (toothLuma < TEETH_UNREADABLE_LUMA) tooth = DEFAULT_TEETH;
  else if (target !== toothLuma)
    tooth = {
      r: Math.min(255, (tooth.r * target) / toothLuma),
      g: Math.min(255, (tooth.g * target) / toothLuma),
      b: Math.min(255, (tooth.b * target) / toothLuma),
    };
  return { lip, teeth: tooth };
}

/** One column of the opening, what the painter needs of it. */
export interface OpeningColumn {
  /** Lip edges of the opening, px (edge coordinates). */
  top: number;
  bottom: number;
  /** 0 at the middle of the mouth, 1 at its corner. */
  lateral: number;
  /** Column offset from the mouth centre, px. */
  dx: number;
  /** Height of the upper teeth here, px (0: none). */
  teeth: number;
  /** How much of a tongue shows (0..1) and how far teeth reach sideways (fraction of the half width). */
  tongue: number;
  teethReach: number;
  /** The upper lip's lift, px: past a few pixels a sliver of gum shows above the teeth. */
  upperLift: number;
  mouthWidth: number;
}

/** How much tongue an opening of `open` (0..1) shows: none in a small one, most of a wide one's floor. */
export function tongueShown(open: number): number {
  return TONGUE_STRENGTH * smoothstep(0.4, 0.8, open);
}

/** How far the upper teeth reach sideways (fraction of the opening's half width): rounded lips hide the side teeth. */
export function teethReachOf(round: number): number {
  return mix(0.85, 0.7, round);
}

/**
 * The lower lip's wet inner edge, where it meets an opening the warp made (writes `out`): the lips' colour, darker and
 * redder (the lip rolls in there, out of the light), so the lip reads as a lip and not as skin against the inside.
 */
export function lowerLipEdge(palette: MouthPalette, out: Rgb): void {
  out.r = palette.lip.r * LOWER_LIP_EDGE.r;
  out.g = palette.lip.g * LOWER_LIP_EDGE.g;
  out.b = palette.lip.b * LOWER_LIP_EDGE.b;
}

/** The colour of the inside at row y of this column (writes `out`). */
export function paintInside(column: OpeningColumn, y: number, palette: MouthPalette, out: Rgb): void {
  const { top, bottom, lateral } = column;
  const height = Math.max(0.5, bottom - top);
  const fromTop = (y - top) / height;
  const edgePx = Math.min(y - top, bottom - y);
  // Depth: lit just inside the lips, dark towards the back; the corners are deeper still.
  const lit = 1 - smoothstep(0, 1, edgePx / Math.max(1.5, 0.45 * height));
  let light = INSIDE_BACK + (INSIDE_EDGE - INSIDE_BACK) * lit * (1 - 0.6 * smoothstep(0.4, 1, lateral));
  // The shadow under the upper teeth (or under the upper lip where no tooth hangs).
  const shadowTop = top + column.teeth;
  const underShadow =
    y >= shadowTop ? 1 - smoothstep(0, UNDER_TEETH_SHADOW_PX * (column.mouthWidth / 40), y - shadowTop) : 0;
  light *= 1 - UNDER_TEETH_SHADOW * underShadow;
  const lip = palette.lip;
  // Redder than the lips in the shadows: scale red up and green/blue down around the lip's own luma.
  let r = lip.r * light * INSIDE_REDNESS;
  let g = lip.g * light * (2 - INSIDE_REDNESS) * 0.9;
  let b = lip.b * light * (2 - INSIDE_REDNESS) * 0.95;
  // Tongue: a dome from the bottom of the opening. Its back (the crown's upper edge) lies deeper in the mouth and is
  // darker, in the shadow of the palate; its front is lit, brightest on the middle of its top, darker down its sides
  // where it curves away, with a faint groove down its middle.
  if (column.tongue > 0) {
    const crown = 1 - 0.5 * (1 - Math.pow(Math.min(1, lateral / 0.7), 2));
    const onTongue =
      smoothstep(crown - 0.08, crown + 0.06, fromTop) * (1 - smoothstep(0.55, 0.8, lateral)) * column.tongue;
    if (onTongue > 0) {
      const forward = smoothstep(0, 0.35, fromTop - crown);
      const across = Math.min(1, lateral / 0.7);
      const groove = Math.exp(-Math.pow(column.dx / (TONGUE_GROOVE * column.mouthWidth), 2));
      const sheen = smoothstep(0.05, 0.15, fromTop - crown) * (1 - smoothstep(0.2, 0.45, fromTop - crown));
      const crownLight =
        TONGUE_CROWN *
        (0.55 + 0.45 * forward) *
        (1 - 0.55 * across * across) *
        (1 - TONGUE_GROOVE_SHADE * groove * forward) *
        (1 + TONGUE_SHEEN * sheen * (1 - across));
      // The tongue's own pink, tinted by the lips (a pale lip alone gives a grey tongue, a dark one a brown tongue).
      const tongueR = mix(lip.r, TONGUE.r, TONGUE_TINT) * crownLight;
      const tongueG = mix(lip.g, TONGUE.g, TONGUE_TINT) * crownLight;
      const tongueB = mix(lip.b, TONGUE.b, TONGUE_TINT) * crownLight;
      r += (tongueR - r) * onTongue;
      g += (tongueG - g) * onTongue;
      b += (tongueB - b) * onTongue;
    }
  }
  // Upper teeth hanging from the upper lip.
  if (column.teeth > 0) {
    const mw = column.mouthWidth;
    const position = Math.abs(column.dx) / mw;
    let toothShape = 1;
    let gapLine = 0;
    for (let k = 0; k + 1 < TOOTH_EDGES.length; k++) {
      const from = TOOTH_EDGES[k];
      const to = TOOTH_EDGES[k + 1];
      if (position < from || position >= to) continue;
      const across = (position - from) / (to - from);
      // 0 in the middle of a tooth, 1 at its sides.
      const side = Math.abs(2 * across - 1);
      toothShape = side;
      // The line is 0.8 px wide on each side at a 40 px mouth (positions here are in mouth widths).
      gapLine = Math.max(0, 1 - (Math.min(position - from, to - position) * 40) / 0.8);
    }
    // Short teeth (a small opening) round less: a notch deeper than a third of the tooth reads as a saw.
    const rounding = TOOTH_ROUNDING_AT_40 * (mw / 40) * smoothstep(2, 5, column.teeth) * Math.pow(toothShape, 3);
    // Teeth towards the corners are shorter (they turn away) and in the cheeks' shade.
    const toothBottom = top + column.teeth * (1 - 0.35 * smoothstep(0.3, 0.85, lateral)) - rounding;
    const reach = 1 - smoothstep(column.teethReach - 0.15, column.teethReach, lateral);
    const cover = Math.min(1, Math.max(0, toothBottom - y + 0.5)) * reach;
    if (cover > 0) {
      const down = (y - top) / Math.max(1, column.teeth);
      // Shadowed under the lip, brightest across the middle, a little translucent at the biting edge.
      const vertical = (0.8 + 0.2 * smoothstep(0, 0.4, down)) * (1 - 0.08 * smoothstep(0.75, 1, down));
      const sideways = 1 - 0.45 * smoothstep(0.3, 0.9, lateral);
      const separation =
        1 - TOOTH_GAP_SHADE * gapLine * (0.5 + 0.5 * smoothstep(0.2, 0.9, down)) * smoothstep(1.5, 4, column.teeth);
      const shade = vertical * sideways * separation;
      let tr = palette.teeth.r * shade;
      let tg = palette.teeth.g * shade;
      let tb = palette.teeth.b * shade;
      // A sliver of gum under a lifted upper lip.
      const gumPx = Math.max(0, Math.min(1.2, (column.upperLift - 0.12 * mw) * 0.25)) * (mw / 40);
      if (gumPx > 0 && y - top < gumPx) {
        const gum = 1 - (y - top) / gumPx;
        tr += (lip.r * 0.85 - tr) * gum;
        tg += (lip.g * 0.7 - tg) * gum;
        tb += (lip.b * 0.75 - tb) * gum;
      }
      r += (tr - r) * cover;
      g += (tg - g) * cover;
      b += (tb - b) * cover;
    }
  }
  out.r = r;
  out.g = g;
  out.b = b;
}
