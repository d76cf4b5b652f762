import { loadFaceApi, type FaceApi } from './face-api-runtime.ts';
import { animationFromLandmarks, faceAnchor, toMouthDetection } from './landmarks.ts';
import type { FaceHint, MouthDetection, RawFace, RgbaImage } from './types.ts';

/** SSD MobileNet's own floor; the rules in landmarks.ts decide which of these count. */
const DETECTOR_MIN_CONFIDENCE = 0.2;
/** More faces than this in a portrait is already a multiple_faces failure; no need to landmark them all. */
const MAX_FACES = 10;

/**
 * A face followed from a neighbouring frame may have moved this fraction of its box width: further, part of it
 * lies outside the box the landmarks were fitted in, so the fit is not trusted and the frame is searched whole.
 */
const MAX_TRACK_SHIFT = 0.15;
/** The followed face's eye distance within this ratio of the hint's, or the fit is not trusted (searched whole). */
const MAX_EYE_DISTANCE_RATIO = 1.25;
/** Boxes smaller than this are too small to fit landmarks in; the frame is searched whole. */
const MIN_TRACK_BOX_SIDE = 24;

/**
 * Detects faces and 68 landmarks in one image (piscina task), then applies the portrait rules. With `near`
 * (a video frame whose neighbour's face is known) only the landmark net runs, on that box, when it confirms the face.
 */
export default async function detect(image: RgbaImage): Promise<MouthDetection> {
  const faceapi = await loadFaceApi();
  const { tf } = faceapi;
  const { width, height } = image;
  const rgba = image.rgba instanceof Uint8Array ? image.rgba : new Uint8Array(image.rgba as ArrayBufferLike);
  if (rgba.length !== width * height * 4)
    return { ok: false, reason: 'error', detail: 'rgba length does not match width × height × 4' };
  const rgb = new Int32Array(width * height * 3);
  for (let i = 0, o = 0; i < rgba.length; i += 4, o += 3) {
    rgb[o] = rgba[i];
    rgb[o + 1] = rgba[i + 1];
    rgb[o + 2] = rgba[i + 2];
  }
  const input = tf.tensor3d(rgb, [height, width, 3], 'int32');
  try {
    if (image.near) {
      const followed = await followFace(faceapi, input, width, height, image.near);
      if (followed) return { ok: true, animation: followed };
    }
    const results = await faceapi
      .detectAllFaces(
        input,
        new faceapi.SsdMobilenetv1Options({ minConfidence: DETECTOR_MIN_CONFIDENCE, maxResults: MAX_FACES }),
      )
      .withFaceLandmarks();
    const faces: RawFace[] = results.map((r) => ({
      box: { x: r.detection.box.x, y: r.detection.box.y, width: r.detection.box.width, height: r.detection.box.height },
      score: r.detection.score,
      landmarks: r.landmarks.positions.map((p) => ({ x: p.x, y: p.y })),
    }));
    return toMouthDetection(faces);
  } finally {
    input.dispose();
  }
}

/** Landmarks fitted in the hint's box (no SSD pass); the box moves with them. Null when the fit is not trusted. */
async function followFace(faceapi: FaceApi, input: unknown, width: number, height: number, near: FaceHint) {
  const left = Math.max(0, Math.floor(near.box.x));
  const top = Math.max(0, Math.floor(near.box.y));
  const cropWidth = Math.min(width, Math.ceil(near.box.x + near.box.width)) - left;
  const cropHeight = Math.min(height, Math.ceil(near.box.y + near.box.height)) - top;
  if (cropWidth < MIN_TRACK_BOX_SIDE || cropHeight < MIN_TRACK_BOX_SIDE) return null;
  const crop = faceapi.tf.slice(input, [top, left, 0], [cropHeight, cropWidth, 3]);
  let positions;
  try {
    positions = (await faceapi.detectFaceLandmarks(crop)).positions;
  } finally {
    crop.dispose();
  }
  const landmarks = positions.map((p) => ({ x: p.x + left, y: p.y + top }));
  const unplaced = animationFromLandmarks({ box: near.box, score: near.score, landmarks });
  const anchor = faceAnchor(unplaced);
  const dx = anchor.x - near.anchor.x;
  const dy = anchor.y - near.anchor.y;
  const eyeDistance = Math.hypot(
    unplaced.right_eye.x - unplaced.left_eye.x,
    unplaced.right_eye.y - unplaced.left_eye.y,
  );
  const eyeRatio = eyeDistance / Math.max(1e-6, near.eyeDistance);
  if (Math.hypot(dx, dy) > MAX_TRACK_SHIFT * near.box.width) return null;
  if (!(eyeRatio <= MAX_EYE_DISTANCE_RATIO && eyeRatio >= 1 / MAX_EYE_DISTANCE_RATIO)) return null;
  const box = { x: near.box.x + dx, y: near.box.y + dy, width: near.box.width, height: near.box.height };
  return animationFromLandmarks({ box, score: near.score, landmarks });
}
