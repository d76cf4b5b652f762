import type { MouthAnimation } from '../render/types.ts';

/** An RGBA image (4 bytes per pixel, row-major) to search for a face. */
export interface RgbaImage {
  rgba: Uint8Array | Buffer;
  width: number;
  height: number;
}

export type DetectionFailureReason = 'no_face' | 'multiple_faces' | 'low_confidence' | 'error';

export type MouthDetection =
  | { ok: true; animation: MouthAnimation }
  | { ok: false; reason: DetectionFailureReason; detail?: string };

/** One face as the detector reports it: box, detection score and the 68 iBUG landmarks, in image pixels. */
export interface RawFace {
  box: { x: number; y: number; width: number; height: number };
  score: number;
  landmarks: Array<{ x: number; y: number }>;
}
