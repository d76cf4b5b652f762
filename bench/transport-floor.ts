/**
 * The transport floor: what this host charges for sending a session's media over WebRTC and nothing else. A
 * separate process (bench/transport-floor-sender.ts) runs N bare @roamhq/wrtc senders of the same media a session
 * sends (512×512 at 25 fps, 16 kHz audio); N wrtc receivers in this process pull it, as the session_cpu step's
 * viewers do. The sender process's CPU per stream-second is the floor; every CPU row is also reported as a ratio to
 * it, measured in the same run, because this VM's speed moves up to 2× between days and ratios do not.
 *
 *   npm run bench -- transport_floor
 */
import { fork } from 'node:child_process';
import path from 'node:path';
import wrtc from '@roamhq/wrtc';
import { loadAverage, sampleTree } from './proc.ts';
import { round } from './stats.ts';

const { RTCPeerConnection, nonstandard } = wrtc;

const SENDER = path.join(import.meta.dirname, 'transport-floor-sender.ts');
/** The same number of streams as session_cpu's sessions, so the two figures are per stream at the same load. */
const STREAMS = Number(process.env.BENCH_SESSIONS ?? 3);
const WINDOW_S = Number(process.env.BENCH_FLOOR_WINDOW_S ?? 10);
/** The encoders ramp their bitrate over the first seconds of a connection. */
const WARMUP_S = 3;
/** Connecting N peers on loopback takes well under a second; 30 s means something is broken. */
const CONNECT_TIMEOUT_MS = 30_000;

export interface TransportFloor {
  streams: number;
  window_s: number;
  /** CPU of the sending process per stream-second, ms */
  cpu_ms_per_stream_second: number;
  /** Frames the receivers got per stream per second (25 when the sender keeps up) */
  fps_per_stream: number;
  load_average: [number, number, number];
}

type SenderMessage =
  | { type: 'ready' }
  | { type: 'offer'; index: number; sdp: string }
  | { type: 'feeding' }
  | { type: 'error'; message: string };

export async function measureTransportFloor(streams = STREAMS, windowS = WINDOW_S): Promise<TransportFloor> {
  const child = fork(SENDER, [], {
    execArgv: ['--no-turbo-fast-api-calls', '--import', 'tsx'],
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const receivers: Array<InstanceType<typeof RTCPeerConnection>> = [];
  const sinks: Array<{ stop(): void }> = [];
  let framesReceived = 0;
  try {
    const feeding = new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('transport floor: senders did not connect')), CONNECT_TIMEOUT_MS);
      child.on('exit', (code) => reject(new Error(`transport floor: sender exited (${code})`)));
      child.on('message', (message: SenderMessage) => {
        if (message.type === 'ready') child.send({ type: 'open', count: streams });
        else if (message.type === 'error') reject(new Error(`transport floor: ${message.message}`));
        else if (message.type === 'feeding') {
          clearTimeout(timer);
          resolve();
        } else if (message.type === 'offer') {
          void answer(message.index, message.sdp).catch(reject);
        }
      });
    });
    const answer = async (index: number, sdp: string) => {
      const pc = new RTCPeerConnection();
      receivers.push(pc);
      pc.ontrack = (event: { track: MediaStreamTrack }) => {
        if (event.track.kind === 'video') {
          const sink = new nonstandard.RTCVideoSink(event.track);
          sink.onframe = () => {
            framesReceived++;
          };
          sinks.push(sink);
        } else {
          const sink = new nonstandard.RTCAudioSink(event.track);
          sink.ondata = () => undefined;
          sinks.push(sink);
        }
      };
      await pc.setRemoteDescription({ type: 'offer', sdp });
      await pc.setLocalDescription(await pc.createAnswer());
      while (pc.iceGatheringState !== 'complete') await new Promise((r) => setTimeout(r, 10));
      child.send({ type: 'answer', index, sdp: pc.localDescription!.sdp });
    };
    await feeding;
    await new Promise((r) => setTimeout(r, WARMUP_S * 1000));
    const before = sampleTree(child.pid!);
    const framesBefore = framesReceived;
    await new Promise((r) => setTimeout(r, windowS * 1000));
    const after = sampleTree(child.pid!);
    const seconds = (after.at - before.at) / 1000;
    const result: TransportFloor = {
      streams,
      window_s: round(seconds, 2),
      cpu_ms_per_stream_second: round((after.cpuMs - before.cpuMs) / (streams * seconds), 1),
      fps_per_stream: round((framesReceived - framesBefore) / streams / seconds, 1),
      load_average: loadAverage(),
    };
    if (result.fps_per_stream < 20)
      throw new Error(`transport floor: receivers got ${result.fps_per_stream} fps per stream`);
    console.log(
      `  transport floor: ${result.cpu_ms_per_stream_second} ms CPU per stream-second (${streams} bare wrtc senders, ${result.fps_per_stream} fps received)`,
    );
    return result;
  } finally {
    for (const sink of sinks) sink.stop();
    for (const pc of receivers) pc.close();
    if (child.connected) child.send({ type: 'close' });
    await new Promise<void>((resolve) => {
      if (child.exitCode !== null) return resolve();
      const timer = setTimeout(() => child.kill('SIGKILL'), 5_000);
      child.once('exit', () => {
        clearTimeout(timer);
        resolve();
      });
    });
  }
}

/** `value` as a multiple of the floor, two decimals; null when either is missing. */
export function floorRatio(value: number | undefined, floor: TransportFloor | undefined): number | null {
  if (value === undefined || !floor || !(floor.cpu_ms_per_stream_second > 0)) return null;
  return round(value / floor.cpu_ms_per_stream_second, 2);
}

if (import.meta.url === `file://${process.argv[1]}`) {
  console.log(JSON.stringify(await measureTransportFloor(), null, 2));
  process.exit(0);
}
