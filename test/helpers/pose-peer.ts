import { expect } from 'vitest';
import type { PoseChannelData, PoseChannelMessage } from '../../client/face-canvas.ts';
import { post } from './app.ts';
import { ReceivingPeer } from './peer.ts';

/**
 * A peer as the client library makes it for `render: "client"`: audio, the `avatar` data channel, and (like a careless
 * viewer) video. Records every channel message with its arrival time, and (as every `ReceivingPeer`) every 10 ms
 * buffer of its audio track.
 */
export class PosePeer extends ReceivingPeer {
  readonly messages: Array<PoseChannelMessage & { at: number }> = [];
  answerSdp = '';
  /** Called with each message as it arrives (after it is recorded). */
  onMessage: ((message: PoseChannelMessage) => void) | null = null;
  private readonly channel = this.pc.createDataChannel('avatar');

  async connect(baseUrl: string, sessionId: string): Promise<void> {
    this.keepFrames = false;
    this.channel.onmessage = (event: { data: string }) => {
      // One channel message is one clock tick's messages: a JSON array when there are several.
      const data = JSON.parse(event.data) as PoseChannelData;
      for (const message of Array.isArray(data) ? data : [data]) {
        this.messages.push({ ...message, at: performance.now() });
        this.onMessage?.(message);
      }
    };
    await this.negotiate(async (offer) => {
      const res = await post(baseUrl, `/sessions/${sessionId}/webrtc/offer`, offer);
      expect(res.status).toBe(200);
      const answer = await res.json();
      this.answerSdp = answer.sdp;
      return answer;
    });
  }

  /** Sends on the `avatar` channel (text, or binary for a `Uint8Array`). */
  send(data: string | Uint8Array<ArrayBuffer>): void {
    if (typeof data === 'string') this.channel.send(data);
    else this.channel.send(data);
  }

  of<T extends PoseChannelMessage['type']>(type: T): Array<Extract<PoseChannelMessage, { type: T }> & { at: number }> {
    return this.messages.filter((m) => m.type === type) as never;
  }
}
