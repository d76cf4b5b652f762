import { randomUUID } from 'node:crypto';
import wrtc from '@roamhq/wrtc';
import {
  MalformedSdpError,
  PeerGoneError,
  assertPlausibleSdp,
  waitForIceGathering,
  offerAsApplied,
  type IceServer,
  type WebRtcOutput,
} from './webrtc.ts';
import { Overloaded } from '../admission.ts';

const { RTCPeerConnection } = wrtc;

/**
 * WHEP viewers of one session at once. Each is a send-only peer encoding the session's media again (VP8 + Opus,
 * ~one encoder's CPU each, docs/streaming.md): a handful is what one session should serve itself; more viewers
 * belong behind a media server fed by a WHIP or RTMP output.
 */
export const MAX_WHEP_VIEWERS = 8;

/** Retry-After when every viewer slot is taken: a viewer that left frees its slot at once, one whose connection dropped within seconds (ICE failure). */
export const WHEP_FULL_RETRY_AFTER_S = 10;

/** All viewer slots are taken (503 + Retry-After). */
export class ViewersFullError extends Overloaded {
  constructor() {
    super(`the session already has ${MAX_WHEP_VIEWERS} WHEP viewers`, WHEP_FULL_RETRY_AFTER_S);
  }
}

interface Viewer {
  peer: InstanceType<typeof RTCPeerConnection>;
  release(): void;
}

/**
 * WHEP playback (draft-ietf-wish-whep): send-only peers beside the session's main peer, fed from the same
 * sources (`WebRtcOutput.openFeed`), so every viewer is on the one media clock. Non-trickle: the answer carries
 * the candidates. A viewer ends on DELETE, when its connection fails or closes, and with the session.
 */
export class WhepViewers {
  private readonly viewers = new Map<string, Viewer>();
  /** Slots taken by offers still being answered, so concurrent offers cannot exceed the bound. */
  private negotiating = 0;

  constructor(
    private readonly output: WebRtcOutput,
    private readonly iceServers: IceServer[] = [],
  ) {}

  get count(): number {
    return this.viewers.size;
  }

  /** Answers a viewer's offer; resolves with its id and the answer SDP. */
  async answer(offerSdp: string, signal?: AbortSignal): Promise<{ viewerId: string; sdp: string }> {
    assertPlausibleSdp(offerSdp);
    if (this.viewers.size + this.negotiating >= MAX_WHEP_VIEWERS) throw new ViewersFullError();
    // The slot is held from here; once the viewer is registered it counts as a viewer instead.
    let holdsSlot = true;
    const releaseSlot = (): void => {
      if (holdsSlot) this.negotiating--;
      holdsSlot = false;
    };
    this.negotiating++;
    try {
      return await this.negotiate(offerSdp, releaseSlot, signal);
    } finally {
      releaseSlot();
    }
  }

  /** Ends one viewer; false when there is none with this id. */
  close(viewerId: string): boolean {
    const viewer = this.viewers.get(viewerId);
    if (!viewer) return false;
    this.viewers.delete(viewerId);
    viewer.release();
    viewer.peer.close();
    return true;
  }

  private async negotiate(
    offerSdp: string,
    registered: () => void,
    signal?: AbortSignal,
  ): Promise<{ viewerId: string; sdp: string }> {
    const viewerId = randomUUID();
    const peer = new RTCPeerConnection({ iceServers: this.iceServers });
    let gone = false;
    const feed = this.output.openFeed(() => {
      gone = true;
      this.close(viewerId);
      peer.close();
    });
    const discard = (): void => {
      feed.release();
      peer.close();
    };
    for (const track of feed.tracks) peer.addTrack(track, feed.stream);
    try {
      await peer.setRemoteDescription({ type: 'offer', sdp: offerAsApplied(offerSdp) });
      await peer.setLocalDescription(await peer.createAnswer());
    } catch (error) {
      discard();
      if (gone) throw new PeerGoneError('media output closed');
      throw new MalformedSdpError(`SDP offer cannot be answered: ${(error as Error).message}`);
    }
    if (gone || signal?.aborted) {
      discard();
      throw new PeerGoneError(gone ? 'media output closed' : 'the client went away before its offer was answered');
    }
    this.viewers.set(viewerId, { peer, release: feed.release });
    registered();
    peer.addEventListener('connectionstatechange', () => {
      if (peer.connectionState === 'connected') feed.firstPicture();
      if (peer.connectionState === 'failed' || peer.connectionState === 'closed') this.close(viewerId);
    });
    await waitForIceGathering(peer, signal);
    // A closed peer's description is not read: libwebrtc can crash on it (node-webrtc #696).
    const local = this.viewers.has(viewerId) && !signal?.aborted ? peer.localDescription : null;
    if (!local) {
      this.close(viewerId);
      throw new PeerGoneError(
        signal?.aborted ? 'the client went away before its offer was answered' : 'media output closed',
      );
    }
    return { viewerId, sdp: local.sdp };
  }
}
