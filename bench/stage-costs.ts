/**
 * Per-stage costs behind the profile, measured in isolation in this process with @roamhq/wrtc directly
 * (no service code): one sending peer connected to one receiving peer on loopback, fed like a session
 * feeds it (a 512×512 I420 frame every 40 ms, 10 ms of PCM every 10 ms) for a few seconds per variant.
 *
 * - main-thread cost of `audioSource.onData` per 10 ms chunk (16 kHz as the service sends, and 48 kHz),
 *   and of `videoSource.onFrame` per frame;
 * - CPU of libwebrtc's sender threads per second of media: `EncoderQueue` (VP8), `AudioEncoder` (Opus),
 *   and the RTP send path (pacer, rtp_send_controller, …), read per thread from /proc;
 * - the same with the video capped at 600 kbps by `b=AS:600` in the receiver's SDP (loopback bandwidth estimation
 *   otherwise lets VP8 climb to its maximum; @roamhq/wrtc's RTCRtpSender.setParameters throws InvalidStateError);
 * - the garbage-collection cost of allocating a fresh 384 KiB frame buffer for every frame (what the render
 *   pool's transferred results amount to) against reusing buffers, as process CPU.
 *
 *   npm run bench -- stage_costs
 */
import wrtc from '@roamhq/wrtc';
import { threadCpu, threadCpuDelta } from './proc.ts';
import { round } from './stats.ts';
import { FPS, HEIGHT, I420_BYTES, WIDTH, frameAt, toneChunk } from './synthetic-media.ts';
import { VIDEO_SOURCE_INIT, withVideoBitrateCap } from '../actors/media/webrtc.ts';

const { RTCPeerConnection, nonstandard } = wrtc;

const SECONDS = Number(process.env.BENCH_STAGE_SECONDS ?? 6);
/** Receiver-side threads: decoding and rendering happen in this process too, but are not the sender's cost. */
const RECEIVER_THREADS = /Decod|IncomingVideo|AudioDevice|TestAudio|receive/i;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface PeerPair {
  audio: InstanceType<typeof nonstandard.RTCAudioSource>;
  video: InstanceType<typeof nonstandard.RTCVideoSource>;
  /** Video bytes sent so far (outbound-rtp stats) */
  videoBytesSent(): Promise<number>;
  close(): void;
}

type Peer = InstanceType<typeof RTCPeerConnection>;

/**
 * Offer/answer between two peers of this process on loopback, `editAnswer` applied to the receiver's answer before
 * the sender takes it (what a receiver's description tells libwebrtc's encoders); resolves once connected (or 10 s).
 */
export async function connectOnLoopback(
  sender: Peer,
  receiver: Peer,
  editAnswer: (sdp: string) => string,
): Promise<void> {
  sender.onicecandidate = (e: { candidate: unknown }) => e.candidate && receiver.addIceCandidate(e.candidate);
  receiver.onicecandidate = (e: { candidate: unknown }) => e.candidate && sender.addIceCandidate(e.candidate);
  await sender.setLocalDescription(await sender.createOffer());
  await receiver.setRemoteDescription(sender.localDescription!);
  await receiver.setLocalDescription(await receiver.createAnswer());
  const answer = receiver.localDescription!;
  await sender.setRemoteDescription({ type: answer.type, sdp: editAnswer(answer.sdp) });
  const deadline = performance.now() + 10_000;
  while (sender.connectionState !== 'connected' && performance.now() < deadline) await sleep(20);
}

async function connectPair(videoKbps?: number): Promise<PeerPair> {
  const sender = new RTCPeerConnection();
  const receiver = new RTCPeerConnection();
  const audio = new nonstandard.RTCAudioSource();
  const video = new nonstandard.RTCVideoSource(VIDEO_SOURCE_INIT);
  const tracks = [audio.createTrack(), video.createTrack()];
  const stream = new wrtc.MediaStream(tracks);
  for (const track of tracks) sender.addTrack(track, stream);
  const sinks: Array<{ stop(): void }> = [];
  receiver.ontrack = (event: { track: MediaStreamTrack }) => {
    // Sinks so that media is really pulled through the receiver, as a viewer does.
    if (event.track.kind === 'video') {
      const sink = new nonstandard.RTCVideoSink(event.track);
      sink.onframe = () => undefined;
      sinks.push(sink);
    } else {
      const sink = new nonstandard.RTCAudioSink(event.track);
      sink.ondata = () => undefined;
      sinks.push(sink);
    }
  };
  await connectOnLoopback(sender, receiver, (sdp) => (videoKbps ? withVideoBitrateCap(sdp, videoKbps) : sdp));
  return {
    audio,
    video,
    videoBytesSent: async () => {
      const report = await sender.getStats();
      let bytes = 0;
      report.forEach((stat: { type: string; kind?: string; mediaType?: string; bytesSent?: number }) => {
        if (stat.type === 'outbound-rtp' && (stat.kind ?? stat.mediaType) === 'video') bytes += stat.bytesSent ?? 0;
      });
      return bytes;
    },
    close: () => {
      for (const sink of sinks) sink.stop();
      for (const track of tracks) track.stop();
      sender.close();
      receiver.close();
    },
  };
}

interface FeedResult {
  videoKbps: number;
  onDataUsPerCall: number;
  onFrameUsPerCall: number;
  /** ms of CPU per second of media, per sender thread group */
  threadsMsPerS: Record<string, number>;
  processCpuMsPerS: number;
}

async function feed(
  pair: PeerPair,
  opts: { audioRate: number; video: boolean; freshBuffers: boolean },
): Promise<FeedResult> {
  const pid = process.pid;
  const pcm = toneChunk(opts.audioRate);
  const samples = pcm.length;
  const pool = [new Uint8Array(I420_BYTES), new Uint8Array(I420_BYTES), new Uint8Array(I420_BYTES)];
  let onDataUs = 0;
  let onDataCalls = 0;
  let onFrameUs = 0;
  let onFrameCalls = 0;
  const bytesBefore = await pair.videoBytesSent();
  const threadsBefore = threadCpu(pid);
  const cpuBefore = process.cpuUsage();
  const start = performance.now();
  let chunks = 0;
  let frames = 0;
  while (performance.now() - start < SECONDS * 1000) {
    const due = Math.floor((performance.now() - start) / 10);
    while (chunks < due) {
      const t0 = performance.now();
      pair.audio.onData({
        samples: pcm,
        sampleRate: opts.audioRate,
        bitsPerSample: 16,
        channelCount: 1,
        numberOfFrames: samples,
      });
      onDataUs += (performance.now() - t0) * 1000;
      onDataCalls++;
      chunks++;
      if (opts.video && chunks % (100 / FPS) === 0) {
        const data = opts.freshBuffers ? frameAt(frames) : frameAt(frames, pool[frames % pool.length]);
        const t1 = performance.now();
        pair.video.onFrame({ width: WIDTH, height: HEIGHT, data });
        onFrameUs += (performance.now() - t1) * 1000;
        onFrameCalls++;
        frames++;
      }
    }
    await sleep(5);
  }
  const seconds = (performance.now() - start) / 1000;
  const cpu = process.cpuUsage(cpuBefore);
  const byThread = threadCpuDelta(pid, threadsBefore, threadCpu(pid));
  const groups: Record<string, number> = {};
  for (const [name, ms] of Object.entries(byThread)) {
    const group =
      name === 'EncoderQueue'
        ? 'EncoderQueue (VP8)'
        : name === 'AudioEncoder'
          ? 'AudioEncoder (Opus)'
          : name === 'main (JS event loop)'
            ? 'main thread'
            : name.startsWith('node thread')
              ? "node's threads (V8 GC helpers, libuv)"
              : RECEIVER_THREADS.test(name)
                ? 'receiver side (decode, playout; not the sender)'
                : 'RTP send path & other libwebrtc threads';
    groups[group] = (groups[group] ?? 0) + ms;
  }
  const bytesAfter = await pair.videoBytesSent();
  return {
    videoKbps: round(((bytesAfter - bytesBefore) * 8) / 1000 / seconds, 0),
    onDataUsPerCall: round(onDataUs / Math.max(1, onDataCalls), 1),
    onFrameUsPerCall: round(onFrameUs / Math.max(1, onFrameCalls), 1),
    threadsMsPerS: Object.fromEntries(
      Object.entries(groups)
        .map(([k, v]) => [k, round(v / seconds, 1)])
        .sort((a, b) => (b[1] as number) - (a[1] as number)),
    ),
    processCpuMsPerS: round((cpu.user + cpu.system) / 1000 / seconds, 1),
  };
}

/**
 * Process CPU (all threads: V8 marks concurrently on helper threads) of allocating and dropping one 512² I420
 * buffer per frame at 25 fps × `streams`, vs reusing a few, with ~30 MB of small live objects on the heap as
 * the service has: every ~64 MB of new ArrayBuffer memory makes V8 run a full mark-compact of that heap.
 */
async function gcCost(streams: number, fresh: boolean): Promise<number> {
  const liveHeap = Array.from({ length: 300_000 }, (_, i) => ({ i, name: `object ${i}`, list: [i, i + 1] }));
  const pool = Array.from({ length: 3 * streams }, () => new Uint8Array(I420_BYTES));
  const keep: Uint8Array[] = [];
  const before = process.cpuUsage();
  const start = performance.now();
  let frames = 0;
  while (performance.now() - start < SECONDS * 1000) {
    const due = Math.floor(((performance.now() - start) / 1000) * FPS * streams);
    while (frames < due) {
      const buffer = fresh ? new Uint8Array(I420_BYTES) : pool[frames % pool.length];
      buffer[frames % I420_BYTES] = frames & 0xff;
      // Held a little, as a frame is between render and send (render-ahead, video delay).
      keep.push(buffer);
      if (keep.length > 6 * streams) keep.shift();
      frames++;
    }
    await sleep(5);
  }
  const cpu = process.cpuUsage(before);
  if (liveHeap.length === 0) throw new Error('unreachable');
  return round((cpu.user + cpu.system) / 1000 / ((performance.now() - start) / 1000), 1);
}

export async function benchStageCosts(): Promise<Record<string, unknown>> {
  const out: Record<string, unknown> = {};
  const pair = await connectPair();
  try {
    await feed(pair, { audioRate: 16_000, video: true, freshBuffers: false }); // warm-up: encoder ramps up bitrate
    out.session_like_16k_audio_video = await feed(pair, { audioRate: 16_000, video: true, freshBuffers: false });
    out.session_like_fresh_frame_buffers = await feed(pair, { audioRate: 16_000, video: true, freshBuffers: true });
    out.audio_only_16k = await feed(pair, { audioRate: 16_000, video: false, freshBuffers: false });
    out.audio_only_48k = await feed(pair, { audioRate: 48_000, video: false, freshBuffers: false });
  } finally {
    pair.close();
  }
  const capped = await connectPair(600);
  try {
    await feed(capped, { audioRate: 16_000, video: true, freshBuffers: false });
    out.session_like_video_capped_600kbps = await feed(capped, { audioRate: 16_000, video: true, freshBuffers: false });
  } finally {
    capped.close();
  }
  out.gc_3_streams_fresh_buffers_cpu_ms_per_s = await gcCost(3, true);
  out.gc_3_streams_reused_buffers_cpu_ms_per_s = await gcCost(3, false);
  return out;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  console.log(JSON.stringify(await benchStageCosts(), null, 2));
  process.exit(0);
}
