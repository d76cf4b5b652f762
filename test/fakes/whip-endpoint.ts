import http from 'node:http';
import type { AddressInfo } from 'node:net';
import wrtc from '@roamhq/wrtc';

const { RTCPeerConnection, nonstandard } = wrtc;

/**
 * A loopback WHIP endpoint (RFC 9725) answering with a real wrtc peer: `POST /whip/...` with an SDP offer gets 201,
 * the answer and a `Location`; `POST /refuse/...` gets 401. Two hostile answers point elsewhere (`<other>` is a
 * URL-encoded origin): `POST /redirect/<other>` gets 307 to `<other>/whip/redirected`, and `POST /foreign/<other>`
 * gets a real answer whose `Location` is `<other>/whip/resource/N`. It records each request (method, path,
 * Authorization), the DELETEs, and what the pushed peer delivers (frame sizes, audio RMS per 10 ms).
 */
export class WhipEndpoint {
  readonly authorizations: string[] = [];
  /** Every request that reached this endpoint, whatever its method. */
  readonly received: Array<{ method: string; path: string; authorization: string }> = [];
  readonly deletes: string[] = [];
  readonly frames: Array<{ width: number; height: number }> = [];
  readonly audio: Array<{ at: number; rms: number }> = [];
  private readonly peers: Array<InstanceType<typeof RTCPeerConnection>> = [];
  private readonly sinks: Array<{ stop(): void }> = [];
  private nextId = 0;

  private constructor(
    private readonly server: http.Server,
    readonly baseUrl: string,
  ) {}

  static async start(): Promise<WhipEndpoint> {
    const server = http.createServer();
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const endpoint = new WhipEndpoint(server, `http://127.0.0.1:${(server.address() as AddressInfo).port}`);
    server.on('request', (req, res) => void endpoint.handle(req, res));
    return endpoint;
  }

  firstAudible(since: number, threshold: number): boolean {
    return this.audio.some((a) => a.at >= since && a.rms > threshold);
  }

  private async handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    this.received.push({
      method: req.method ?? '',
      path: req.url ?? '',
      authorization: req.headers.authorization ?? '',
    });
    if (req.method === 'DELETE') {
      this.deletes.push(req.url ?? '');
      res.writeHead(200).end();
      return;
    }
    this.authorizations.push(req.headers.authorization ?? '');
    if (req.method !== 'POST' || req.headers['content-type'] !== 'application/sdp' || req.url?.startsWith('/refuse')) {
      res.writeHead(401, { 'content-type': 'text/plain' }).end('unauthorized');
      return;
    }
    const elsewhere = /^\/(redirect|foreign)\/([^/]+)/u.exec(req.url ?? '');
    if (elsewhere?.[1] === 'redirect') {
      res.writeHead(307, { location: `${decodeURIComponent(elsewhere[2])}/whip/redirected` }).end();
      return;
    }
    const pc = new RTCPeerConnection();
    this.peers.push(pc);
    pc.ontrack = ({ track }: { track: MediaStreamTrack }) => {
      if (track.kind === 'video') {
        const sink = new nonstandard.RTCVideoSink(track);
        sink.onframe = ({ frame }: { frame: { width: number; height: number } }) =>
          this.frames.push({ width: frame.width, height: frame.height });
        this.sinks.push(sink);
      } else {
        const sink = new nonstandard.RTCAudioSink(track);
        sink.ondata = ({ samples }: { samples: Int16Array }) => {
          let sum = 0;
          for (const s of samples) sum += s * s;
          this.audio.push({ at: performance.now(), rms: Math.sqrt(sum / Math.max(1, samples.length)) });
        };
        this.sinks.push(sink);
      }
    };
    await pc.setRemoteDescription({ type: 'offer', sdp: Buffer.concat(chunks).toString('utf8') });
    await pc.setLocalDescription(await pc.createAnswer());
    await new Promise<void>((resolve) => {
      if (pc.iceGatheringState === 'complete') return resolve();
      const timer = setTimeout(resolve, 3000);
      pc.onicegatheringstatechange = () => {
        if (pc.iceGatheringState !== 'complete') return;
        clearTimeout(timer);
        resolve();
      };
    });
    const resource = `${elsewhere ? decodeURIComponent(elsewhere[2]) : ''}/whip/resource/${this.nextId++}`;
    res.writeHead(201, { 'content-type': 'application/sdp', location: resource }).end(pc.localDescription!.sdp);
  }

  async close(): Promise<void> {
    for (const sink of this.sinks) sink.stop();
    for (const pc of this.peers) pc.close();
    this.server.closeAllConnections();
    await new Promise((resolve) => this.server.close(resolve));
  }
}
