import wrtc from '@roamhq/wrtc';

const { RTCPeerConnection, nonstandard } = wrtc;

/** Non-trickle signaling: the answer must carry candidates, so wait for gathering — but never forever. */
export const ICE_GATHER_TIMEOUT_MS = 3_000;

/**
 * How long video is held back behind audio on the wire. Measured on loopback (docs/performance.md): without it,
 * frames reach both a wrtc receiver and Chromium ~140–155 ms before the audio they belong to, because the
 * audio path (10 ms chunks → 20 ms Opus frames → jitter buffer) is that much longer and the receivers'
 * lip-sync does not remove it. Configurable with SERVICE_VIDEO_DELAY_MS.
 */
export const DEFAULT_VIDEO_DELAY_MS = 120;

export class MalformedSdpError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'MalformedSdpError';
  }
}

/** The offer lost its peer while being answered: the session closed, or a newer offer replaced it. */
export class PeerGoneError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'PeerGoneError';
  }
}

export interface IceServer {
  urls: string | string[];
  username?: string;
  credential?: string;
}

/** Cheap structural checks before libwebrtc sees the text: it must be an SDP offer with media sections. */
export function assertPlausibleSdp(sdp: string): void {
  if (!sdp.startsWith('v=0')) throw new MalformedSdpError('SDP must start with "v=0"');
  if (!/\r?\nm=(audio|video|application) /.test(sdp)) throw new MalformedSdpError('SDP has no media section');
  if (sdp.length > 64 * 1024) throw new MalformedSdpError('SDP is larger than 64 KiB');
}

/**
 * The session's outgoing media: one audio and one video source that live as long as the session, and
 * at most one peer connection at a time (a new offer replaces the previous peer).
 */
export class WebRtcOutput {
  private readonly audioSource = new nonstandard.RTCAudioSource();
  private readonly videoSource = new nonstandard.RTCVideoSource();
  private peer: InstanceType<typeof RTCPeerConnection> | null = null;
  private tracks: MediaStreamTrack[] = [];
  private closed = false;
  private readonly pendingVideo = new Set<NodeJS.Timeout>();

  constructor(
    private readonly iceServers: IceServer[] = [],
    /** See `DEFAULT_VIDEO_DELAY_MS`. */
    private readonly videoDelayMs = DEFAULT_VIDEO_DELAY_MS,
  ) {}

  get connected(): boolean {
    return this.peer !== null && this.peer.connectionState === 'connected';
  }

  pushAudio(samples: Int16Array, sampleRate: number): void {
    if (this.closed || !this.peer) return;
    this.audioSource.onData({ samples, sampleRate, bitsPerSample: 16, channelCount: 1, numberOfFrames: samples.length });
  }

  pushVideo(frame: { width: number; height: number; data: Uint8Array }): void {
    if (this.closed || !this.peer) return;
    if (this.videoDelayMs <= 0) {
      this.videoSource.onFrame(frame);
      return;
    }
    // Audio spends longer than video between the source and the listener (Opus framing, NetEq), and
    // receivers do not take it back out; holding video this long lands both on the same instant.
    const timer = setTimeout(() => {
      this.pendingVideo.delete(timer);
      if (!this.closed && this.peer) this.videoSource.onFrame(frame);
    }, this.videoDelayMs);
    this.pendingVideo.add(timer);
  }

  async answer(offerSdp: string, signal?: AbortSignal): Promise<{ sdp: string; type: 'answer' }> {
    assertPlausibleSdp(offerSdp);
    if (this.closed) throw new PeerGoneError('media output closed');
    this.closePeer();
    const peer = new RTCPeerConnection({ iceServers: this.iceServers });
    this.peer = peer;
    const audioTrack = this.audioSource.createTrack();
    const videoTrack = this.videoSource.createTrack();
    this.tracks = [audioTrack, videoTrack];
    const stream = new wrtc.MediaStream([audioTrack, videoTrack]);
    peer.addTrack(audioTrack, stream);
    peer.addTrack(videoTrack, stream);
    try {
      await peer.setRemoteDescription({ type: 'offer', sdp: offerSdp });
    } catch (error) {
      this.closePeer();
      throw new MalformedSdpError(`SDP offer rejected: ${(error as Error).message}`);
    }
    const answer = await peer.createAnswer();
    await peer.setLocalDescription(answer);
    await waitForIceGathering(peer, signal);
    if (this.peer !== peer) throw new PeerGoneError(this.closed ? 'media output closed' : 'superseded by a newer offer');
    return { sdp: peer.localDescription!.sdp, type: 'answer' };
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    for (const timer of this.pendingVideo) clearTimeout(timer);
    this.pendingVideo.clear();
    this.closePeer();
  }

  private closePeer(): void {
    for (const track of this.tracks) track.stop();
    this.tracks = [];
    if (this.peer) {
      this.peer.close();
      this.peer = null;
    }
  }
}

function waitForIceGathering(peer: InstanceType<typeof RTCPeerConnection>, signal?: AbortSignal): Promise<void> {
  if (peer.iceGatheringState === 'complete') return Promise.resolve();
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      peer.removeEventListener('icegatheringstatechange', onChange);
      signal?.removeEventListener('abort', done);
      resolve();
    };
    const onChange = () => {
      if (peer.iceGatheringState === 'complete') done();
    };
    const timer = setTimeout(done, ICE_GATHER_TIMEOUT_MS);
    peer.addEventListener('icegatheringstatechange', onChange);
    signal?.addEventListener('abort', done, { once: true });
  });
}
