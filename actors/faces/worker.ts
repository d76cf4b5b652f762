import { loadFaceApi } from './face-api-runtime.ts';
import { toMouthDetection } from './landmarks.ts';
import type { MouthDetection, RawFace, RgbaImage } from './types.ts';

/** SSD MobileNet's own floor; the rules in landmarks.ts decide which of these count. */
const DETECTOR_MIN_CONFIDENCE = 0.2;
/** More faces than this in a portrait is already a multiple_faces failure; no need to landmark them all. */
const MAX_FACES = 10;

/** Detects faces and 68 landmarks in one image (piscina task), then applies the portrait rules. */
export default async function detect(image: RgbaImage): Promise<MouthDetection> {
  const faceapi = await loadFaceApi();
  const { tf } = faceapi;
  const { width, height } = image;
  const rgba = image.rgba instanceof Uint8Array ? image.rgba : new Uint8Array(image.rgba as ArrayBufferLike);
  if (rgba.length !== width * height * 4) return { ok: false, reason: 'error', detail: 'rgba length does not match width × height × 4' };
  const rgb = new Int32Array(width * height * 3);
  for (let i = 0, o = 0; i < rgba.length; i += 4, o += 3) {
    rgb[o] = rgba[i];
    rgb[o + 1] = rgba[i + 1];
    rgb[o + 2] = rgba[i + 2];
  }
  const input = tf.tensor3d(rgb, [height, width, 3], 'int32');
  try {
    const results = await faceapi
      .detectAllFaces(input, new faceapi.SsdMobilenetv1Options({ minConfidence: DETECTOR_MIN_CONFIDENCE, maxResults: MAX_FACES }))
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
