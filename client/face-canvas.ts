/**
 * The contract between the pose stream and the browser renderer of client-rendered sessions (issue 47).
 *
 * The server's media clock produces one `FrameRequest` per video frame; a client-rendered session sends each one,
 * without its audio, over the `avatar` data channel (`PoseChannelMessage`), stamped with the audio track's RTP time
 * it belongs to. The browser draws it with `loadFaceCanvas` from the avatar's render kit
 * (`GET /avatars/{id}/render-kit?model=…`).
 */
import type { FrameRequest } from '../actors/render/types.ts';

/** One frame's pose as the `avatar` data channel carries it: the renderer's `FrameRequest` without its audio. */
export type FramePose = Omit<FrameRequest, 'audio'>;

/** What the service sends on a client-rendered session's `avatar` data channel (JSON text messages). */
export type PoseChannelMessage =
  /** First message: where the render kit is and how pose times map onto the audio track's RTP clock. */
  | { type: 'hello'; kitUrl: string; model: string; fps: number; width: number; height: number; rtpClockRate: number }
  /**
   * A frame's pose, sent ahead of its playout; `rtp` is the audio RTP timestamp it is shown with, less the track's
   * initial RTP offset (libwebrtc picks it at random per peer and wrtc does not expose it): the session's audio
   * sample clock at `rtpClockRate`, modulo 2^32. `sync` messages let the browser find the offset.
   */
  | { type: 'pose'; rtp: number; pose: FramePose }
  /** Poses at or after `fromRtp` (all, when absent) are void: interrupt or new audio replaced them. */
  | { type: 'flush'; fromRtp?: number }
  /**
   * Sent as the audio at `rtp` (same clock as a pose's `rtp`) leaves the service, a few times a second: the browser
   * relates it to the RTP timestamp it is playing to learn the track's offset (`client/pose-stream.ts`).
   */
  | { type: 'sync'; rtp: number };

/** A canvas that draws an avatar from its render kit, one pose at a time. */
export interface FaceCanvas {
  /** Draws this pose now (the caller picks the pose of the audio being heard). */
  draw(pose: FramePose): void;
  /** Releases the kit's images and GPU/2D resources; idempotent. */
  close(): void;
}

/**
 * Loads a render kit and returns a canvas drawer for it. Placeholder until the render kit lands (issue 47): it
 * refuses, so nothing can mistake it for a renderer.
 */
export async function loadFaceCanvas(
  _canvas: HTMLCanvasElement,
  _kitUrl: string,
  _signal?: AbortSignal,
): Promise<FaceCanvas> {
  throw new Error('client rendering is not built yet');
}
