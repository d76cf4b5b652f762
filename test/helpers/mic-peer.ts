import wrtc from '@roamhq/wrtc';
import { ReceivingPeer, answerOverHttp } from './peer.ts';

const { nonstandard } = wrtc;

/** wrtc's RTCAudioSource takes exactly 10 ms per call. */
const FRAME_MS = 10;

/**
 * A wrtc peer that receives the avatar like `ReceivingPeer` and also sends a microphone: its audio
 * section is offered `sendrecv`, as a browser does after `getUserMedia`. Like a real microphone it sends
 * all the time — quiet noise unless `say` queued audio — paced by the wall clock.
 */
export class MicrophonePeer extends ReceivingPeer {
  private readonly source = new nonstandard.RTCAudioSource();
  private readonly queue: Int16Array[] = [];
  private queued = 0;
  private timer: NodeJS.Timeout | undefined;
  private startedAt = 0;
  private framesSent = 0;
  /** Sample rate of what `say` takes and the frames sent. */
  readonly rate: number;

  private constructor(rate: number) {
    super();
    this.rate = rate;
    this.microphoneTrack = this.source.createTrack();
  }

  static async connectMic(baseUrl: string, sessionId: string, rate = 16_000): Promise<MicrophonePeer> {
    const peer = new MicrophonePeer(rate);
    try {
      await peer.negotiate(answerOverHttp(baseUrl, sessionId));
    } catch (error) {
      peer.close();
      throw error;
    }
    peer.startMicrophone();
    return peer;
  }

  /** Queues audio to send after what is already queued; resolves when it has all been sent. */
  async say(pcm: Int16Array): Promise<void> {
    this.queue.push(pcm);
    this.queued += pcm.length;
    while (this.queued > 0) await new Promise((r) => setTimeout(r, 10));
  }

  /** Audio queued but not yet sent, in ms. */
  get pendingMs(): number {
    return (this.queued * 1000) / this.rate;
  }

  private startMicrophone(): void {
    const frame = (this.rate * FRAME_MS) / 1000;
    this.startedAt = performance.now();
    this.timer = setInterval(() => {
      const due = Math.floor((performance.now() - this.startedAt) / FRAME_MS);
      // Catch up after a late timer, but never burst more than 100 ms.
      if (due - this.framesSent > 10) this.framesSent = due - 10;
      while (this.framesSent < due) {
        this.source.onData({
          samples: this.nextFrame(frame),
          sampleRate: this.rate,
          bitsPerSample: 16,
          channelCount: 1,
          numberOfFrames: frame,
        });
        this.framesSent++;
      }
    }, FRAME_MS);
  }

  private nextFrame(length: number): Int16Array {
    const out = new Int16Array(length);
    let filled = 0;
    while (filled < length && this.queue.length > 0) {
      const head = this.queue[0];
      const take = Math.min(head.length, length - filled);
      out.set(head.subarray(0, take), filled);
      filled += take;
      this.queued -= take;
      if (take === head.length) this.queue.shift();
      else this.queue[0] = head.subarray(take);
    }
    // Room noise at about -60 dBFS where nothing is queued.
    for (let i = filled; i < length; i++) out[i] = Math.round((Math.random() * 2 - 1) * 30);
    return out;
  }

  override close(): void {
    clearInterval(this.timer);
    super.close();
  }
}
