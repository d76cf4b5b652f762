/**
 * The drawn face of the `rt` / `rt_head` avatars: parameters (`manifest.metadata.face`), geometry
 * and SVG layers rasterised once at prepare time through sharp (librsvg). See docs/renderers.md for
 * the parameter table.
 */
import type { RgbaImage } from './image.ts';
import type { AvatarManifest } from './types.ts';

export type HairStyle = 'short' | 'bob' | 'long' | 'bald';

export interface FaceParams {
  skin: string;
  hair: string;
  hair_style: HairStyle;
  eye_color: string;
  lip_color: string;
  shirt: string;
  background_top: string;
  background_bottom: string;
  /** Face width as a fraction of frame width. */
  face_width: number;
  /** Face height as a fraction of frame height. */
  face_height: number;
  /** Distance between eye centres as a fraction of face width. */
  eye_spacing: number;
  /** Eye (white) half-width as a fraction of face width. */
  eye_size: number;
  /** Eye centre height from the face top, fraction of face height. */
  eye_height: number;
  /** Mouth width as a fraction of face width. */
  mouth_width: number;
  /** Mouth centre height from the face top, fraction of face height. */
  mouth_height: number;
  /** Cheek blush opacity 0..1. */
  blush: number;
}

export const DEFAULT_FACE: FaceParams = {
  skin: '#f1c8a6',
  hair: '#4a3020',
  hair_style: 'bob',
  eye_color: '#3f6e8c',
  lip_color: '#c0636a',
  shirt: '#2f6db5',
  background_top: '#cfe0f0',
  background_bottom: '#8fb0d0',
  face_width: 0.4,
  face_height: 0.5,
  eye_spacing: 0.4,
  eye_size: 0.085,
  eye_height: 0.45,
  mouth_width: 0.34,
  mouth_height: 0.76,
  blush: 0.25,
};

const COLOUR = /^#[0-9a-fA-F]{6}$/;
const RANGES: Partial<Record<keyof FaceParams, [number, number]>> = {
  face_width: [0.2, 0.6],
  face_height: [0.25, 0.7],
  eye_spacing: [0.25, 0.55],
  eye_size: [0.04, 0.14],
  eye_height: [0.3, 0.55],
  mouth_width: [0.2, 0.5],
  mouth_height: [0.65, 0.85],
  blush: [0, 1],
};

/** Merges `metadata.face` over the defaults, ignoring (not throwing on) malformed values. */
export function faceParams(manifest: AvatarManifest): FaceParams {
  const raw = (manifest.metadata.face ?? {}) as Record<string, unknown>;
  const params: FaceParams = { ...DEFAULT_FACE };
  for (const key of Object.keys(DEFAULT_FACE) as Array<keyof FaceParams>) {
    const value = raw[key];
    const fallback = DEFAULT_FACE[key];
    if (typeof fallback === 'number' && typeof value === 'number' && Number.isFinite(value)) {
      const [min, max] = RANGES[key] ?? [-Infinity, Infinity];
      (params as unknown as Record<string, unknown>)[key] = Math.min(max, Math.max(min, value));
    } else if (key === 'hair_style' && typeof value === 'string' && ['short', 'bob', 'long', 'bald'].includes(value)) {
      params.hair_style = value as HairStyle;
    } else if (
      typeof fallback === 'string' &&
      key !== 'hair_style' &&
      typeof value === 'string' &&
      COLOUR.test(value)
    ) {
      (params as unknown as Record<string, unknown>)[key] = value;
    }
  }
  return params;
}

export interface FaceGeometry {
  width: number;
  height: number;
  centreX: number;
  centreY: number;
  radiusX: number;
  radiusY: number;
  eyeY: number;
  leftEyeX: number;
  rightEyeX: number;
  eyeRadiusX: number;
  eyeRadiusY: number;
  mouthX: number;
  mouthY: number;
  mouthHalfWidth: number;
  /** Neck pivot for head rotation. */
  pivotX: number;
  pivotY: number;
}

export function faceGeometry(params: FaceParams, width: number, height: number): FaceGeometry {
  const radiusX = (params.face_width * width) / 2;
  const radiusY = (params.face_height * height) / 2;
  const centreX = width / 2;
  const centreY = height * 0.43;
  const top = centreY - radiusY;
  const faceWidth = 2 * radiusX;
  const eyeRadiusX = params.eye_size * faceWidth;
  return {
    width,
    height,
    centreX,
    centreY,
    radiusX,
    radiusY,
    eyeY: top + params.eye_height * 2 * radiusY,
    leftEyeX: centreX - (params.eye_spacing * faceWidth) / 2,
    rightEyeX: centreX + (params.eye_spacing * faceWidth) / 2,
    eyeRadiusX,
    eyeRadiusY: eyeRadiusX * 0.62,
    mouthX: centreX,
    mouthY: top + params.mouth_height * 2 * radiusY,
    mouthHalfWidth: (params.mouth_width * faceWidth) / 2,
    pivotX: centreX,
    pivotY: centreY + radiusY * 0.95,
  };
}

function shade(hex: string, factor: number): string {
  const value = parseInt(hex.slice(1), 16);
  const channel = (shift: number) => Math.min(255, Math.max(0, Math.round(((value >> shift) & 255) * factor)));
  return `rgb(${channel(16)},${channel(8)},${channel(0)})`;
}

function svgDocument(width: number, height: number, body: string): string {
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}">${body}</svg>`;
}

export function backgroundSvg(p: FaceParams, g: FaceGeometry): string {
  return svgDocument(
    g.width,
    g.height,
    `<defs><linearGradient id="bg" x1="0" y1="0" x2="0" y2="1"><stop offset="0" stop-color="${p.background_top}"/><stop offset="1" stop-color="${p.background_bottom}"/></linearGradient>
     <radialGradient id="glow" cx="0.5" cy="0.4" r="0.6"><stop offset="0" stop-color="#ffffff" stop-opacity="0.35"/><stop offset="1" stop-color="#ffffff" stop-opacity="0"/></radialGradient></defs>
     <rect width="${g.width}" height="${g.height}" fill="url(#bg)"/><rect width="${g.width}" height="${g.height}" fill="url(#glow)"/>`,
  );
}

/** Neck and shoulders; `rise` lifts the shoulders (breathing) in px. */
export function bodySvg(p: FaceParams, g: FaceGeometry, rise: number): string {
  const neckWidth = g.radiusX * 0.62;
  const shoulderTop = g.centreY + g.radiusY * 1.28 - rise;
  const shoulderHalf = g.radiusX * 2.3;
  const cx = g.centreX;
  return svgDocument(
    g.width,
    g.height,
    `<rect x="${cx - neckWidth / 2}" y="${g.centreY + g.radiusY * 0.5 - rise}" width="${neckWidth}" height="${g.radiusY}" fill="${shade(p.skin, 0.86)}"/>
     <path d="M ${cx - shoulderHalf} ${g.height} C ${cx - shoulderHalf} ${shoulderTop + 30} ${cx - shoulderHalf * 0.7} ${shoulderTop} ${cx - neckWidth} ${shoulderTop}
              L ${cx + neckWidth} ${shoulderTop} C ${cx + shoulderHalf * 0.7} ${shoulderTop} ${cx + shoulderHalf} ${shoulderTop + 30} ${cx + shoulderHalf} ${g.height} Z" fill="${p.shirt}"/>
     <path d="M ${cx - neckWidth} ${shoulderTop} Q ${cx} ${shoulderTop + neckWidth * 0.9} ${cx + neckWidth} ${shoulderTop}" fill="${shade(p.skin, 0.86)}"/>
     <path d="M ${cx - neckWidth} ${shoulderTop} Q ${cx} ${shoulderTop + neckWidth * 0.9} ${cx + neckWidth} ${shoulderTop}" fill="none" stroke="${shade(p.shirt, 0.75)}" stroke-width="${g.width / 120}"/>`,
  );
}

/** Head without mouth and with open eyes: back hair, ears, face, nose, brows, eyes, fringe. */
export function headSvg(p: FaceParams, g: FaceGeometry, brows: BrowPose = NEUTRAL_BROWS): string {
  const { centreX: cx, centreY: cy, radiusX: rx, radiusY: ry } = g;
  const top = cy - ry;
  const stroke = g.width / 256;
  const backHair =
    p.hair_style === 'long'
      ? `<path d="M ${cx - rx * 1.18} ${cy} Q ${cx - rx * 1.3} ${cy + ry * 1.5} ${cx - rx * 0.9} ${cy + ry * 1.55} L ${cx + rx * 0.9} ${cy + ry * 1.55} Q ${cx + rx * 1.3} ${cy + ry * 1.5} ${cx + rx * 1.18} ${cy} Z" fill="${shade(p.hair, 0.85)}"/>`
      : p.hair_style === 'bob'
        ? `<path d="M ${cx - rx * 1.1} ${cy - ry * 0.7} Q ${cx - rx * 1.25} ${cy - ry * 0.3} ${cx - rx * 1.2} ${cy - ry * 0.1} Q ${cx - rx * 1.3} ${cy + ry * 0.75} ${cx - rx * 0.85} ${cy + ry * 0.72} L ${cx + rx * 0.85} ${cy + ry * 0.72} Q ${cx + rx * 1.3} ${cy + ry * 0.75} ${cx + rx * 1.2} ${cy - ry * 0.1} Q ${cx + rx * 1.25} ${cy - ry * 0.3} ${cx + rx * 1.1} ${cy - ry * 0.7} Z" fill="${shade(p.hair, 0.85)}"/>`
        : '';
  const crown =
    p.hair_style === 'bald'
      ? ''
      : `<path d="M ${cx - rx * 1.1} ${cy - ry * 0.05} C ${cx - rx * 1.25} ${top - ry * 0.35} ${cx + rx * 1.25} ${top - ry * 0.35} ${cx + rx * 1.1} ${cy - ry * 0.05}
                 Q ${cx + rx * 0.95} ${top + ry * 0.45} ${cx + rx * 0.35} ${top + ry * 0.32} Q ${cx - rx * 0.1} ${top + ry * 0.5} ${cx - rx * 0.55} ${top + ry * 0.3} Q ${cx - rx * 0.95} ${top + ry * 0.45} ${cx - rx * 1.1} ${cy - ry * 0.05} Z" fill="${p.hair}"/>`;
  const eye = (ex: number) => `
    <ellipse cx="${ex}" cy="${g.eyeY}" rx="${g.eyeRadiusX}" ry="${g.eyeRadiusY}" fill="#fbfbf8" stroke="${shade(p.skin, 0.6)}" stroke-width="${stroke}"/>
    <circle cx="${ex}" cy="${g.eyeY}" r="${g.eyeRadiusY * 0.9}" fill="${p.eye_color}"/>
    <circle cx="${ex}" cy="${g.eyeY}" r="${g.eyeRadiusY * 0.42}" fill="#151515"/>
    <circle cx="${ex + g.eyeRadiusY * 0.3}" cy="${g.eyeY - g.eyeRadiusY * 0.35}" r="${g.eyeRadiusY * 0.2}" fill="#ffffff"/>
    <path d="M ${ex - g.eyeRadiusX * 1.05} ${g.eyeY - g.eyeRadiusY * 0.2} Q ${ex} ${g.eyeY - g.eyeRadiusY * 1.45} ${ex + g.eyeRadiusX * 1.05} ${g.eyeY - g.eyeRadiusY * 0.2}" fill="none" stroke="${shade(p.skin, 0.45)}" stroke-width="${stroke * 1.6}"/>
    ${browPath(p, g, ex, brows)}`;
  return svgDocument(
    g.width,
    g.height,
    `<defs><radialGradient id="skin" cx="0.45" cy="0.4" r="0.7"><stop offset="0" stop-color="${shade(p.skin, 1.04)}"/><stop offset="1" stop-color="${shade(p.skin, 0.9)}"/></radialGradient></defs>
     ${backHair}
     <ellipse cx="${cx - rx * 0.98}" cy="${g.eyeY + ry * 0.12}" rx="${rx * 0.13}" ry="${ry * 0.16}" fill="${shade(p.skin, 0.9)}"/>
     <ellipse cx="${cx + rx * 0.98}" cy="${g.eyeY + ry * 0.12}" rx="${rx * 0.13}" ry="${ry * 0.16}" fill="${shade(p.skin, 0.9)}"/>
     <path d="M ${cx - rx} ${cy - ry * 0.15} C ${cx - rx} ${top - ry * 0.12} ${cx + rx} ${top - ry * 0.12} ${cx + rx} ${cy - ry * 0.15}
              C ${cx + rx} ${cy + ry * 0.55} ${cx + rx * 0.45} ${cy + ry} ${cx} ${cy + ry} C ${cx - rx * 0.45} ${cy + ry} ${cx - rx} ${cy + ry * 0.55} ${cx - rx} ${cy - ry * 0.15} Z" fill="url(#skin)"/>
     <ellipse cx="${g.leftEyeX - rx * 0.08}" cy="${g.mouthY - ry * 0.16}" rx="${rx * 0.2}" ry="${ry * 0.09}" fill="#e86a6a" opacity="${p.blush * 0.6}"/>
     <ellipse cx="${g.rightEyeX + rx * 0.08}" cy="${g.mouthY - ry * 0.16}" rx="${rx * 0.2}" ry="${ry * 0.09}" fill="#e86a6a" opacity="${p.blush * 0.6}"/>
     <path d="M ${cx - rx * 0.03} ${g.eyeY + ry * 0.18} Q ${cx - rx * 0.12} ${g.mouthY - ry * 0.22} ${cx - rx * 0.1} ${g.mouthY - ry * 0.19} Q ${cx} ${g.mouthY - ry * 0.15} ${cx + rx * 0.1} ${g.mouthY - ry * 0.19}" fill="none" stroke="${shade(p.skin, 0.7)}" stroke-width="${stroke * 1.5}" stroke-linecap="round"/>
     ${eye(g.leftEyeX)}${eye(g.rightEyeX)}
     ${crown}`,
  );
}

/** Brow pose of an expression (`actors/expression.ts`): `raise` lifts both brows, `knit` lifts and draws in their inner ends. 0..1. */
export interface BrowPose {
  raise: number;
  knit: number;
}

export const NEUTRAL_BROWS: BrowPose = Object.freeze({ raise: 0, knit: 0 });
/** A full brow raise lifts the brows this many eye half-heights: ~35 % of the eye–brow distance, a clear surprise. */
const BROW_RAISE_EYE_HEIGHTS = 0.9;
/** A full knit lifts the inner brow ends this many eye half-heights and lowers the outer ends a little. */
const BROW_KNIT_INNER_EYE_HEIGHTS = 0.8;
const BROW_KNIT_OUTER_EYE_HEIGHTS = 0.2;

/** One brow over the eye at `ex`: its neutral arch moved by the pose. */
function browPath(p: FaceParams, g: FaceGeometry, ex: number, brows: BrowPose): string {
  const stroke = g.width / 256;
  const ry = g.eyeRadiusY;
  const lift = brows.raise * BROW_RAISE_EYE_HEIGHTS * ry;
  // The inner end is the one towards the face's centre line.
  const innerSign = ex < g.centreX ? 1 : -1;
  const innerX = ex + innerSign * g.eyeRadiusX * (1.1 - 0.15 * brows.knit);
  const outerX = ex - innerSign * g.eyeRadiusX * 1.1;
  const innerY = g.eyeY - ry * (innerSign > 0 ? 2.2 : 2.1) - lift - brows.knit * BROW_KNIT_INNER_EYE_HEIGHTS * ry;
  const outerY = g.eyeY - ry * (innerSign > 0 ? 2.1 : 2.2) - lift + brows.knit * BROW_KNIT_OUTER_EYE_HEIGHTS * ry;
  const peakY = g.eyeY - ry * 2.9 - lift - brows.knit * 0.3 * ry;
  const [x1, y1, x2, y2] = innerSign > 0 ? [outerX, outerY, innerX, innerY] : [innerX, innerY, outerX, outerY];
  return `<path d="M ${x1} ${y1} Q ${ex} ${peakY} ${x2} ${y2}" fill="none" stroke="${shade(p.hair, 0.9)}" stroke-width="${stroke * 3.2}" stroke-linecap="round"/>`;
}

/**
 * Box (relative to the left eye centre) covering both brows in every pose and the skin around them, down to
 * above the eye crease: a brow pose is drawn by replacing this box of the head.
 */
export function browBox(g: FaceGeometry): { x: number; y: number; width: number; height: number } {
  const padX = Math.ceil(g.eyeRadiusX * 1.45);
  const top = Math.floor(-g.eyeRadiusY * (2.9 + BROW_RAISE_EYE_HEIGHTS + BROW_KNIT_INNER_EYE_HEIGHTS + 0.6));
  const bottom = Math.ceil(-g.eyeRadiusY * 1.3);
  return { x: -padX, y: top, width: Math.ceil(g.rightEyeX - g.leftEyeX) + 2 * padX, height: bottom - top };
}

/** Box (relative to the mouth centre) that every mouth sprite fits in. */
export function mouthBox(g: FaceGeometry): { x: number; y: number; width: number; height: number } {
  const halfWidth = Math.ceil(g.mouthHalfWidth * 1.45);
  return {
    x: -halfWidth,
    y: -Math.ceil(g.mouthHalfWidth * 0.55),
    width: 2 * halfWidth,
    height: Math.ceil(g.mouthHalfWidth * 1.7),
  };
}

/** Lips and inner mouth for one pose, drawn in a cell whose origin is the mouth centre at (ox, oy). */
export function mouthShape(
  p: FaceParams,
  g: FaceGeometry,
  open: number,
  wide: number,
  round: number,
  ox: number,
  oy: number,
  id: string,
): string {
  const half = g.mouthHalfWidth * (1 + 0.22 * wide - 0.38 * round);
  const gap = g.mouthHalfWidth * (0.85 * open + 0.25 * round * open);
  const lip = g.mouthHalfWidth * 0.2;
  const smile = g.mouthHalfWidth * 0.12 * (1 - round);
  const left = ox - half;
  const right = ox + half;
  const cornerY = oy - smile;
  const innerTop = oy - gap * 0.3;
  const innerBottom = oy + gap * 0.7 + smile;
  const outer = `M ${left} ${cornerY} Q ${ox - half * 0.5} ${innerTop - lip * 1.6} ${ox} ${innerTop - lip * 0.9} Q ${ox + half * 0.5} ${innerTop - lip * 1.6} ${right} ${cornerY}
                 Q ${ox + half * 0.55} ${innerBottom + lip * 2.2} ${ox} ${innerBottom + lip * 1.3} Q ${ox - half * 0.55} ${innerBottom + lip * 2.2} ${left} ${cornerY} Z`;
  const inner = `M ${left + lip * 0.4} ${cornerY} Q ${ox} ${innerTop - (innerBottom - innerTop) * 0.2} ${right - lip * 0.4} ${cornerY} Q ${ox} ${innerBottom + (innerBottom - innerTop) * 0.25} ${left + lip * 0.4} ${cornerY} Z`;
  const stroke = g.width / 256;
  if (gap < 0.8) {
    return `<path d="${outer}" fill="${p.lip_color}"/>
            <path d="M ${left + lip * 0.3} ${cornerY} Q ${ox} ${oy + smile * 0.8} ${right - lip * 0.3} ${cornerY}" fill="none" stroke="${shade(p.lip_color, 0.45)}" stroke-width="${stroke * 1.4}" stroke-linecap="round"/>`;
  }
  const teethHeight = Math.min(gap * 0.35, g.mouthHalfWidth * 0.28);
  return `<clipPath id="${id}"><path d="${inner}"/></clipPath>
    <path d="${outer}" fill="${p.lip_color}"/>
    <path d="${inner}" fill="#3a1216"/>
    <g clip-path="url(#${id})">
      <ellipse cx="${ox}" cy="${innerBottom + gap * 0.05}" rx="${half * 0.55}" ry="${gap * 0.35}" fill="#b5505a"/>
      <rect x="${left}" y="${innerTop - gap}" width="${2 * half}" height="${gap + teethHeight}" fill="#f4f1ea"/>
    </g>`;
}

/** A full smile widens the mouth by this share of its width (≥ 8 % reads as a smile, not a viseme). */
export const SMILE_WIDEN = 0.12;
/** A full smile lifts the mouth corners this many mouth half-widths above the centre (concern lowers them). */
export const SMILE_CORNER_LIFT = 0.22;

/**
 * A mouth sprite (straight-alpha RGBA, mouth centre at `centre`) bent by an expression: `curve` +1 widens it and
 * lifts the corners (smile), negative lowers them (concern). The viseme drawn in the sprite is kept: this moves
 * its pixels, it does not redraw the lips, so a smile while speaking still shows the spoken shape.
 */
export function curveMouth(
  image: RgbaImage,
  centre: { x: number; y: number },
  halfWidth: number,
  curve: number,
): RgbaImage {
  const widen = 1 + SMILE_WIDEN * Math.max(0, curve);
  const lift = SMILE_CORNER_LIFT * halfWidth * curve;
  const { width, height, data } = image;
  const out = new Uint8Array(data.length);
  for (let y = 0; y < height; y++) {
    for (let x = 0; x < width; x++) {
      const u = (x - centre.x) / halfWidth;
      const sx = centre.x + (x - centre.x) / widen;
      const sy = y + lift * Math.min(1.5, u * u);
      const x0 = Math.floor(sx),
        y0 = Math.floor(sy);
      const fx = sx - x0,
        fy = sy - y0;
      let r = 0,
        g = 0,
        b = 0,
        a = 0;
      for (const [px, py, w] of [
        [x0, y0, (1 - fx) * (1 - fy)],
        [x0 + 1, y0, fx * (1 - fy)],
        [x0, y0 + 1, (1 - fx) * fy],
        [x0 + 1, y0 + 1, fx * fy],
      ] as const) {
        if (w === 0 || px < 0 || py < 0 || px >= width || py >= height) continue;
        const i = (py * width + px) * 4;
        const alpha = data[i + 3] * w;
        r += data[i] * alpha;
        g += data[i + 1] * alpha;
        b += data[i + 2] * alpha;
        a += alpha;
      }
      if (a <= 0) continue;
      const o = (y * width + x) * 4;
      out[o] = r / a;
      out[o + 1] = g / a;
      out[o + 2] = b / a;
      out[o + 3] = Math.round(a);
    }
  }
  return { width, height, data: out };
}

/** Box (relative to the left eye centre) that covers both eyelids. */
export function eyelidBox(g: FaceGeometry): { x: number; y: number; width: number; height: number } {
  const padX = Math.ceil(g.eyeRadiusX * 1.3);
  const padY = Math.ceil(g.eyeRadiusY * 1.6);
  return { x: -padX, y: -padY, width: Math.ceil(g.rightEyeX - g.leftEyeX) + 2 * padX, height: 2 * padY };
}

/** Both upper eyelids lowered by `closure` (0..1), drawn with the left eye centre at (ox, oy). */
export function eyelidShape(
  p: FaceParams,
  g: FaceGeometry,
  closure: number,
  ox: number,
  oy: number,
  id: string,
): string {
  const stroke = g.width / 256;
  const eyes = [0, g.rightEyeX - g.leftEyeX].map((offset, i) => {
    const ex = ox + offset;
    const rx = g.eyeRadiusX * 1.08;
    const ry = g.eyeRadiusY * 1.12;
    const edge = oy - ry + closure * 1.25 * ry;
    const bow = ry * 0.4 * closure;
    return `<clipPath id="${id}-${i}"><ellipse cx="${ex}" cy="${oy}" rx="${rx}" ry="${ry}"/></clipPath>
      <g clip-path="url(#${id}-${i})"><path d="M ${ex - rx} ${oy - ry * 1.2} L ${ex + rx} ${oy - ry * 1.2} L ${ex + rx} ${edge - bow * 0.3} Q ${ex} ${edge + bow} ${ex - rx} ${edge - bow * 0.3} Z" fill="${shade(p.skin, 0.97)}"/>
      <path d="M ${ex - rx * 0.98} ${edge - bow * 0.3} Q ${ex} ${edge + bow} ${ex + rx * 0.98} ${edge - bow * 0.3}" fill="none" stroke="${shade(p.skin, 0.4)}" stroke-width="${stroke * (1 + closure)}" stroke-linecap="round"/></g>`;
  });
  return eyes.join('');
}
