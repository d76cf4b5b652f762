import type { Rgb } from '../raster.ts';

/**
 * Parameters of a drawn face (`manifest.metadata.face`). Positions and sizes are fractions of the frame
 * so one parameter set renders at any resolution. Unknown or missing keys fall back to the defaults.
 */
export interface FaceParams {
  background: Rgb;
  skin: Rgb;
  hair: Rgb;
  iris: Rgb;
  lips: Rgb;
  mouthInside: Rgb;
  /** Head ellipse radii. */
  faceWidth: number;
  faceHeight: number;
  /** Vertical centre of the head. */
  faceY: number;
  eyeY: number;
  eyeSpacing: number;
  eyeSize: number;
  mouthY: number;
  mouthWidth: number;
  /** Seconds between blinks, on average. */
  blinkEvery: number;
}

export const DEFAULT_FACE: FaceParams = {
  background: [38, 52, 74],
  skin: [236, 196, 164],
  hair: [74, 48, 34],
  iris: [60, 110, 160],
  lips: [190, 92, 96],
  mouthInside: [70, 20, 28],
  faceWidth: 0.3,
  faceHeight: 0.38,
  faceY: 0.52,
  eyeY: 0.45,
  eyeSpacing: 0.11,
  eyeSize: 0.035,
  mouthY: 0.66,
  mouthWidth: 0.09,
  blinkEvery: 4,
};

export function faceParamsOf(raw: unknown): FaceParams {
  const out: FaceParams = { ...DEFAULT_FACE };
  if (!raw || typeof raw !== 'object') return out;
  const src = raw as Record<string, unknown>;
  for (const key of Object.keys(DEFAULT_FACE) as Array<keyof FaceParams>) {
    const value = src[key];
    const fallback = DEFAULT_FACE[key];
    if (Array.isArray(fallback)) {
      if (Array.isArray(value) && value.length === 3 && value.every((v) => typeof v === 'number' && v >= 0 && v <= 255)) {
        (out as unknown as Record<string, unknown>)[key] = value as Rgb;
      }
    } else if (typeof value === 'number' && Number.isFinite(value) && value > 0 && value < 100) {
      (out as unknown as Record<string, unknown>)[key] = value;
    }
  }
  return out;
}

/** Deterministic blink: a 4-frame lid close every ~`blinkEvery` seconds, jittered by a hash of the cycle. */
export function blinkAmount(frameIdx: number, fps: number, blinkEvery: number): number {
  const period = Math.max(2, Math.round(blinkEvery * fps));
  // Half a period of offset: no session starts mid-blink.
  const shifted = frameIdx + Math.floor(period / 2);
  const cycle = Math.floor(shifted / period);
  const jitter = ((cycle * 2654435761) >>> 0) % Math.max(1, Math.round(period / 3));
  const phase = shifted - cycle * period - jitter;
  const closing = [0.5, 1, 1, 0.5];
  return phase >= 0 && phase < closing.length ? closing[phase] : 0;
}
