import type { MouthAnimation } from '../render/types.ts';

/** An RGBA image (4 bytes per pixel, row-major) to search for a face. */
export interface RgbaImage {
  rgba: Uint8Array | Buffer;
  width: number;
  height: number;
  /**
   * Where the face was on a neighbouring video frame: the detector then runs only the landmark net on that box
   * (a 112² input, ~20x cheaper than the SSD pass over the whole frame), and falls back to a full detection when
   * the landmarks say the face has moved out of it.
   */
  near?: FaceHint;
}

/** A face found on a neighbouring frame (`faceHint` in landmarks.ts), in that frame's pixels. */
export interface FaceHint {
  box: { x: number; y: number; width: number; height: number };
  /** Mean of the eye centres and the mouth centre. */
  anchor: { x: number; y: number };
  eyeDistance: number;
  score: number;
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
