import wrtc from '@roamhq/wrtc';

const { RTCPeerConnection, nonstandard } = wrtc;

export interface ReceivedAudio {
  at: number;
  rms: number;
  sampleRate: number;
}

export interface ReceivedFrame {
  at: number;
  width: number;
  height: number;
  data: Uint8Array;
}

/** Answers an offer with the session's `POST /sessions/{id}/webrtc/offer`; rejects with `offer failed: <status> <body>`. */
export function answerOverHttp(
  baseUrl: string,
  sessionId: string,
): (offer: { sdp: string; type: 'offer' }) => Promise<{ sdp: string; type: 'answer' }> {
  return async (offer) => {
    const res = await fetch(`${baseUrl}/sessions/${sessionId}/webrtc/offer`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(offer),
    });
    if (!res.ok) throw new Error(`offer failed: ${res.status} ${await res.text()}`);
    return res.json();
  };
}

/**
 * A real wrtc receiving peer: offers recvonly audio+video, posts the offer to the service and records
 * every decoded video frame and 10 ms audio buffer with its arrival time.
 */
export class ReceivingPeer {
  readonly pc = new RTCPeerConnection();
  readonly audio: ReceivedAudio[] = [];
  readonly frames: ReceivedFrame[] = [];
  private sinks: Array<{ stop(): void }> = [];
  keepFrames = true;
  /** With a microphone (`connectWithMicrophone`): the track it sends, offered `sendrecv`. */
  protected microphoneTrack: MediaStreamTrack | null = null;

  /** Rejects with `offer failed: <status> <body>` when the service refuses the offer (the local peer is closed then). */
  static async connect(baseUrl: string, sessionId: string): Promise<ReceivingPeer> {
    return ReceivingPeer.connectWith(answerOverHttp(baseUrl, sessionId));
  }

  /** Negotiates with any answerer, e.g. a `WebRtcOutput` in the test process (`(offer) => output.answer(offer.sdp)`). */
  static async connectWith(
    answer: (offer: { sdp: string; type: 'offer' }) => Promise<{ sdp: string; type: 'answer' }>,
  ): Promise<ReceivingPeer> {
    const peer = new ReceivingPeer();
    try {
      await peer.negotiate(answer);
    } catch (error) {
      peer.close();
      throw error;
    }
    return peer;
  }

  protected async negotiate(
    answerOffer: (offer: { sdp: string; type: 'offer' }) => Promise<{ sdp: string; type: 'answer' }>,
  ): Promise<void> {
    if (this.microphoneTrack) this.pc.addTransceiver(this.microphoneTrack, { direction: 'sendrecv' });
    else this.pc.addTransceiver('audio', { direction: 'recvonly' });
    this.pc.addTransceiver('video', { direction: 'recvonly' });
    this.pc.ontrack = (event: { track: MediaStreamTrack }) => {
      const track = event.track;
      if (track.kind === 'video') {
        const sink = new nonstandard.RTCVideoSink(track);
        sink.onframe = ({ frame }: { frame: { width: number; height: number; data: Uint8Array } }) => {
          const copy = this.keepFrames ? new Uint8Array(frame.data) : new Uint8Array(0);
          this.frames.push({ at: performance.now(), width: frame.width, height: frame.height, data: copy });
          if (this.frames.length > 2000) this.frames.splice(0, 1000);
        };
        this.sinks.push(sink);
      } else {
        const sink = new nonstandard.RTCAudioSink(track);
        sink.ondata = (data: { samples: Int16Array; sampleRate: number }) => {
          let sum = 0;
          for (let i = 0; i < data.samples.length; i++) sum += data.samples[i] * data.samples[i];
          this.audio.push({
            at: performance.now(),
            rms: Math.sqrt(sum / Math.max(1, data.samples.length)),
            sampleRate: data.sampleRate,
          });
          if (this.audio.length > 20000) this.audio.splice(0, 10000);
        };
        this.sinks.push(sink);
      }
    };
    const offer = await this.pc.createOffer();
    await this.pc.setLocalDescription(offer);
    await new Promise<void>((resolve) => {
      if (this.pc.iceGatheringState === 'complete') return resolve();
      const timer = setTimeout(resolve, 3000);
      this.pc.onicegatheringstatechange = () => {
        if (this.pc.iceGatheringState === 'complete') {
          clearTimeout(timer);
          resolve();
        }
      };
    });
    const answer = await answerOffer({ sdp: this.pc.localDescription!.sdp, type: 'offer' });
    await this.pc.setRemoteDescription(answer);
  }

  /** Resolves when `predicate` holds, polling; rejects after `timeoutMs`. */
  async until(predicate: () => boolean, timeoutMs: number, what: string): Promise<void> {
    const start = performance.now();
    while (!predicate()) {
      if (performance.now() - start > timeoutMs) throw new Error(`timed out waiting for ${what}`);
      await new Promise((r) => setTimeout(r, 5));
    }
  }

  /** First audio buffer after `since` whose RMS is above `threshold`. */
  firstAudible(since: number, threshold = 300): ReceivedAudio | undefined {
    return this.audio.find((a) => a.at >= since && a.rms > threshold);
  }

  close(): void {
    for (const sink of this.sinks) sink.stop();
    this.pc.close();
  }
}

/** Mean absolute luma difference inside a box between two I420 frames. */
export function lumaDiff(
  a: ReceivedFrame,
  b: ReceivedFrame,
  box: { x: number; y: number; w: number; h: number },
): number {
  let sum = 0;
  let n = 0;
  for (let y = box.y; y < box.y + box.h; y++) {
    for (let x = box.x; x < box.x + box.w; x++) {
      sum += Math.abs(a.data[y * a.width + x] - b.data[y * b.width + x]);
      n++;
    }
  }
  return sum / n;
}

/** A real recvonly audio+video offer with its candidates, as a browser or a WHEP player sends it. */
export async function realOfferSdp(): Promise<string> {
  const pc = new wrtc.RTCPeerConnection();
  try {
    pc.addTransceiver('audio', { direction: 'recvonly' });
    pc.addTransceiver('video', { direction: 'recvonly' });
    await pc.setLocalDescription(await pc.createOffer());
    return pc.localDescription!.sdp;
  } finally {
    pc.close();
  }
}

/** A WHEP player's offer: the raw SDP POSTed to the session's WHEP endpoint (answer and `Location` in the response). */
export function postWhepOffer(
  baseUrl: string,
  sessionId: string,
  sdp: string,
  contentType = 'application/sdp',
): Promise<Response> {
  return fetch(`${baseUrl}/sessions/${sessionId}/whep`, {
    method: 'POST',
    headers: { 'content-type': contentType },
    body: sdp,
  });
}

/** A WHEP viewer of the session (a real wrtc receiver) and its resource's path (`Location`, for its DELETE). */
export async function connectWhepViewer(
  baseUrl: string,
  sessionId: string,
): Promise<{ viewer: ReceivingPeer; location: string }> {
  let location = '';
  const viewer = await ReceivingPeer.connectWith(async (offer) => {
    const res = await postWhepOffer(baseUrl, sessionId, offer.sdp);
    if (res.status !== 201) throw new Error(`WHEP offer failed: ${res.status} ${await res.text()}`);
    location = res.headers.get('location') ?? '';
    return { type: 'answer', sdp: await res.text() };
  });
  return { viewer, location };
}
