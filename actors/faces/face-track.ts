/**
 * A clip's per-frame face track from detections on some of its frames: frames without a detection (not
 * sampled, or no face found) are interpolated linearly between their neighbours (held at the ends), then
 * every numeric field is smoothed with a centred moving average so landmarks do not jitter from frame to frame.
 */
import type { MouthAnimation, Point } from '../render/types.ts';

/**
 * Half width of the smoothing window, frames: ±3 at 25 fps averages 280 ms, which removes the detector's
 * frame-to-frame landmark noise (~1 px) while following head motion, which is slower.
 */
export const TRACK_SMOOTHING_RADIUS = 3;

/**
 * The track of `frameCount` frames from `detections` (frame index → animation, in frame pixels). Throws when
 * there is none. Every output frame has the shape of the first detection (fields and point counts).
 */
export function buildFaceTrack(
  frameCount: number,
  detections: Map<number, MouthAnimation>,
  radius = TRACK_SMOOTHING_RADIUS,
): MouthAnimation[] {
  const known = [...detections.keys()].filter((i) => i >= 0 && i < frameCount).sort((a, b) => a - b);
  if (known.length === 0) throw new Error('no detections to track');
  const template = detections.get(known[0])!;
  const vectors = new Map(known.map((i) => [i, flatten(detections.get(i)!, template)]));
  const width = vectors.get(known[0])!.length;
  const raw: Float64Array[] = [];
  let next = 0;
  for (let frame = 0; frame < frameCount; frame++) {
    while (next < known.length && known[next] < frame) next++;
    const after = known[Math.min(next, known.length - 1)];
    const before = known[Math.max(0, known[next] === frame ? next : next - 1)];
    const a = vectors.get(before)!;
    const b = vectors.get(after)!;
    const t = after === before || frame <= before ? 0 : frame >= after ? 1 : (frame - before) / (after - before);
    const v = new Float64Array(width);
    for (let k = 0; k < width; k++) v[k] = a[k] + (b[k] - a[k]) * t;
    raw.push(v);
  }
  const track: MouthAnimation[] = [];
  for (let frame = 0; frame < frameCount; frame++) {
    const from = Math.max(0, frame - radius);
    const to = Math.min(frameCount - 1, frame + radius);
    const v = new Float64Array(width);
    for (let f = from; f <= to; f++) for (let k = 0; k < width; k++) v[k] += raw[f][k];
    for (let k = 0; k < width; k++) v[k] /= to - from + 1;
    track.push(unflatten(v, template));
  }
  return track;
}

const round2 = (n: number) => Math.round(n * 100) / 100;

/** The numeric fields of an animation in a fixed order (the template's shape; missing points repeat the template's). */
function flatten(a: MouthAnimation, template: MouthAnimation): number[] {
  const out: number[] = [
    a.face_box.x,
    a.face_box.y,
    a.face_box.width,
    a.face_box.height,
    a.mouth_center.x,
    a.mouth_center.y,
    a.mouth_width,
    a.confidence,
  ];
  const points = (list: Point[] | undefined, shape: Point[] | undefined) => {
    for (let i = 0; i < (shape?.length ?? 0); i++) {
      const p = list?.[i] ?? shape![i];
      out.push(p.x, p.y);
    }
  };
  points([a.left_eye], [template.left_eye]);
  points([a.right_eye], [template.right_eye]);
  points(a.outer_lip, template.outer_lip);
  points(a.inner_lip, template.inner_lip);
  points(a.left_eye_contour, template.left_eye_contour);
  points(a.right_eye_contour, template.right_eye_contour);
  return out;
}

function unflatten(v: Float64Array, template: MouthAnimation): MouthAnimation {
  let k = 8;
  const takePoints = (count: number): Point[] => {
    const list: Point[] = [];
    for (let i = 0; i < count; i++, k += 2) list.push({ x: round2(v[k]), y: round2(v[k + 1]) });
    return list;
  };
  const [leftEye] = takePoints(1);
  const [rightEye] = takePoints(1);
  const outer = takePoints(template.outer_lip.length);
  const inner = takePoints(template.inner_lip.length);
  const leftContour = template.left_eye_contour ? takePoints(template.left_eye_contour.length) : undefined;
  const rightContour = template.right_eye_contour ? takePoints(template.right_eye_contour.length) : undefined;
  return {
    face_box: { x: round2(v[0]), y: round2(v[1]), width: round2(v[2]), height: round2(v[3]) },
    mouth_center: { x: round2(v[4]), y: round2(v[5]) },
    mouth_width: round2(v[6]),
    outer_lip: outer,
    inner_lip: inner,
    left_eye: leftEye,
    right_eye: rightEye,
    ...(leftContour ? { left_eye_contour: leftContour } : {}),
    ...(rightContour ? { right_eye_contour: rightContour } : {}),
    confidence: Math.round(v[7] * 1000) / 1000,
    detector: template.detector,
  };
}
