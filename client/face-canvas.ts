/**
 * The contract between the pose stream and the browser renderer of client-rendered sessions (issue 47).
 *
 * The server's media clock produces one `FrameRequest` per video frame; a client-rendered session sends each one,
 * without its audio, over the `avatar` data channel (`PoseChannelMessage`), stamped with the audio track's RTP time
 * it belongs to. The browser draws it with `loadFaceCanvas` from the avatar's render kit
 * (`GET /avatars/{id}/render-kit?model=…`).
 */
import type { FrameRequest, I420Frame } from '../actors/render/types.ts';
import { i420ToRgba } from '../actors/render/i420.ts';
import { loadRenderKit, type LoadedKit } from './render-kit.ts';
import { i420WebGlDrawer } from './i420-webgl.ts';

/** One frame's pose as the `avatar` data channel carries it: the renderer's `FrameRequest` without its audio. */
export type FramePose = Omit<FrameRequest, 'audio'>;

/** What the service sends on a client-rendered session's `avatar` data channel (JSON text messages). */
export type PoseChannelMessage =
  /**
   * First message: where the render kit is and how pose times map onto the audio track's RTP clock. `channelAudio`:
   * the codecs in which the service can send the session's audio on this channel instead of the track
   * (`ChannelAudioRequest`); absent from a service that cannot.
   */
  | {
      type: 'hello';
      kitUrl: string;
      model: string;
      fps: number;
      width: number;
      height: number;
      rtpClockRate: number;
      channelAudio?: ChannelAudioCodec[];
    }
  /**
   * A frame's pose, sent ahead of its playout; `rtp` is the audio RTP timestamp it is shown with (the time its mouth
   * sounds: the frame's presentation time plus the timeline's mouth lookahead, `src/sessions/pose-channel.ts`), less the track's
   * initial RTP offset (libwebrtc picks it at random per peer and wrtc does not expose it): the session's audio
   * sample clock at `rtpClockRate`, modulo 2^32. `sync` messages let the browser find the offset.
   */
  | { type: 'pose'; rtp: number; pose: FramePose }
  /**
   * Poses at or after `fromRtp` (all, when absent) are void: interrupt or new audio replaced them. `audio: true`
   * (barge-in): the channel's audio not yet heard is void too; without it the audio sent stands.
   */
  | { type: 'flush'; fromRtp?: number; audio?: boolean }
  /**
   * Sent as the audio at `rtp` (same clock as a pose's `rtp`) leaves the service, a few times a second: the browser
   * relates it to the RTP timestamp it is playing to learn the track's offset (`client/pose-stream.ts`).
   */
  | { type: 'sync'; rtp: number }
  /**
   * Where the session's audio goes from now on, sent when the service switches it: `channel` after the browser asked
   * (`ChannelAudioRequest`; the track carries nothing from here on), `track` if it goes back (a new peer starts on
   * the track).
   */
  | {
      type: 'audio-route';
      route: 'channel' | 'track';
      /**
       * With `channel`: the service's Opus encoder delay in rtp ticks (libopus' lookahead): a packet stamped rtp R
       * decodes to the audio of R − `encoderDelay` on, so the browser plays its output that much earlier.
       */
      encoderDelay?: number;
    }
  /**
   * The session's audio on the channel (only after `audio-route` `channel`): Opus packets of `CHANNEL_AUDIO_PACKET_MS`
   * each, base64, contiguous from `rtp` (the poses' clock, `rtpClockRate`: each packet is 960 ticks), sent ahead of
   * the time they play, as the poses are. Nothing is sent for silence between speech. `fresh`: the encoder started
   * afresh at this packet (after a gap or a flush), so the decoder starts afresh too. A packet sent again for the same
   * `rtp` replaces the first.
   */
  | { type: 'audio'; rtp: number; packets: string[]; fresh?: boolean };

/** The audio codecs the `avatar` channel can carry (`ChannelAudioRequest`). */
export type ChannelAudioCodec = 'opus';

/** The modulus of the rtp clock (`rtpClockRate` ticks; RTP timestamps are 32-bit). */
export const RTP_WRAP = 2 ** 32;

/** `rtp` (any integer: a sum, a difference, an unwrapped count) on the 32-bit rtp clock, 0 ≤ result < 2^32. */
export function wrapRtp(rtp: number): number {
  return ((rtp % RTP_WRAP) + RTP_WRAP) % RTP_WRAP;
}

/** `a - b` on the 32-bit rtp clock, as a signed difference. */
export function rtpDiff(a: number, b: number): number {
  const d = wrapRtp(a - b);
  return d >= RTP_WRAP / 2 ? d - RTP_WRAP : d;
}

/** The length of one channel audio packet (`PoseChannelMessage` `audio`), ms. */
export const CHANNEL_AUDIO_PACKET_MS = 20;

/**
 * What the browser may send on the `avatar` channel (JSON text): ask for the session's audio on the channel, in a
 * codec the `hello` offered, instead of the audio track. A browser that can decode it and play it on its own clock
 * (WebCodecs `AudioDecoder` and an `AudioContext`) draws each pose with exactly the audio it plays; the service's
 * side then costs no WebRTC audio track (docs/performance.md, "Audio on the pose channel").
 */
export type ChannelAudioRequest = { type: 'audio'; codec: ChannelAudioCodec };

/**
 * One data channel message: a `PoseChannelMessage`, or a JSON array of them in the order they happened (what one
 * tick of the service's media clock produced: its audio's `sync` and the poses asked for in it, sent as one SCTP
 * message, `src/sessions/pose-channel.ts`).
 */
export type PoseChannelData = PoseChannelMessage | PoseChannelMessage[];

/** A canvas that draws an avatar from its render kit, one pose at a time. */
export interface FaceCanvas {
  /** Draws this pose now (the caller picks the pose of the audio being heard). */
  draw(pose: FramePose): void;
  /** Releases the kit's images and GPU/2D resources; idempotent. */
  close(): void;
}

/**
 * Loads a render kit and returns a canvas drawer for it: the canvas takes the kit's resolution, and each `draw` runs
 * the server's renderer on the pose (`client/render-kit.ts`) and puts the I420 frame on the canvas by WebGL
 * (`i420-webgl.ts`), or where WebGL is unavailable by 2D (`i420ToRgba`, the server's own conversion, and
 * `putImageData`); both convert as the server does. Figures of both: docs/performance.md.
 */
export async function loadFaceCanvas(
  canvas: HTMLCanvasElement,
  kitUrl: string,
  signal?: AbortSignal,
): Promise<FaceCanvas> {
  let kit: LoadedKit | null = await loadRenderKit(kitUrl, signal);
  canvas.width = kit.width;
  canvas.height = kit.height;
  const put = i420WebGlDrawer(canvas) ?? i420CanvasDrawer(canvas, kit.width, kit.height);
  return {
    draw(pose) {
      if (kit) put(kit.renderer.render(pose as FrameRequest));
    },
    close() {
      // The kit's pieces go with the renderer; the canvas keeps its last picture.
      kit = null;
    },
  };
}

/** The 2D fallback: the server's `i420ToRgba` into one reused ImageData. */
function i420CanvasDrawer(canvas: HTMLCanvasElement, width: number, height: number): (frame: I420Frame) => void {
  const context = canvas.getContext('2d', { alpha: false });
  if (!context) throw new Error('face canvas: neither WebGL nor a 2D context');
  const image = context.createImageData(width, height);
  const rgba = new Uint8Array(image.data.buffer, image.data.byteOffset, image.data.byteLength);
  return (frame) => {
    i420ToRgba(frame, rgba);
    context.putImageData(image, 0, 0);
  };
}
