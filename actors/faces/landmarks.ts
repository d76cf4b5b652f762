import type { MouthAnimation, Point } from '../render/types.ts';
import type { FaceHint, MouthDetection, RawFace } from './types.ts';

/** Candidates below this score are detector noise and take no part in the several-faces rule. */
export const MIN_CANDIDATE_SCORE = 0.3;
/** The chosen face must score at least this, or its landmarks are too unreliable to animate (low_confidence). */
export const MIN_FACE_SCORE = 0.5;
/** The largest face must be this many times the area of the next one to count as the portrait's subject. */
export const DOMINANCE_AREA_RATIO = 2;

export const DETECTOR_NAME = 'face-api/ssd_mobilenetv1+landmark68';

// iBUG 68-point indices.
const LEFT_EYE = range(36, 42);
const RIGHT_EYE = range(42, 48);
const OUTER_LIP = range(48, 60);
const INNER_LIP = range(60, 68);
/** iBUG landmark 30: the tip of the nose, which moves with the head and not with the mouth or eyelids. */
const NOSE_TIP = 30;
const LANDMARK_COUNT = 68;

/**
 * Applies the failure rules to the detector's faces and turns the chosen face into `metadata.animation`:
 * no face → no_face; several faces with none dominant (largest < 2× the next in area) → multiple_faces;
 * dominant face scoring under `MIN_FACE_SCORE` → low_confidence.
 */
export function toMouthDetection(faces: RawFace[]): MouthDetection {
  const candidates = faces.filter((f) => f.score >= MIN_CANDIDATE_SCORE && f.landmarks.length === LANDMARK_COUNT);
  if (candidates.length === 0) return { ok: false, reason: 'no_face' };
  const byArea = [...candidates].sort((a, b) => area(b) - area(a));
  if (byArea.length > 1 && area(byArea[0]) < DOMINANCE_AREA_RATIO * area(byArea[1])) {
    return { ok: false, reason: 'multiple_faces', detail: `${byArea.length} faces of similar size` };
  }
  const face = byArea[0];
  if (face.score < MIN_FACE_SCORE)
    return { ok: false, reason: 'low_confidence', detail: `score ${face.score.toFixed(2)} < ${MIN_FACE_SCORE}` };
  return { ok: true, animation: animationFromLandmarks(face) };
}

export function animationFromLandmarks(face: RawFace): MouthAnimation {
  const at = (indices: number[]) => indices.map((i) => roundPoint(face.landmarks[i]));
  const outer = at(OUTER_LIP);
  const leftEye = at(LEFT_EYE);
  const rightEye = at(RIGHT_EYE);
  // Mouth corners are points 48 and 54 of the outer contour.
  const leftCorner = face.landmarks[48];
  const rightCorner = face.landmarks[54];
  return {
    face_box: {
      x: round(face.box.x),
      y: round(face.box.y),
      width: round(face.box.width),
      height: round(face.box.height),
    },
    mouth_center: centroid(outer),
    mouth_width: round(Math.hypot(rightCorner.x - leftCorner.x, rightCorner.y - leftCorner.y)),
    outer_lip: outer,
    inner_lip: at(INNER_LIP),
    left_eye: centroid(leftEye),
    right_eye: centroid(rightEye),
    left_eye_contour: leftEye,
    right_eye_contour: rightEye,
    nose_tip: roundPoint(face.landmarks[NOSE_TIP]),
    confidence: Math.round(face.score * 1000) / 1000,
    detector: DETECTOR_NAME,
  };
}

/**
 * What the detector needs to follow this face onto a neighbouring video frame: the box, the centre of eyes and
 * mouth (which moves with the head) and the eye distance (which tells a face from a landmark fit on background).
 */
export function faceHint(a: MouthAnimation): FaceHint {
  return {
    box: a.face_box,
    anchor: faceAnchor(a),
    eyeDistance: Math.hypot(a.right_eye.x - a.left_eye.x, a.right_eye.y - a.left_eye.y),
    score: a.confidence,
  };
}

/** The mean of the two eye centres and the mouth centre. */
export function faceAnchor(a: MouthAnimation): Point {
  return {
    x: (a.left_eye.x + a.right_eye.x + a.mouth_center.x) / 3,
    y: (a.left_eye.y + a.right_eye.y + a.mouth_center.y) / 3,
  };
}

/** Maps every coordinate of an animation through `x' = (x - left) * scale`, `y' = (y - top) * scale`. */
export function transformAnimation(a: MouthAnimation, left: number, top: number, scale: number): MouthAnimation {
  const p = (q: Point): Point => ({ x: round((q.x - left) * scale), y: round((q.y - top) * scale) });
  return {
    ...a,
    face_box: {
      x: round((a.face_box.x - left) * scale),
      y: round((a.face_box.y - top) * scale),
      width: round(a.face_box.width * scale),
      height: round(a.face_box.height * scale),
    },
    mouth_center: p(a.mouth_center),
    mouth_width: round(a.mouth_width * scale),
    outer_lip: a.outer_lip.map(p),
    inner_lip: a.inner_lip.map(p),
    left_eye: p(a.left_eye),
    right_eye: p(a.right_eye),
    ...(a.left_eye_contour ? { left_eye_contour: a.left_eye_contour.map(p) } : {}),
    ...(a.right_eye_contour ? { right_eye_contour: a.right_eye_contour.map(p) } : {}),
    ...(a.nose_tip ? { nose_tip: p(a.nose_tip) } : {}),
  };
}

function area(face: RawFace): number {
  return face.box.width * face.box.height;
}

function centroid(points: Point[]): Point {
  const sum = points.reduce((s, q) => ({ x: s.x + q.x, y: s.y + q.y }), { x: 0, y: 0 });
  return { x: round(sum.x / points.length), y: round(sum.y / points.length) };
}

function range(from: number, to: number): number[] {
  return Array.from({ length: to - from }, (_, i) => from + i);
}

/** Sub-pixel precision is noise for the renderer; two decimals keep manifests small and stable. */
const round = (v: number) => Math.round(v * 100) / 100;
const roundPoint = (q: Point): Point => ({ x: round(q.x), y: round(q.y) });
