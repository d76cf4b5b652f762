/**
 * Per-avatar preparation for a Wav2Lip-family model, done once when a session opens the avatar, and the per-frame
 * paste-back of the generated face.
 *
 * - Face box: the avatar's stored landmarks (`metadata.animation.face_box`, from face-api; on a video avatar each
 *   loop frame's own tracked box, `faceAt`), extended downwards by
 *   `CHIN_PAD` of its height (Wav2Lip pads its detector box by 10 px at the bottom so the chin is inside), made
 *   square around its centre and snapped to even pixels (I420 chroma stays aligned).
 * - Model input: the crop scaled to S×S, in BGR order (Wav2Lip reads frames with OpenCV), values in [0, 1]:
 *   channels 0–2 the crop with its lower half zeroed, channels 3–5 the unmasked crop as reference.
 * - Paste-back: the model's S×S output scaled back to the crop and blended with a feathered mask that is zero on the
 *   upper half of the crop (eyes and above are never touched) and fades in below the midline and towards the sides
 *   and bottom, so no seam shows. Only the lower half of the crop is converted to I420 per frame.
 */
import sharp from 'sharp';
import { rgbaToI420 } from '../render/i420.ts';
import { loadBundleFrame, type RgbaImage } from '../render/image.ts';
import { blendPatch, patchFromRgba } from '../render/patch.ts';
import { loopFrameIndex, readClipSource } from '../render/clip-loop.ts';
import { holdStaticBlocks } from '../render/static-hold.ts';
import type { AvatarSource, I420Frame, MouthAnimation } from '../render/types.ts';

/** Wav2Lip's `pads = [0, 10, 0, 0]` at its usual 720p input: roughly a tenth of the face height below the chin. */
const CHIN_PAD = 0.1;
/** Width of the mask's fade, as a fraction of the crop side: wide enough to hide the seam, narrow enough to keep the mouth. */
const FEATHER = 0.12;
/** Without stored landmarks the face is assumed to fill this central fraction of a portrait's width. */
const FALLBACK_FACE_FRACTION = 0.5;

export interface FaceCrop {
  /** Top-left of the square crop in avatar pixels (even). */
  x: number;
  y: number;
  /** Side of the crop in avatar pixels (a multiple of 4). */
  side: number;
}

/**
 * Per-frame faces one prepared video avatar holds (base frame, model input, paste-back half): 64 MiB keeps the
 * whole 150-frame loop of a 512² avatar at S = 96 (~0.7 MB a frame); a larger S or avatar holds every 2nd, 3rd, …
 * frame, so speech plays the loop at a lower frame rate. The session process holds one per open avatar and face
 * size (`PreparedFaceCache`, ≤ 8) and each render worker a few (`MAX_WORKER_FACES`).
 */
export const NEURAL_LOOP_FACE_BYTES = 64 * 1024 * 1024;

/** One frame's face: the frame, where its face is, the model's input and the paste-back half. */
export interface PreparedFrameFace {
  /** Model face size S. */
  size: number;
  width: number;
  height: number;
  /** The avatar frame as I420; every generated frame starts as a copy of it. */
  base: I420Frame;
  crop: FaceCrop;
  /** [6, S, S]: masked face (BGR) then reference (BGR), in [0, 1]. */
  faceInput: Float32Array;
  /** The crop's lower half (rows side/2 … side−1), straight RGBA, alpha = the feathered mask. */
  lowerHalf: RgbaImage;
}

export interface PreparedLoop {
  /** Loop frames in the bundle. */
  count: number;
  /** Every `stride`th frame is held. */
  stride: number;
  frames: PreparedFrameFace[];
}

/** The avatar's face: its still (`frame.png`) and, on a video avatar, every held loop frame's (`faceAt`). */
export interface PreparedFace extends PreparedFrameFace {
  loop?: PreparedLoop;
}

function even(value: number): number {
  return Math.round(value / 2) * 2;
}

/** The square crop around the stored face box, inside the frame. */
export function faceCropOf(avatar: AvatarSource): FaceCrop {
  return faceCropAround(avatar.manifest.metadata.animation?.face_box, avatar.manifest.width, avatar.manifest.height);
}

/** The square crop around `box` (none: the central fallback) inside a `width × height` frame. */
function faceCropAround(box: MouthAnimation['face_box'] | undefined, width: number, height: number): FaceCrop {
  let cx: number;
  let cy: number;
  let side: number;
  if (box && box.width > 0 && box.height > 0) {
    const padded = box.height * (1 + CHIN_PAD);
    side = Math.max(box.width, padded);
    cx = box.x + box.width / 2;
    cy = box.y + padded / 2;
  } else {
    side = Math.min(width, height) * FALLBACK_FACE_FRACTION;
    cx = width / 2;
    cy = height / 2;
  }
  // A multiple of 4, so the pasted lower half also starts on an even row.
  const maxSide = Math.floor(Math.min(width, height) / 4) * 4;
  const s = Math.max(4, Math.min(maxSide, Math.round(side / 4) * 4));
  const x = Math.max(0, Math.min(Math.floor((width - s) / 2) * 2, even(cx - s / 2)));
  const y = Math.max(0, Math.min(Math.floor((height - s) / 2) * 2, even(cy - s / 2)));
  return { x, y, side: s };
}

/** Alpha of the paste-back mask at crop pixel (u, v): 0 on the upper half, smooth ramps at the other edges. */
function maskAlpha(u: number, v: number, side: number): number {
  const feather = Math.max(1, side * FEATHER);
  const ramp = (d: number): number => {
    const t = Math.min(1, Math.max(0, d / feather));
    return t * t * (3 - 2 * t);
  };
  const top = ramp(v - side / 2);
  const sides = Math.min(ramp(u + 0.5), ramp(side - 0.5 - u));
  const bottom = ramp(side - 0.5 - v);
  return top * sides * bottom;
}

export async function prepareFace(avatar: AvatarSource, size: number): Promise<PreparedFace> {
  if (!Number.isInteger(size) || size < 2) throw new RangeError('face size must be an integer ≥ 2');
  const still = await prepareFrameFace(await loadBundleFrame(avatar), faceCropOf(avatar), size);
  const clip = avatar.clip ?? (await readClipSource(avatar.dir, avatar.manifest));
  if (!clip) return still;
  return { ...still, loop: await prepareLoopFaces(clip, avatar.manifest.width, avatar.manifest.height, size) };
}

/**
 * A video avatar's loop, prepared frame by frame (Wav2Lip's video path): each held frame's crop around its own
 * tracked face box, its model input and its paste-back half. Held frames are every `stride`th within
 * `NEURAL_LOOP_FACE_BYTES`.
 */
async function prepareLoopFaces(
  clip: NonNullable<AvatarSource['clip']>,
  width: number,
  height: number,
  size: number,
): Promise<PreparedLoop> {
  const track = JSON.parse(Buffer.from(clip.trackJson).toString('utf8')) as MouthAnimation[];
  const count = Math.min(clip.framePngs.length, track.length);
  if (count === 0) throw new Error('video avatar has no loop frames');
  const box = track[0].face_box;
  const cropSide = Math.max(box.width, box.height * (1 + CHIN_PAD));
  const perFrame = (width * height * 3) / 2 + 6 * size * size * 4 + cropSide * cropSide * 2;
  const stride = Math.max(1, Math.ceil((count * perFrame) / NEURAL_LOOP_FACE_BYTES));
  const frames: PreparedFrameFace[] = [];
  for (let i = 0; i < count; i += stride) {
    const { data } = await sharp(Buffer.from(clip.framePngs[i]))
      .resize(width, height, { fit: 'cover' })
      .ensureAlpha()
      .raw()
      .toBuffer({ resolveWithObject: true });
    const image: RgbaImage = { width, height, data: new Uint8Array(data.buffer, data.byteOffset, data.length) };
    const frame = await prepareFrameFace(image, faceCropAround(track[i].face_box, width, height), size);
    // Still areas held still from frame to frame, as the CPU renderer's loop holds them (`render/static-hold.ts`).
    // Its stride can be larger than the CPU loop's, so a frame here and the CPU renderer's at the same index may
    // differ by up to twice the hold's bound; they meet only when a turn falls back to the CPU renderer.
    if (frames.length > 0) holdStaticBlocks(frames[frames.length - 1].base, frame.base);
    frames.push(frame);
  }
  return { count, stride, frames };
}

/** The prepared face of the frame shown at session frame `frameIdx`: the loop's frame on a video avatar, else the still. */
export function faceAt(face: PreparedFace, frameIdx: number): PreparedFrameFace {
  if (!face.loop) return face;
  return face.loop.frames[Math.floor(loopFrameIndex(frameIdx, face.loop.count) / face.loop.stride)];
}

async function prepareFrameFace(image: RgbaImage, crop: FaceCrop, size: number): Promise<PreparedFrameFace> {
  const raw = { raw: { width: image.width, height: image.height, channels: 4 as const } };
  const scaled = await sharp(Buffer.from(image.data.buffer, image.data.byteOffset, image.data.length), raw)
    .extract({ left: crop.x, top: crop.y, width: crop.side, height: crop.side })
    .resize(size, size, { kernel: 'cubic' })
    .raw()
    .toBuffer();
  const plane = size * size;
  const faceInput = new Float32Array(6 * plane);
  for (let i = 0; i < plane; i++) {
    const o = i * 4;
    // BGR, as OpenCV hands frames to Wav2Lip.
    faceInput[3 * plane + i] = scaled[o + 2] / 255;
    faceInput[4 * plane + i] = scaled[o + 1] / 255;
    faceInput[5 * plane + i] = scaled[o] / 255;
  }
  // The masked copy: upper half as the reference, lower half zero (Wav2Lip: img_masked[:, S//2:] = 0).
  const upperRows = Math.floor(size / 2);
  for (let c = 0; c < 3; c++)
    faceInput.set(faceInput.subarray((3 + c) * plane, (3 + c) * plane + upperRows * size), c * plane);

  const half = crop.side / 2;
  const lowerHalf: RgbaImage = { width: crop.side, height: half, data: new Uint8Array(crop.side * half * 4) };
  for (let v = 0; v < half; v++) {
    for (let u = 0; u < crop.side; u++) {
      const src = ((crop.y + half + v) * image.width + crop.x + u) * 4;
      const dst = (v * crop.side + u) * 4;
      lowerHalf.data[dst] = image.data[src];
      lowerHalf.data[dst + 1] = image.data[src + 1];
      lowerHalf.data[dst + 2] = image.data[src + 2];
      lowerHalf.data[dst + 3] = Math.round(255 * maskAlpha(u, half + v, crop.side));
    }
  }
  return {
    size,
    width: image.width,
    height: image.height,
    base: rgbaToI420(image.data, image.width, image.height),
    crop,
    faceInput,
    lowerHalf,
  };
}

/** A copy of the avatar frame (idle frames, and the start of every generated one). */
export function baseFrame(face: PreparedFrameFace): I420Frame {
  return { width: face.base.width, height: face.base.height, data: face.base.data.slice() };
}

/**
 * The frame with the model's output [3, S, S] (BGR, [0, 1]) pasted back: bilinear scaling to the crop, the
 * feathered mask, only the lower half of the crop.
 */
export function composeFace(face: PreparedFrameFace, output: Float32Array): I420Frame {
  const { size, crop, lowerHalf } = face;
  const plane = size * size;
  if (output.length !== 3 * plane) throw new RangeError(`model output must hold 3 × ${size} × ${size} values`);
  const half = crop.side / 2;
  const patchImage: RgbaImage = { width: crop.side, height: half, data: new Uint8Array(lowerHalf.data.length) };
  const scale = size / crop.side;
  const maxIndex = size - 1;
  for (let v = 0; v < half; v++) {
    const sy = Math.min(maxIndex, Math.max(0, (half + v + 0.5) * scale - 0.5));
    const y0 = Math.floor(sy);
    const y1 = Math.min(maxIndex, y0 + 1);
    const fy = sy - y0;
    for (let u = 0; u < crop.side; u++) {
      const o = (v * crop.side + u) * 4;
      const alpha = lowerHalf.data[o + 3];
      patchImage.data[o + 3] = alpha;
      if (alpha === 0) continue;
      const sx = Math.min(maxIndex, Math.max(0, (u + 0.5) * scale - 0.5));
      const x0 = Math.floor(sx);
      const x1 = Math.min(maxIndex, x0 + 1);
      const fx = sx - x0;
      const w00 = (1 - fx) * (1 - fy);
      const w10 = fx * (1 - fy);
      const w01 = (1 - fx) * fy;
      const w11 = fx * fy;
      const i00 = y0 * size + x0;
      const i10 = y0 * size + x1;
      const i01 = y1 * size + x0;
      const i11 = y1 * size + x1;
      // Output channel 0 is blue, 2 is red.
      for (let c = 0; c < 3; c++) {
        const p = output.subarray(c * plane, (c + 1) * plane);
        const value = (p[i00] * w00 + p[i10] * w10 + p[i01] * w01 + p[i11] * w11) * 255;
        patchImage.data[o + 2 - c] = value <= 0 ? 0 : value >= 255 ? 255 : value + 0.5;
      }
    }
  }
  const frame = baseFrame(face);
  const patch = patchFromRgba(patchImage, 0, 0, crop.side, half);
  patch.x = crop.x;
  patch.y = crop.y + half;
  blendPatch(frame, patch);
  return frame;
}
