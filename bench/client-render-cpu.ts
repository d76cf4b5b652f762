/**
 * Client-rendered sessions (issue 47): N sessions with `render: "client"` speaking at once, each with a wrtc receiver
 * reading its audio and its `avatar` pose channel, against the same run's server-rendered row (`session_cpu`'s
 * `rt_speaking`, fewer sessions: the server-rendered path does not keep up with 24 on 2 cores) and the transport floor
 * (bare wrtc senders of 512² 25 fps video + audio). Server CPU per session-second is the service process tree's, as
 * in session_cpu, and also the service process alone (the TTS engine processes synthesise the same speech either way).
 *
 * Late poses, the target: poses the service sent after their audio had left its media clock (`GET /sessions/{id}/metrics`
 * `poses_late` of `poses_sent`). Beside it, at the receivers: each pose's lead over the moment its audio left, from the
 * latest `sync` extrapolated at 48 kHz (both come on one channel, so the network cancels); on a starved host the
 * clock sends catch-up bursts, which this extrapolation reads as late although each pose still left before its audio.
 *
 *   npm run bench -- client_render_cpu
 *   BENCH_CLIENT_SESSIONS=24 BENCH_SERVER_SESSIONS=3 BENCH_CPU_WINDOW_S=20 npm run bench -- client_render_cpu
 *   BENCH_CLIENT_PROFILE=1 npm run bench -- client_render_cpu   # the client row only, service under --cpu-prof
 */
import type { PoseChannelData, PoseChannelMessage } from '../client/face-canvas.ts';
import { ReceivingPeer, answerOverHttp } from '../test/helpers/peer.ts';
import fs from 'node:fs/promises';
import path from 'node:path';
import { parseProfileName, readProfile, summariseProfile } from './cpuprofile.ts';
import { loadAverage } from './proc.ts';
import { printWindow, sessionSecondBudget, type ProfileWindow } from './profile.ts';
import { measureCpuRow } from './session-cpu.ts';
import { startBenchService } from './service.ts';
import { SessionLoad, getJson, round, warmUp, type WindowResult } from './session-load.ts';
import { floorRatio, measureTransportFloor, type TransportFloor } from './transport-floor.ts';

/** The load: 24 client-rendered sessions speaking at once on the 2-core machine. */
const CLIENT_SESSIONS = Number(process.env.BENCH_CLIENT_SESSIONS ?? 24);
/** The server-rendered row beside it, at the load session_cpu measures (3 keep up on 2 cores); 0 leaves it out. */
const SERVER_SESSIONS = Number(process.env.BENCH_SERVER_SESSIONS ?? 3);
const WINDOW_S = Number(process.env.BENCH_CPU_WINDOW_S ?? 20);
/** Sessions' first turns and the receivers' first poses settle within a few seconds. */
const WARMUP_S = Number(process.env.BENCH_CPU_WARMUP_S ?? 5);
/**
 * Where the client row's CPU goes: only that row runs, its service under `--cpu-prof` (profiles kept in
 * `bench/results/client-render-profile-<time>/`, summarised as `npm run bench -- profile` does).
 */
const PROFILE = process.env.BENCH_CLIENT_PROFILE === '1';
const PROFILE_DIR = path.join(
  import.meta.dirname,
  'results',
  `client-render-profile-${new Date().toISOString().replace(/[:.]/g, '-')}`,
);

/** A wrtc receiver as the client library's `render: 'client'` peer: audio, the `avatar` channel, pose timing counted. */
class PoseReceivingPeer extends ReceivingPeer {
  hello = false;
  poses = 0;
  latePoses = 0;
  /** Lead of each pose over its audio leaving the service, ms (the latest ones kept). */
  readonly leadsMs: number[] = [];
  private lastSync: { rtp: number; at: number } | null = null;

  static async open(baseUrl: string, sessionId: string): Promise<ReceivingPeer> {
    const peer = new PoseReceivingPeer();
    peer.keepFrames = false;
    try {
      await peer.negotiate(answerOverHttp(baseUrl, sessionId));
    } catch (error) {
      peer.close();
      throw error;
    }
    return peer;
  }

  protected override async negotiate(
    answerOffer: (offer: { sdp: string; type: 'offer' }) => Promise<{ sdp: string; type: 'answer' }>,
  ): Promise<void> {
    const channel = this.pc.createDataChannel('avatar');
    channel.onmessage = (event: { data: string }) => {
      const data = JSON.parse(event.data) as PoseChannelData;
      for (const message of Array.isArray(data) ? data : [data]) this.receive(message);
    };
    await super.negotiate(answerOffer);
  }

  private receive(message: PoseChannelMessage): void {
    const at = performance.now();
    if (message.type === 'hello') this.hello = true;
    else if (message.type === 'sync') this.lastSync = { rtp: message.rtp, at };
    else if (message.type === 'pose' && this.lastSync) {
      this.poses++;
      const leavesAt = this.lastSync.at + (message.rtp - this.lastSync.rtp) / 48;
      const lead = leavesAt - at;
      if (lead < 0) this.latePoses++;
      this.leadsMs.push(lead);
      if (this.leadsMs.length > 2_000) this.leadsMs.splice(0, 1_000);
    }
  }
}

/**
 * A received 10 ms audio buffer this loud is speech (the built-in voice's words are at RMS ~1 000-5 000; the receiver's
 * comfort noise between them, and DTX silence, stay far below).
 */
const SPEECH_RMS = 200;

/**
 * Share of the window's 10 ms buffers, over all receivers, that carried speech. On a starved host the TTS engine falls
 * behind, sessions wait in silence (DTX: little Opus work) and CPU per session-second falls with it, so runs are only
 * comparable at a similar share; CPU per speaking session-second divides by this share.
 */
function speechShare(peers: PoseReceivingPeer[], from: number, to: number): number {
  let speech = 0;
  for (const peer of peers) for (const a of peer.audio) if (a.at >= from && a.at < to && a.rms >= SPEECH_RMS) speech++;
  return speech / (peers.length * ((to - from) / 10));
}

/** The sessions' pose counters (`GET /sessions/{id}/metrics`), summed. */
async function poseMetrics(load: SessionLoad): Promise<{ sent: number; late: number; skipped: number }> {
  const total = { sent: 0, late: 0, skipped: 0 };
  for (const s of load.sessions) {
    const { media } = await getJson<{ media: { poses_sent?: number; poses_late?: number; poses_skipped?: number } }>(
      load.baseUrl,
      `/sessions/${s.id}/metrics`,
    );
    total.sent += media.poses_sent ?? 0;
    total.late += media.poses_late ?? 0;
    total.skipped += media.poses_skipped ?? 0;
  }
  return total;
}

export interface ClientRowResult extends WindowResult {
  /** The service process alone (no TTS engine processes), ms per session-second */
  service_cpu_ms_per_session_second: number;
  /** Share of the receivers' audio in the window that was speech (`speechShare`) */
  speech_share: number;
  /** The service tree's CPU per second of speech heard, and the service process's alone */
  cpu_ms_per_speaking_session_second: number;
  service_cpu_ms_per_speaking_session_second: number;
  /** Sent by the service in the window, and of those sent after their audio left the clock (the target) */
  poses_sent: number;
  late_poses: number;
  late_pose_percent: number;
  poses_skipped: number;
  poses_received: number;
  /** Received with a negative lead by the receivers' sync extrapolation (see above) */
  receiver_late_pose_percent: number;
  /** Median lead of a pose over its audio leaving the service, ms */
  pose_lead_median_ms: number;
  receivers_with_hello: number;
  failed_speaks: number;
}

async function measureClientRow(sessions: number): Promise<ClientRowResult> {
  if (PROFILE) await fs.mkdir(PROFILE_DIR, { recursive: true });
  const service = await startBenchService({
    env: { SERVICE_MAX_SESSIONS: String(sessions + 2), SERVICE_MAX_PENDING_SESSIONS: String(sessions + 2) },
    nodeArgs: PROFILE ? ['--cpu-prof', `--cpu-prof-dir=${PROFILE_DIR}`, '--cpu-prof-interval=1000'] : undefined,
  });
  const load = new SessionLoad(service.baseUrl, service.pid);
  let result: ClientRowResult | null = null;
  try {
    await warmUp(service.baseUrl, service.pid, 'rt');
    await load.open('rt', sessions, undefined, { connect: PoseReceivingPeer.open });
    load.startSpeaking();
    const peers = () => load.sessions.map((s) => s.peer as PoseReceivingPeer);
    await new Promise((r) => setTimeout(r, WARMUP_S * 1000));
    const posesBefore = peers().reduce((n, p) => n + p.poses, 0);
    const lateBefore = peers().reduce((n, p) => n + p.latePoses, 0);
    const sentBefore = await poseMetrics(load);
    const windowFrom = performance.now();
    const window = await load.measure(WINDOW_S * 1000);
    const share = speechShare(peers(), windowFrom, performance.now());
    const sentAfter = await poseMetrics(load);
    const poses = peers().reduce((n, p) => n + p.poses, 0) - posesBefore;
    const late = peers().reduce((n, p) => n + p.latePoses, 0) - lateBefore;
    const sent = sentAfter.sent - sentBefore.sent;
    const sentLate = sentAfter.late - sentBefore.late;
    const leads = peers()
      .flatMap((p) => p.leadsMs)
      .sort((a, b) => a - b);
    const serviceMs = window.cpu_ms_by_process.service ?? 0;
    result = {
      ...window,
      service_cpu_ms_per_session_second: round(serviceMs / (sessions * window.window_s), 1),
      speech_share: round(share, 2),
      cpu_ms_per_speaking_session_second: round(window.cpu_ms / (sessions * window.window_s * share), 1),
      service_cpu_ms_per_speaking_session_second: round(serviceMs / (sessions * window.window_s * share), 1),
      poses_sent: sent,
      late_poses: sentLate,
      late_pose_percent: sent > 0 ? round((sentLate / sent) * 100, 2) : NaN,
      poses_skipped: sentAfter.skipped - sentBefore.skipped,
      poses_received: poses,
      receiver_late_pose_percent: poses > 0 ? round((late / poses) * 100, 2) : NaN,
      pose_lead_median_ms: round(leads[leads.length >> 1] ?? NaN, 1),
      receivers_with_hello: peers().filter((p) => p.hello).length,
      failed_speaks: load.sessions.reduce((n, s) => n + s.failedSpeaks, 0),
    };
    console.log(
      `  client_rendered: ${result.cpu_ms_per_session_second} ms CPU per session-second (service alone ` +
        `${result.service_cpu_ms_per_session_second}), ${result.cpu_ms_per_speaking_session_second} per speaking session-second (${result.service_cpu_ms_per_speaking_session_second}; speech ${result.speech_share}), ${sessions} sessions, ${result.late_pose_percent}% of ${sent} poses sent late ` +
        `(${result.receiver_late_pose_percent}% by the receivers' sync extrapolation), median lead ${result.pose_lead_median_ms} ms, ${result.turns_completed} turns, load ${result.load_average.join(' ')}`,
    );
    return result;
  } finally {
    await load.close();
    await service.stop();
    if (PROFILE && result) await printProfile(result);
  }
}

/** The profiled window of the client row: CPU per thread, and the JS threads' time by category and function. */
async function printProfile(proc: ClientRowResult): Promise<void> {
  const files = (await fs.readdir(PROFILE_DIR))
    .map((f) => parseProfileName(path.join(PROFILE_DIR, f)))
    .filter((f) => f !== null);
  const w: ProfileWindow = {
    name: 'client_rendered_speaking',
    proc,
    threads: files
      .map((info) => summariseProfile(readProfile(info.file), info, proc.hr_us.start, proc.hr_us.end))
      .filter((s) => s.window_ms > 0),
  };
  printWindow(w);
  await fs.writeFile(
    path.join(PROFILE_DIR, 'summary.json'),
    `${JSON.stringify({ budget_ms_per_session_second: sessionSecondBudget(w), ...w }, null, 2)}\n`,
  );
}

export async function benchClientRenderCpu(): Promise<Record<string, unknown>> {
  const out: Record<string, unknown> = {
    client_sessions: CLIENT_SESSIONS,
    server_sessions: SERVER_SESSIONS,
    window_s: WINDOW_S,
    load_average_before: loadAverage(),
  };
  if (PROFILE) return { ...out, client_rendered: await measureClientRow(CLIENT_SESSIONS) };
  const floor: TransportFloor | { error: string } = await measureTransportFloor(SERVER_SESSIONS || 3).catch(
    (error: Error) => ({ error: error.message }),
  );
  out.transport_floor = floor;
  const ratio = (value: number) => ('error' in floor ? null : floorRatio(value, floor));
  if (SERVER_SESSIONS > 0)
    try {
      const server = await measureCpuRow(
        { key: 'rt_speaking', model: 'rt', speaking: true },
        SERVER_SESSIONS,
        WINDOW_S,
      );
      out.server_rendered = { ...server, cpu_ratio_to_transport_floor: ratio(server.cpu_ms_per_session_second) };
    } catch (error) {
      out.server_rendered = { error: (error as Error).message };
    }
  try {
    const client = await measureClientRow(CLIENT_SESSIONS);
    out.client_rendered = {
      ...client,
      cpu_ratio_to_transport_floor: ratio(client.cpu_ms_per_session_second),
      service_cpu_ratio_to_transport_floor: ratio(client.service_cpu_ms_per_session_second),
      speaking_cpu_ratio_to_transport_floor: ratio(client.cpu_ms_per_speaking_session_second),
      speaking_service_cpu_ratio_to_transport_floor: ratio(client.service_cpu_ms_per_speaking_session_second),
    };
  } catch (error) {
    out.client_rendered = { error: (error as Error).message };
  }
  return out;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  console.log(JSON.stringify(await benchClientRenderCpu(), null, 2));
  process.exit(0);
}
