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
 * Audio: each receiver asks for the session's audio on the `avatar` channel as the browser does (`ChannelAudioRequest`
 * once `hello` offers Opus), decodes its packets with `@evan/opus` and reads the voiced share from them, each 10 ms
 * placed at the time its audio leaves the service's clock (the latest `sync` extrapolated, as poses are judged). Beside
 * poses the row counts the channel's audio packets received, and late (arriving after their audio left the clock).
 * `BENCH_CLIENT_AUDIO=track` measures the track path as before (the receivers never ask); `both` measures the client
 * row both ways, alternated `BENCH_CLIENT_ROUNDS` times. The floor is read before every row and after the last; each
 * row is set against the mean of the readings around it, and the target is the median of the rounds (three by default).
 *
 *   npm run bench -- client_render_cpu
 *   BENCH_CLIENT_SESSIONS=24 BENCH_SERVER_SESSIONS=3 BENCH_CPU_WINDOW_S=20 npm run bench -- client_render_cpu
 *   BENCH_CLIENT_AUDIO=both BENCH_CLIENT_ROUNDS=2 BENCH_SERVER_SESSIONS=0 npm run bench -- client_render_cpu
 *   BENCH_CLIENT_PROFILE=1 npm run bench -- client_render_cpu   # the client row only, service under --cpu-prof
 */
import { Decoder } from '@evan/opus';
import {
  CHANNEL_AUDIO_PACKET_MS,
  rtpDiff,
  type ChannelAudioRequest,
  type PoseChannelData,
  type PoseChannelMessage,
} from '../client/face-canvas.ts';
import { ReceivingPeer, answerOverHttp } from '../test/helpers/peer.ts';
import fs from 'node:fs/promises';
import path from 'node:path';
import { parseProfileName, readProfile, summariseProfile } from './cpuprofile.ts';
import { loadAverage } from './proc.ts';
import { printWindow, sessionSecondBudget, type ProfileWindow } from './profile.ts';
import { measureCpuRow } from './session-cpu.ts';
import { startBenchService } from './service.ts';
import { SessionLoad, TURN_SPREAD_MS, getJson, round, warmUp, type WindowResult } from './session-load.ts';
import { floorRatio, measureTransportFloor, type TransportFloor } from './transport-floor.ts';

/** The load: 24 client-rendered sessions speaking at once on the 2-core machine. */
const CLIENT_SESSIONS = Number(process.env.BENCH_CLIENT_SESSIONS ?? 24);
/** The server-rendered row beside it, at the load session_cpu measures (3 keep up on 2 cores); 0 leaves it out. */
const SERVER_SESSIONS = Number(process.env.BENCH_SERVER_SESSIONS ?? 3);
const WINDOW_S = Number(process.env.BENCH_CPU_WINDOW_S ?? 20);
/** Sessions' first turns and the receivers' first poses settle within a few seconds. */
const WARMUP_S = Number(process.env.BENCH_CPU_WARMUP_S ?? 5);
/** Where the receivers take the session's audio: on the `avatar` channel (as the browser), the track, or both rows. */
type AudioRoute = 'channel' | 'track';
const CLIENT_AUDIO = (process.env.BENCH_CLIENT_AUDIO ?? 'channel') as AudioRoute | 'both';
if (!['channel', 'track', 'both'].includes(CLIENT_AUDIO)) throw new Error('BENCH_CLIENT_AUDIO: channel, track or both');
/**
 * How many times the client row runs, each between two floor readings; the target is the median ratio (3 by default:
 * one row's ratio moves with the floor's reading, 0.31–0.37× in ten quiet runs of the same code). With `both`: how
 * many channel/track pairs, alternated (ABBA), so drifting load falls on both (1 by default).
 */
const CLIENT_ROUNDS = Number(process.env.BENCH_CLIENT_ROUNDS ?? (CLIENT_AUDIO === 'both' ? 1 : 3));
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

/** The session's audio clock for poses and channel audio: 48 kHz RTP ticks, modulo 2^32. */
const RTP_TICKS_PER_MS = 48;
/** The channel's Opus is encoded at the session's rate (16 kHz unless the deployment says otherwise). */
const CHANNEL_DECODE_RATE = 16_000;
/** Received 10 ms buffers kept per receiver (the window's 20 s is 2 000; a few seconds ahead of play come on top). */
const KEPT_AUDIO_BUFFERS = 4_000;

/** The first ms of speech after a gap, which the service sends as soon as it is queued at the clock's position. */
const ONSET_MS = 100;

/**
 * A wrtc receiver as the client library's `render: 'client'` peer: audio, the `avatar` channel, pose timing counted;
 * with `route` `channel` it asks for the session's audio on the channel and decodes it (see the file's comment).
 */
class PoseReceivingPeer extends ReceivingPeer {
  hello = false;
  poses = 0;
  latePoses = 0;
  /** The route the service confirmed (`audio-route`); the track until it does. */
  audioRoute: AudioRoute = 'track';
  /**
   * Channel audio: 20 ms packets decoded, of those arriving after their audio left the clock (and of these, how many
   * lie within `ONSET_MS` of a fresh start: speech after a gap), and sent again.
   */
  audioPackets = 0;
  lateAudioPackets = 0;
  lateFreshAudioPackets = 0;
  resentAudioPackets = 0;
  /** The channel's decoded audio, 10 ms at a time, each `at` the time its audio leaves the service's clock. */
  readonly channelAudio: Array<{ at: number; rms: number }> = [];
  /** Lead of each pose over its audio leaving the service, ms (the latest ones kept). */
  readonly leadsMs: number[] = [];
  private lastSync: { rtp: number; at: number } | null = null;
  private channel: RTCDataChannel | null = null;
  private decoder: Decoder | null = null;
  /** The rtp of the last packet decoded; a packet at or before it was sent again (`PoseChannelMessage` `audio`). */
  private lastAudioRtp: number | null = null;
  /** Where the stream last started afresh (`fresh`: after a gap or a barge-in). */
  private freshRtp: number | null = null;

  constructor(private readonly askAudio: boolean) {
    super();
  }

  static opener(route: AudioRoute): (baseUrl: string, sessionId: string) => Promise<ReceivingPeer> {
    return async (baseUrl, sessionId) => {
      const peer = new PoseReceivingPeer(route === 'channel');
      peer.keepFrames = false;
      try {
        await peer.negotiate(answerOverHttp(baseUrl, sessionId));
      } catch (error) {
        peer.close();
        throw error;
      }
      return peer;
    };
  }

  protected override async negotiate(
    answerOffer: (offer: { sdp: string; type: 'offer' }) => Promise<{ sdp: string; type: 'answer' }>,
  ): Promise<void> {
    const channel = this.pc.createDataChannel('avatar');
    channel.onmessage = (event: { data: string }) => {
      const data = JSON.parse(event.data) as PoseChannelData;
      for (const message of Array.isArray(data) ? data : [data]) this.receive(message);
    };
    this.channel = channel;
    await super.negotiate(answerOffer);
  }

  private receive(message: PoseChannelMessage): void {
    const at = performance.now();
    if (message.type === 'hello') {
      this.hello = true;
      if (this.askAudio && message.channelAudio?.includes('opus'))
        this.channel?.send(JSON.stringify({ type: 'audio', codec: 'opus' } satisfies ChannelAudioRequest));
    } else if (message.type === 'audio-route') this.audioRoute = message.route;
    else if (message.type === 'sync') this.lastSync = { rtp: message.rtp, at };
    else if (message.type === 'audio') this.receiveAudio(message, at);
    else if (message.type === 'flush' && message.audio) {
      // Barge-in: the audio not yet heard is void, and what comes next may start before the last packet decoded.
      const firstUnheard = this.channelAudio.findIndex((a) => a.at > at);
      if (firstUnheard >= 0) this.channelAudio.splice(firstUnheard);
      this.lastAudioRtp = null;
    } else if (message.type === 'pose' && this.lastSync) {
      this.poses++;
      const lead = this.leavesAt(message.rtp, this.lastSync) - at;
      if (lead < 0) this.latePoses++;
      this.leadsMs.push(lead);
      if (this.leadsMs.length > 2_000) this.leadsMs.splice(0, 1_000);
    }
  }

  /** When the audio at `rtp` leaves the service's clock, extrapolated from a `sync` (performance.now() time). */
  private leavesAt(rtp: number, sync: { rtp: number; at: number }): number {
    return sync.at + rtpDiff(rtp, sync.rtp) / RTP_TICKS_PER_MS;
  }

  private receiveAudio(message: Extract<PoseChannelMessage, { type: 'audio' }>, at: number): void {
    this.decoder ??= new Decoder({ sample_rate: CHANNEL_DECODE_RATE, channels: 1 });
    if (message.fresh) {
      this.decoder.reset();
      this.freshRtp = message.rtp;
    }
    const step = CHANNEL_AUDIO_PACKET_MS * RTP_TICKS_PER_MS;
    message.packets.forEach((packet, i) => {
      const rtp = (message.rtp + i * step) >>> 0;
      if (this.lastAudioRtp !== null && rtpDiff(rtp, this.lastAudioRtp) <= 0) {
        this.resentAudioPackets++;
        return;
      }
      this.lastAudioRtp = rtp;
      const pcm = this.decoder!.decode(Buffer.from(packet, 'base64'));
      const samples = new Int16Array(pcm.buffer, pcm.byteOffset, pcm.byteLength >> 1);
      this.audioPackets++;
      // Placed where it plays: without a sync yet, at its arrival.
      const leaves = this.lastSync ? this.leavesAt(rtp, this.lastSync) : at;
      if (leaves < at) {
        this.lateAudioPackets++;
        const sinceFresh = this.freshRtp === null ? Infinity : rtpDiff(rtp, this.freshRtp);
        if (sinceFresh >= 0 && sinceFresh < ONSET_MS * RTP_TICKS_PER_MS) this.lateFreshAudioPackets++;
      }
      const tenMs = CHANNEL_DECODE_RATE / 100;
      for (let from = 0; from + tenMs <= samples.length; from += tenMs) {
        let sum = 0;
        for (let k = from; k < from + tenMs; k++) sum += samples[k]! * samples[k]!;
        this.channelAudio.push({ at: leaves + (from / tenMs) * 10, rms: Math.sqrt(sum / tenMs) });
      }
    });
    if (this.channelAudio.length > KEPT_AUDIO_BUFFERS) this.channelAudio.splice(0, KEPT_AUDIO_BUFFERS / 2);
  }
}

/**
 * A received 10 ms audio buffer this loud is speech (the built-in voice's words are at RMS ~1 000-5 000; the receiver's
 * comfort noise between them, and DTX silence, stay far below).
 */
const SPEECH_RMS = 200;

/** What a receiver heard, 10 ms at a time: the channel's decoded audio once its audio is there, else its track's. */
const heard = (peer: PoseReceivingPeer): Array<{ at: number; rms: number }> =>
  peer.audioRoute === 'channel' ? peer.channelAudio : peer.audio;

/**
 * Share of the window's 10 ms buffers, over all receivers, that carried speech (`heard`). On a starved host the TTS
 * engine falls behind, sessions wait in silence (DTX: little Opus work) and CPU per session-second falls with it, so
 * runs are only comparable at a similar share; CPU per voiced second divides by this share.
 */
function speechShare(peers: PoseReceivingPeer[], from: number, to: number, of = heard): number {
  let speech = 0;
  for (const peer of peers) for (const a of of(peer)) if (a.at >= from && a.at < to && a.rms >= SPEECH_RMS) speech++;
  return speech / (peers.length * ((to - from) / 10));
}

/** The sessions' pose and channel audio counters (`GET /sessions/{id}/metrics`), summed. */
async function channelMetrics(load: SessionLoad): Promise<Record<keyof ChannelCounters, number>> {
  const total = { poses_sent: 0, poses_late: 0, poses_skipped: 0, audio_packets_sent: 0, audio_packets_late: 0 };
  for (const s of load.sessions) {
    const { media } = await getJson<{ media: ChannelCounters }>(load.baseUrl, `/sessions/${s.id}/metrics`);
    for (const key of Object.keys(total) as Array<keyof ChannelCounters>) total[key] += media[key] ?? 0;
  }
  return total;
}

interface ChannelCounters {
  poses_sent?: number;
  poses_late?: number;
  poses_skipped?: number;
  audio_packets_sent?: number;
  audio_packets_late?: number;
}

export interface ClientRowResult extends WindowResult {
  /** The service process alone (no TTS engine processes), ms per session-second */
  service_cpu_ms_per_session_second: number;
  /**
   * Share of the receivers' audio in the window that was voiced (`speechShare`): the pauses between words and
   * sentences of a speaking session are not. A speaking session-second (the target's) is a second of a session in a
   * turn (`turn_share`, ~1 here); these divide by the voiced share instead, beside it.
   */
  voiced_share: number;
  /** The service tree's CPU per voiced second heard, and the service process's alone */
  cpu_ms_per_voiced_second: number;
  service_cpu_ms_per_voiced_second: number;
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
  /** The route the receivers asked for, and how many the service moved to the channel (`audio-route`) */
  audio_route_asked: AudioRoute;
  receivers_on_channel_audio: number;
  /** Channel audio in the window, as the service counts it: 20 ms packets sent, and sent after their audio left */
  channel_audio_packets_sent: number;
  channel_audio_packets_sent_late_percent: number;
  /** … and at the receivers: packets decoded, arriving after their audio left the clock, sent again */
  channel_audio_packets: number;
  channel_audio_late_packets: number;
  channel_audio_late_percent: number;
  /** Of the late ones, those within `ONSET_MS` of a fresh start (speech after a gap) */
  channel_audio_late_fresh_packets: number;
  channel_audio_resent_packets: number;
  /** What the track carried meanwhile, by the same measure (≈ 0 once the audio is on the channel) */
  track_speech_share: number;
}

async function measureClientRow(sessions: number, route: AudioRoute): Promise<ClientRowResult> {
  if (PROFILE) await fs.mkdir(PROFILE_DIR, { recursive: true });
  const service = await startBenchService({
    env: { SERVICE_MAX_SESSIONS: String(sessions + 2), SERVICE_MAX_PENDING_SESSIONS: String(sessions + 2) },
    nodeArgs: PROFILE ? ['--cpu-prof', `--cpu-prof-dir=${PROFILE_DIR}`, '--cpu-prof-interval=1000'] : undefined,
  });
  const load = new SessionLoad(service.baseUrl, service.pid);
  let result: ClientRowResult | null = null;
  try {
    await warmUp(service.baseUrl, service.pid, 'rt');
    await load.open('rt', sessions, undefined, { connect: PoseReceivingPeer.opener(route) });
    load.startSpeaking({ spread: true });
    const peers = () => load.sessions.map((s) => s.peer as PoseReceivingPeer);
    const counts = () => ({
      poses: peers().reduce((n, p) => n + p.poses, 0),
      late: peers().reduce((n, p) => n + p.latePoses, 0),
      audio: peers().reduce((n, p) => n + p.audioPackets, 0),
      lateAudio: peers().reduce((n, p) => n + p.lateAudioPackets, 0),
      lateFreshAudio: peers().reduce((n, p) => n + p.lateFreshAudioPackets, 0),
      resentAudio: peers().reduce((n, p) => n + p.resentAudioPackets, 0),
    });
    // The last session's first turn starts a spread after the first's; then the sessions settle.
    await new Promise((r) => setTimeout(r, TURN_SPREAD_MS + WARMUP_S * 1000));
    const before = counts();
    const sentBefore = await channelMetrics(load);
    const windowFrom = performance.now();
    const window = await load.measure(WINDOW_S * 1000);
    const windowTo = performance.now();
    const share = speechShare(peers(), windowFrom, windowTo);
    const onChannel = peers().filter((p) => p.audioRoute === 'channel');
    const trackShare = onChannel.length > 0 ? speechShare(onChannel, windowFrom, windowTo, (p) => p.audio) : NaN;
    const sentAfter = await channelMetrics(load);
    const after = counts();
    const poses = after.poses - before.poses;
    const late = after.late - before.late;
    const audioPackets = after.audio - before.audio;
    const sent = sentAfter.poses_sent - sentBefore.poses_sent;
    const sentLate = sentAfter.poses_late - sentBefore.poses_late;
    const audioSent = sentAfter.audio_packets_sent - sentBefore.audio_packets_sent;
    const audioSentLate = sentAfter.audio_packets_late - sentBefore.audio_packets_late;
    const leads = peers()
      .flatMap((p) => p.leadsMs)
      .sort((a, b) => a - b);
    const serviceMs = window.cpu_ms_by_process.service ?? 0;
    result = {
      ...window,
      service_cpu_ms_per_session_second: round(serviceMs / (sessions * window.window_s), 1),
      voiced_share: round(share, 2),
      cpu_ms_per_voiced_second: round(window.cpu_ms / (sessions * window.window_s * share), 1),
      service_cpu_ms_per_voiced_second: round(serviceMs / (sessions * window.window_s * share), 1),
      poses_sent: sent,
      late_poses: sentLate,
      late_pose_percent: sent > 0 ? round((sentLate / sent) * 100, 2) : NaN,
      poses_skipped: sentAfter.poses_skipped - sentBefore.poses_skipped,
      poses_received: poses,
      receiver_late_pose_percent: poses > 0 ? round((late / poses) * 100, 2) : NaN,
      pose_lead_median_ms: round(leads[leads.length >> 1] ?? NaN, 1),
      receivers_with_hello: peers().filter((p) => p.hello).length,
      failed_speaks: load.sessions.reduce((n, s) => n + s.failedSpeaks, 0),
      audio_route_asked: route,
      receivers_on_channel_audio: onChannel.length,
      channel_audio_packets_sent: audioSent,
      channel_audio_packets_sent_late_percent: audioSent > 0 ? round((audioSentLate / audioSent) * 100, 2) : NaN,
      channel_audio_packets: audioPackets,
      channel_audio_late_packets: after.lateAudio - before.lateAudio,
      channel_audio_late_percent:
        audioPackets > 0 ? round(((after.lateAudio - before.lateAudio) / audioPackets) * 100, 2) : NaN,
      channel_audio_late_fresh_packets: after.lateFreshAudio - before.lateFreshAudio,
      channel_audio_resent_packets: after.resentAudio - before.resentAudio,
      track_speech_share: round(trackShare, 3),
    };
    console.log(
      `  client_rendered, audio asked on the ${route} (${onChannel.length} of ${sessions} on the channel): ` +
        `${result.channel_audio_packets_sent} channel audio packets sent (${result.channel_audio_packets_sent_late_percent}% late), ` +
        `${result.channel_audio_packets} received (${result.channel_audio_late_percent}% late by the receivers' sync extrapolation, ` +
        `${result.channel_audio_late_fresh_packets} of them in the first ${ONSET_MS} ms after a gap), ` +
        `${result.channel_audio_resent_packets} sent again; the track's speech share meanwhile ${result.track_speech_share}`,
    );
    console.log(
      `  client_rendered: ${result.cpu_ms_per_session_second} ms CPU per session-second (service alone ` +
        `${result.service_cpu_ms_per_session_second}), in turns ${result.turn_share} of the time; ${result.cpu_ms_per_voiced_second} per voiced second (${result.service_cpu_ms_per_voiced_second}; voiced ${result.voiced_share}), ${sessions} sessions, ${result.late_pose_percent}% of ${sent} poses sent late ` +
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
  const firstRoute: AudioRoute = CLIENT_AUDIO === 'both' ? 'channel' : CLIENT_AUDIO;
  if (PROFILE) return { ...out, client_rendered: await measureClientRow(CLIENT_SESSIONS, firstRoute) };
  // The floor is read before every row and after the last, and each row's ratio uses the mean of the readings just
  // before and just after it: the host's speed drifts within minutes (readings of one 10 s floor moved 76 → 91 ms per
  // stream-second as others' load rose, 72 and 89 around one row on a quiet host), and a floor read only once, a
  // minute or more from a row, made the ratio move with that drift.
  const readFloor = () =>
    measureTransportFloor(SERVER_SESSIONS || 3).catch((error: Error): { error: string } => ({ error: error.message }));
  const floorReadings: Array<TransportFloor | { error: string }> = [await readFloor()];
  /** Sets a row's ratios against the floor around it (the last two readings). */
  const setRatios = (row: Record<string, unknown>, values: Record<string, number>) => {
    const around = meanFloor(floorReadings.slice(-2));
    row.transport_floor_around = 'error' in around ? null : around.cpu_ms_per_stream_second;
    for (const [key, value] of Object.entries(values)) row[key] = 'error' in around ? null : floorRatio(value, around);
  };
  if (SERVER_SESSIONS > 0) {
    try {
      const server = await measureCpuRow(
        { key: 'rt_speaking', model: 'rt', speaking: true },
        SERVER_SESSIONS,
        WINDOW_S,
      );
      out.server_rendered = server;
      floorReadings.push(await readFloor());
      setRatios(server as unknown as Record<string, unknown>, {
        cpu_ratio_to_transport_floor: server.cpu_ms_per_session_second,
      });
    } catch (error) {
      out.server_rendered = { error: (error as Error).message };
    }
  }
  // With `both`, the two routes alternate ABBA over the rounds: channel, track, track, channel, …
  const routes: AudioRoute[] =
    CLIENT_AUDIO === 'both'
      ? Array.from({ length: CLIENT_ROUNDS }, (_, r): AudioRoute[] =>
          r % 2 === 0 ? ['channel', 'track'] : ['track', 'channel'],
        ).flat()
      : Array.from({ length: CLIENT_ROUNDS }, () => CLIENT_AUDIO);
  const rows: Record<AudioRoute, Array<Record<string, unknown>>> = { channel: [], track: [] };
  for (const route of routes) {
    try {
      const client = await measureClientRow(CLIENT_SESSIONS, route);
      const row = { ...client } as unknown as Record<string, unknown>;
      rows[route].push(row);
      floorReadings.push(await readFloor());
      setRatios(row, {
        cpu_ratio_to_transport_floor: client.cpu_ms_per_session_second,
        service_cpu_ratio_to_transport_floor: client.service_cpu_ms_per_session_second,
        voiced_cpu_ratio_to_transport_floor: client.cpu_ms_per_voiced_second,
        voiced_service_cpu_ratio_to_transport_floor: client.service_cpu_ms_per_voiced_second,
      });
      console.log(`  … ${row.cpu_ratio_to_transport_floor}× the floor around it (${row.transport_floor_around} ms)`);
    } catch (error) {
      rows[route].push({ audio_route_asked: route, error: (error as Error).message });
    }
  }
  const floor = meanFloor(floorReadings);
  out.transport_floor = floor;
  if ('cpu_ms_per_stream_second' in floor)
    console.log(
      `  transport floor, mean of the readings around the rows: ${floor.cpu_ms_per_stream_second} ms CPU per ` +
        `stream-second (${floor.readings.join(', ')})`,
    );
  // The target row is the route the browser takes (the channel) unless only the track was asked for; with several
  // rounds, each route's median by its ratio to the floor around it (the upper of the middle two: the target is a
  // ceiling), each round's ratio kept beside it.
  const ratioOf = (row: Record<string, unknown>) =>
    typeof row.cpu_ratio_to_transport_floor === 'number' ? row.cpu_ratio_to_transport_floor : Infinity;
  const median = (list: Array<Record<string, unknown>>) => ({
    ...[...list].sort((a, b) => ratioOf(a) - ratioOf(b))[list.length >> 1],
    cpu_ratio_rounds: list.map((row) => row.cpu_ratio_to_transport_floor ?? null),
  });
  out.client_rendered = median(rows[firstRoute]);
  if (CLIENT_AUDIO === 'both') out.client_rendered_track = median(rows.track);
  if (routes.length > 1) out.client_rendered_runs = rows;
  return out;
}

/** The floor as the mean of its readings (each kept in `readings`), failed readings left out; an error when all failed. */
function meanFloor(
  readings: Array<TransportFloor | { error: string }>,
): (TransportFloor & { readings: number[] }) | { error: string } {
  const good = readings.filter((f): f is TransportFloor => !('error' in f));
  if (good.length === 0) {
    const failed = readings.find((f): f is { error: string } => 'error' in f);
    return { error: failed?.error ?? 'no floor' };
  }
  const mean = good.reduce((sum, f) => sum + f.cpu_ms_per_stream_second, 0) / good.length;
  return {
    ...good[good.length - 1],
    window_s: good.reduce((sum, f) => sum + f.window_s, 0),
    cpu_ms_per_stream_second: round(mean, 1),
    readings: good.map((f) => f.cpu_ms_per_stream_second),
  };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  console.log(JSON.stringify(await benchClientRenderCpu(), null, 2));
  process.exit(0);
}
