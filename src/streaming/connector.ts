import type { IceServer } from '../../actors/media/webrtc.ts';
import { startWhipPush } from '../../actors/media/whip-client.ts';
import type { OutputConnector } from './outputs.ts';
import { startRtmpPush } from './rtmp-push.ts';

/** What outputs take from the service's configuration. */
export interface OutputSettings {
  /** SERVICE_RTMP_VIDEO_BITRATE_KBPS. */
  rtmpVideoBitrateKbps: number;
  /** SERVICE_ICE_SERVERS, for WHIP peers as for viewers. */
  iceServers: IceServer[];
}

/** What a push needs of a session's media: its clock to tap (RTMP) and its WebRTC sources (WHIP); `SessionMedia` is one. */
export type PushableMedia = Parameters<typeof startRtmpPush>[0] & {
  output: Parameters<typeof startWhipPush>[0]['output'];
};

/** A session's pushes: RTMP taps its media clock into ffmpeg, WHIP adds a send-only peer fed by its WebRTC sources. */
export function outputConnector(media: PushableMedia, settings: OutputSettings): OutputConnector {
  return async (request, signal) => {
    // A client-rendered session draws for its pushes on the server: the renderer draws before the push's first frame.
    const releasePictures = (await media.holdPictures?.(signal)) ?? (() => undefined);
    try {
      return await (request.type === 'rtmp'
        ? startRtmpPush(media, request.url, settings.rtmpVideoBitrateKbps, signal)
        : startWhipPush({
            output: media.output,
            url: request.url,
            bearerToken: request.bearerToken,
            iceServers: settings.iceServers,
            signal,
          }));
    } finally {
      releasePictures();
    }
  };
}
