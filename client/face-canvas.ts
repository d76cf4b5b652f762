/**
 * The contract between the pose stream and the browser renderer of client-rendered sessions (issue 47).
 *
 * The server's media clock produces one `FrameRequest` per video frame; a client-rendered session sends each one,
 * without its audio, over the `avatar` data channel (`PoseChannelMessage`), stamped with the audio track's RTP time
 * it belongs to. The browser draws it with `loadFaceCanvas` from the avatar's render kit
 * (`GET /avatars/{id}/render-kit?model=…`).
 */
import type { FrameRequest } from '../actors/render/types.ts';
import { i420ToRgba } from '../actors/render/i420.ts';
import { loadRenderKit } from './render-kit.ts';

/** One frame's pose as the `avatar` data channel carries it: the renderer's `FrameRequest` without its audio. */
export type FramePose = Omit<FrameRequest, 'audio'>;

/** What the service sends on a client-rendered session's `avatar` data channel (JSON text messages). */
export type PoseChannelMessage =
  /** First message: where the render kit is and how pose times map onto the audio track's RTP clock. */
  | { type: 'hello'; kitUrl: string; model: string; fps: number; width: number; height: number; rtpClockRate: number }
  /** A frame's pose, sent ahead of its playout; `rtp` is the audio RTP timestamp it is shown with. */
  | { type: 'pose'; rtp: number; pose: FramePose }
  /** Poses at or after `fromRtp` (all, when absent) are void: interrupt or new audio replaced them. */
  | { type: 'flush'; fromRtp?: number };

/** A canvas that draws an avatar from its render kit, one pose at a time. */
export interface FaceCanvas {
  /** Draws this pose now (the caller picks the pose of the audio being heard). */
  draw(pose: FramePose): void;
  /** Releases the kit's images and GPU/2D resources; idempotent. */
  close(): void;
}

/**
 * Loads a render kit and returns a canvas drawer for it: the canvas takes the kit's resolution, and each `draw` runs
 * the server's renderer on the pose (`client/render-kit.ts`) and puts the I420 frame, converted to RGB as the
 * server's own `i420ToRgba` does, into a 2D canvas (measured against WebGL in docs/performance.md: the conversion
 * is a small part of a frame's cost).
 */
export async function loadFaceCanvas(
  canvas: HTMLCanvasElement,
  kitUrl: string,
  signal?: AbortSignal,
): Promise<FaceCanvas> {
  const kit = await loadRenderKit(kitUrl, signal);
  canvas.width = kit.width;
  canvas.height = kit.height;
  const context = canvas.getContext('2d', { alpha: false });
  if (!context) throw new Error('face canvas: no 2D context');
  const image = context.createImageData(kit.width, kit.height);
  const rgba = new Uint8Array(image.data.buffer, image.data.byteOffset, image.data.byteLength);
  let closed = false;
  return {
    draw(pose) {
      if (closed) return;
      i420ToRgba(kit.renderer.render(pose as FrameRequest), rgba);
      context.putImageData(image, 0, 0);
    },
    close() {
      if (closed) return;
      closed = true;
      // The kit's pieces go with the renderer; the canvas keeps its last picture.
      (kit as { renderer: unknown }).renderer = null;
    },
  };
}
