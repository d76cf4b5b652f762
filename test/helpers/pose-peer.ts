import wrtc from '@roamhq/wrtc';
import { expect } from 'vitest';
import type { PoseChannelData, PoseChannelMessage } from '../../client/face-canvas.ts';
import { post } from './app.ts';

const { RTCPeerConnection, nonstandard } = wrtc;

/**
 * A peer as the client library makes it for `render: "client"`: audio, the `avatar` data channel, and (like a careless
 * viewer) video. Records every channel message and every 10 ms buffer of its audio track, with their arrival times.
 */
export class PosePeer {
  readonly pc = new RTCPeerConnection();
  readonly messages: Array<PoseChannelMessage & { at: number }> = [];
  readonly audio: Array<{ at: number; rms: number }> = [];
  answerSdp = '';
  /** Called with each message as it arrives (after it is recorded). */
  onMessage: ((message: PoseChannelMessage) => void) | null = null;
  private sink: { stop(): void } | null = null;
  private readonly channel = this.pc.createDataChannel('avatar');

  async connect(baseUrl: string, sessionId: string): Promise<void> {
    this.pc.addTransceiver('audio', { direction: 'recvonly' });
    this.pc.addTransceiver('video', { direction: 'recvonly' });
    this.channel.onmessage = (event: { data: string }) => {
      // One channel message is one clock tick's messages: a JSON array when there are several.
      const data = JSON.parse(event.data) as PoseChannelData;
      for (const message of Array.isArray(data) ? data : [data]) {
        this.messages.push({ ...message, at: performance.now() });
        this.onMessage?.(message);
      }
    };
    this.pc.ontrack = (event: { track: MediaStreamTrack }) => {
      if (event.track.kind === 'video') return;
      const sink = new nonstandard.RTCAudioSink(event.track);
      sink.ondata = (data: { samples: Int16Array }) => {
        let sum = 0;
        for (const s of data.samples) sum += s * s;
        this.audio.push({ at: performance.now(), rms: Math.sqrt(sum / Math.max(1, data.samples.length)) });
      };
      this.sink = sink;
    };
    await this.pc.setLocalDescription(await this.pc.createOffer());
    await new Promise<void>((resolve) => {
      if (this.pc.iceGatheringState === 'complete') return resolve();
      this.pc.onicegatheringstatechange = () => this.pc.iceGatheringState === 'complete' && resolve();
      setTimeout(resolve, 3000);
    });
    const res = await post(baseUrl, `/sessions/${sessionId}/webrtc/offer`, {
      type: 'offer',
      sdp: this.pc.localDescription!.sdp,
    });
    expect(res.status).toBe(200);
    const answer = await res.json();
    this.answerSdp = answer.sdp;
    await this.pc.setRemoteDescription(answer);
  }

  /** Sends on the `avatar` channel (text, or binary for a `Uint8Array`). */
  send(data: string | Uint8Array<ArrayBuffer>): void {
    if (typeof data === 'string') this.channel.send(data);
    else this.channel.send(data);
  }

  of<T extends PoseChannelMessage['type']>(type: T): Array<Extract<PoseChannelMessage, { type: T }> & { at: number }> {
    return this.messages.filter((m) => m.type === type) as never;
  }

  close(): void {
    this.sink?.stop();
    this.pc.close();
  }
}
