/**
 * What broadcasting costs beside the session itself: the service's process tree CPU (ffmpeg children included) over
 * a window for one speaking `rt` session with its own wrtc receiver, then the same session with one WHEP viewer
 * added, then with one RTMP output to a local nginx-rtmp added on top (docs/streaming.md). Each extra's figure is the
 * difference to the window before it, ms of CPU per second. Viewers and the nginx run in this process tree, not the
 * service's, so they are not counted.
 *
 *   npm run bench -- streaming_cpu
 *   BENCH_STREAMING_WINDOW_S=30 npm run bench -- streaming_cpu
 */
import { startBenchService } from './service.ts';
import { SessionLoad, round, warmUp } from './session-load.ts';
import { ReceivingPeer } from '../test/helpers/peer.ts';
import { NginxRtmp } from '../test/helpers/nginx-rtmp.ts';

const WINDOW_S = Number(process.env.BENCH_STREAMING_WINDOW_S ?? 15);
/** Settling after each addition: a viewer's first keyframe, ffmpeg's start and RTMP handshake. */
const SETTLE_S = 5;

export async function benchStreamingCpu(): Promise<Record<string, unknown>> {
  const nginx = await NginxRtmp.start();
  const service = await startBenchService();
  const load = new SessionLoad(service.baseUrl, service.pid);
  let viewer: ReceivingPeer | null = null;
  try {
    await warmUp(service.baseUrl, service.pid, 'rt');
    await load.open('rt', 1);
    load.startSpeaking();
    const sessionId = load.sessions[0].id;
    const alone = await load.measure(WINDOW_S * 1000, SETTLE_S * 1000);

    viewer = await ReceivingPeer.connectWith(async (offer) => {
      const res = await fetch(`${service.baseUrl}/sessions/${sessionId}/whep`, {
        method: 'POST',
        headers: { 'content-type': 'application/sdp' },
        body: offer.sdp,
      });
      if (res.status !== 201) throw new Error(`whep refused: ${res.status} ${await res.text()}`);
      return { type: 'answer', sdp: await res.text() };
    });
    viewer.keepFrames = false;
    const withViewer = await load.measure(WINDOW_S * 1000, SETTLE_S * 1000);

    const created = await fetch(`${service.baseUrl}/sessions/${sessionId}/outputs`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ type: 'rtmp', url: nginx.url('bench') }),
    });
    if (created.status !== 201) throw new Error(`output refused: ${created.status} ${await created.text()}`);
    const withRtmp = await load.measure(WINDOW_S * 1000, SETTLE_S * 1000);
    const outputs = (await (await fetch(`${service.baseUrl}/sessions/${sessionId}/outputs`)).json()) as {
      outputs: Array<{ state: string }>;
    };

    const perSecond = (cpuMs: number, windowS: number) => round(cpuMs / windowS, 1);
    const result = {
      window_s: WINDOW_S,
      session_cpu_ms_per_s: perSecond(alone.cpu_ms, alone.window_s),
      whep_viewer_cpu_ms_per_s: round(
        perSecond(withViewer.cpu_ms, withViewer.window_s) - perSecond(alone.cpu_ms, alone.window_s),
        1,
      ),
      rtmp_output_cpu_ms_per_s: round(
        perSecond(withRtmp.cpu_ms, withRtmp.window_s) - perSecond(withViewer.cpu_ms, withViewer.window_s),
        1,
      ),
      rtmp_output_state: outputs.outputs[0]?.state,
      late_percent: [alone.late_percent, withViewer.late_percent, withRtmp.late_percent],
      cpu_ms_by_process_with_rtmp: withRtmp.cpu_ms_by_process,
      load_average: withRtmp.load_average,
    };
    console.log(
      `  session ${result.session_cpu_ms_per_s} ms/s; + WHEP viewer ${result.whep_viewer_cpu_ms_per_s} ms/s; + RTMP output ${result.rtmp_output_cpu_ms_per_s} ms/s`,
    );
    return result;
  } finally {
    viewer?.close();
    await load.close();
    await service.stop();
    await nginx.kill();
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  console.log(JSON.stringify(await benchStreamingCpu(), null, 2));
  process.exit(0);
}
