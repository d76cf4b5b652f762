/**
 * A load of N live sessions on a service running in another process, each with a real wrtc receiver
 * (decoding in this process, so not counted in the service's CPU) and an SSE stream, either speaking
 * continuously (a new speak as soon as the previous turn is back to idle) or started and idle.
 * `measure()` reads the service's process-tree CPU from /proc over a window and its own frame metrics.
 */
import os from 'node:os';
import { ReceivingPeer } from '../test/helpers/peer.ts';
import { SseClient } from '../test/helpers/sse.ts';
import { hostStealMs, loadAverage, sampleTree, threadCpu, threadCpuDelta, type TreeSample } from './proc.ts';

/** ~8 s of speech per turn with the built-in voice: turns end rarely, so the gaps between them are a small share. */
export const SPEECH_TEXT =
  'The quick brown fox jumps over the lazy dog. Pack my box with five dozen liquor jugs. How vexingly quick daft zebras jump.';
/** How often the speaking loop looks for the end of its turn (polling faster only costs the bench's own CPU). */
const TURN_POLL_MS = 25;
/** A turn that does not come back to idle within this long is abandoned (the loop speaks again). */
const TURN_TIMEOUT_MS = 60_000;
/**
 * One turn of `SPEECH_TEXT` (~8 s of speech and its synthesis): `startSpeaking({ spread: true })` starts session i of N
 * i/N of this after the first, so the sessions' turns, and the TTS engine's bursts at their starts, are spread over
 * time as independent users' are, instead of every session synthesising its next turn in the same 3 s: in lock-step a
 * 20 s window held two or three of those bursts depending on its phase (±15 % of the tree's CPU from run to run), and
 * the host ran saturated during each.
 */
export const TURN_SPREAD_MS = 8_000;

export type SessionModel = 'rt' | 'lipsync' | 'mock' | 'rt_head' | 'lipsync_b';

export interface AvatarInfo {
  id: string;
  model_type: string;
}

async function post(baseUrl: string, route: string, body?: unknown): Promise<Response> {
  return fetch(`${baseUrl}${route}`, {
    method: 'POST',
    headers: body === undefined ? {} : { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
}

async function postJson<T>(baseUrl: string, route: string, body?: unknown): Promise<T> {
  const res = await post(baseUrl, route, body);
  const text = await res.text();
  if (!res.ok) throw new Error(`POST ${route} → ${res.status} ${text}`);
  return (text ? JSON.parse(text) : undefined) as T;
}

export async function getJson<T>(baseUrl: string, route: string): Promise<T> {
  // GET /metrics answers Prometheus text unless JSON is asked for.
  const res = await fetch(`${baseUrl}${route}`, { headers: { accept: 'application/json' } });
  const text = await res.text();
  if (!res.ok) throw new Error(`GET ${route} → ${res.status} ${text}`);
  return JSON.parse(text) as T;
}

/** The avatar a model renders in the benches: the built-in one of that model type (`astronaut` for lipsync and lipsync_b). */
export async function avatarFor(baseUrl: string, model: SessionModel): Promise<AvatarInfo> {
  const avatars = await getJson<AvatarInfo[]>(baseUrl, '/avatars');
  // lipsync_b renders photo avatars (model_type lipsync) once the service has a model (SERVICE_LIPSYNC_B_MODEL).
  const preferred =
    model === 'lipsync' || model === 'lipsync_b' ? avatars.find((a) => a.id === 'astronaut') : undefined;
  const avatar = preferred ?? avatars.find((a) => a.model_type === model);
  if (!avatar) throw new Error(`no avatar of model type ${model}`);
  return avatar;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface SessionMetrics {
  media: { frames_sent: number; frames_late: number; media_ms: number; peer_connected: boolean };
}

export interface LoadSession {
  id: string;
  peer: ReceivingPeer;
  sse: SseClient;
  turns: number;
  failedSpeaks: number;
  /** When each turn started (its speak answered) and ended (back to idle; Infinity while in progress), ms */
  turnSpans: Array<{ from: number; to: number }>;
}

export interface WindowResult {
  sessions: number;
  window_s: number;
  /** Service process tree (service + TTS engine processes + any other child), ms of CPU in the window */
  cpu_ms: number;
  cpu_ms_per_session_second: number;
  /** Share of the window's CPU per process of the tree (`service`, the engines by command name) */
  cpu_ms_by_process: Record<string, number>;
  /** The service process's CPU by thread name (JS main thread, render workers, libwebrtc, V8, libuv) */
  cpu_ms_by_thread: Record<string, number>;
  frames_sent: number;
  frames_late: number;
  late_percent: number;
  /** Frames sent per session per second: 25 when the clock keeps up */
  fps_per_session: number;
  turns_completed: number;
  /** Means over the window's one-a-second readings */
  service_rss_mb: number;
  tree_rss_mb: number;
  /** The service tree's CPU in each second of the window, ms per s (all sessions together) */
  cpu_ms_per_s_series: number[];
  /** Share of the host's CPU time (all cores) the hypervisor gave to others during the window (`hostStealMs`) */
  host_steal_percent: number;
  /** 1-minute load average at the end of the window (others' processes share the cores) */
  load_average: [number, number, number];
  /**
   * Share of the sessions' time in the window spent in a turn (speak answered → back to idle): what makes a
   * session-second a speaking one. Speaking sessions start their next turn at once, so only the gaps between turns
   * (an SSE event and a POST) fall outside.
   */
  turn_share: number;
  /** This process's CPU (the receivers, decoding what they receive) in the window, ms per s: it shares the cores */
  bench_process_cpu_ms_per_s: number;
  /** hrtime (µs, CLOCK_MONOTONIC, the clock of `.cpuprofile` timestamps) at the window's edges */
  hr_us: { start: number; end: number };
}

export class SessionLoad {
  readonly sessions: LoadSession[] = [];
  private speaking = false;
  private loops: Promise<void>[] = [];

  constructor(
    readonly baseUrl: string,
    readonly servicePid: number,
  ) {}

  /**
   * Creates, connects (wrtc receiver + SSE) and starts `count` sessions of `model` (on `avatarId`, else the model's
   * bench avatar). `client`: client-rendered sessions (`render: "client"`), each receiver made by `client.connect`.
   */
  async open(
    model: SessionModel,
    count: number,
    avatarId?: string,
    client?: { connect: (baseUrl: string, sessionId: string) => Promise<ReceivingPeer> },
  ): Promise<void> {
    const avatar = avatarId ?? (await avatarFor(this.baseUrl, model)).id;
    for (let i = 0; i < count; i++) {
      const { session_id } = await postJson<{ session_id: string }>(this.baseUrl, '/sessions', {
        avatar_id: avatar,
        model,
        ...(client ? { render: 'client' } : {}),
      });
      const sse = await SseClient.open(`${this.baseUrl}/sessions/${session_id}/events`);
      const peer = await (client?.connect ?? ReceivingPeer.connect)(this.baseUrl, session_id);
      peer.keepFrames = false;
      await postJson(this.baseUrl, `/sessions/${session_id}/start`);
      this.sessions.push({ id: session_id, peer, sse, turns: 0, failedSpeaks: 0, turnSpans: [] });
    }
    for (const s of this.sessions) await s.peer.until(() => s.peer.audio.length > 20, 20_000, 'audio flowing');
  }

  /**
   * Every session speaks continuously until `stopSpeaking()`; with `spread`, session i of N starts its first turn
   * i/N of `TURN_SPREAD_MS` after the first (measure from then on).
   */
  startSpeaking({ spread = false }: { spread?: boolean } = {}): void {
    if (this.speaking) return;
    this.speaking = true;
    const n = this.sessions.length;
    this.loops = this.sessions.map((s, i) => this.speakLoop(s, spread ? (i * TURN_SPREAD_MS) / n : 0));
  }

  /** Stops starting new turns and waits for the current ones to end (interrupting them). */
  async stopSpeaking(): Promise<void> {
    this.speaking = false;
    await Promise.all(
      this.sessions.map((s) => post(this.baseUrl, `/sessions/${s.id}/interrupt`).then((r) => r.text())),
    );
    await Promise.all(this.loops);
    this.loops = [];
  }

  private async speakLoop(s: LoadSession, startAfterMs: number): Promise<void> {
    if (startAfterMs > 0) await sleep(startAfterMs);
    while (this.speaking) {
      const from = s.sse.events.length;
      // A keep-alive socket the server closes just as the next speak is sent ("other side closed") is a failed
      // speak to retry, not the end of the bench.
      const res = await post(this.baseUrl, `/sessions/${s.id}/speak`, { text: SPEECH_TEXT }).catch(() => null);
      await res?.text();
      if (res?.status !== 200) {
        s.failedSpeaks++;
        await sleep(200);
        continue;
      }
      const deadline = performance.now() + TURN_TIMEOUT_MS;
      const span = { from: performance.now(), to: Infinity };
      s.turnSpans.push(span);
      if (s.turnSpans.length > 1_000) s.turnSpans.splice(0, s.turnSpans.length - 100);
      let idle = false;
      while (this.speaking && !idle && performance.now() < deadline) {
        await sleep(TURN_POLL_MS);
        for (let i = from; i < s.sse.events.length; i++) {
          const e = s.sse.events[i];
          if (e.type === 'status' && e.data?.stage === 'idle') idle = true;
        }
        // Frame events are not needed here; keep the array short.
        if (s.sse.events.length > 5_000) s.sse.events.splice(0, s.sse.events.length - 100);
      }
      span.to = performance.now();
      if (idle) s.turns++;
    }
  }

  /** Share of the sessions' time from `from` to `to` (performance.now() ms) spent in a turn. */
  turnShare(from: number, to: number): number {
    let inTurn = 0;
    for (const s of this.sessions)
      for (const span of s.turnSpans) inTurn += Math.max(0, Math.min(to, span.to) - Math.max(from, span.from));
    return inTurn / Math.max(1, this.sessions.length * (to - from));
  }

  /** Waits `warmupMs`, then measures CPU, memory and frame metrics over `windowMs`. */
  async measure(windowMs: number, warmupMs = 0): Promise<WindowResult> {
    if (warmupMs > 0) await sleep(warmupMs);
    const metricsBefore = await this.frameMetrics();
    // The frame counts span from this read to the one after the window: on a starved host those reads come late, and
    // the frames sent meanwhile were once divided by the window alone (46.7 fps "per session" at 25 fps).
    const metricsBeforeAt = performance.now();
    const turnsBefore = this.sessions.reduce((n, s) => n + s.turns, 0);
    const threadsBefore = threadCpu(this.servicePid);
    const hrStart = hrUs();
    const stealBefore = hostStealMs();
    const before = sampleTree(this.servicePid);
    const benchCpuBefore = process.cpuUsage();
    // One reading a second: the memory figures are means over the window (GC makes single readings jumpy).
    const samples = [before];
    while (performance.now() - before.at < windowMs - 1_000) {
      await sleep(Math.min(1_000, windowMs - (performance.now() - before.at)));
      samples.push(sampleTree(this.servicePid));
    }
    await sleep(Math.max(0, windowMs - (performance.now() - before.at)));
    const after = sampleTree(this.servicePid);
    const benchCpu = process.cpuUsage(benchCpuBefore);
    samples.push(after);
    const hrEnd = hrUs();
    const stealMs = hostStealMs() - stealBefore;
    const threadsAfter = threadCpu(this.servicePid);
    const metricsAfter = await this.frameMetrics();
    const metricsSeconds = (performance.now() - metricsBeforeAt) / 1000;
    const turnsAfter = this.sessions.reduce((n, s) => n + s.turns, 0);
    const seconds = (after.at - before.at) / 1000;
    const cpu = after.cpuMs - before.cpuMs;
    const sent = metricsAfter.sent - metricsBefore.sent;
    const late = metricsAfter.late - metricsBefore.late;
    const n = this.sessions.length;
    return {
      sessions: n,
      window_s: round(seconds, 2),
      cpu_ms: Math.round(cpu),
      cpu_ms_per_session_second: round(cpu / (n * seconds), 1),
      cpu_ms_by_process: diffRecords(before, after),
      cpu_ms_by_thread: roundRecord(threadCpuDelta(this.servicePid, threadsBefore, threadsAfter)),
      frames_sent: sent,
      frames_late: late,
      late_percent: sent > 0 ? round((late / sent) * 100, 2) : NaN,
      fps_per_session: round(sent / n / metricsSeconds, 1),
      turns_completed: turnsAfter - turnsBefore,
      service_rss_mb: round(mean(samples.map((x) => x.rootRss)) / 1e6, 1),
      tree_rss_mb: round(mean(samples.map((x) => x.treeRss)) / 1e6, 1),
      cpu_ms_per_s_series: samples
        .slice(1)
        .map((x, i) => Math.round(((x.cpuMs - samples[i].cpuMs) * 1000) / (x.at - samples[i].at))),
      host_steal_percent: round((stealMs / (seconds * 1000 * os.cpus().length)) * 100, 2),
      load_average: loadAverage(),
      turn_share: round(this.turnShare(before.at, after.at), 3),
      bench_process_cpu_ms_per_s: Math.round((benchCpu.user + benchCpu.system) / 1000 / seconds),
      hr_us: { start: hrStart, end: hrEnd },
    };
  }

  private async frameMetrics(): Promise<{ sent: number; late: number }> {
    let sent = 0;
    let late = 0;
    for (const s of this.sessions) {
      const m = await getJson<SessionMetrics>(this.baseUrl, `/sessions/${s.id}/metrics`);
      sent += m.media.frames_sent;
      late += m.media.frames_late;
    }
    return { sent, late };
  }

  /** Deletes every session and closes the receivers and SSE streams. */
  async close(): Promise<void> {
    if (this.speaking) await this.stopSpeaking();
    for (const s of this.sessions) {
      await fetch(`${this.baseUrl}/sessions/${s.id}`, { method: 'DELETE' })
        .then((r) => r.text())
        .catch(() => undefined);
      s.peer.close();
      s.sse.close();
    }
    this.sessions.length = 0;
  }
}

/** One full session lifetime that loads what the first session of a process loads (render worker code, TTS engines). */
export async function warmUp(
  baseUrl: string,
  servicePid: number,
  model: SessionModel,
  avatarId?: string,
): Promise<void> {
  const load = new SessionLoad(baseUrl, servicePid);
  try {
    await load.open(model, 1, avatarId);
    const s = load.sessions[0];
    const from = s.sse.events.length;
    await postJson(baseUrl, `/sessions/${s.id}/speak`, { text: 'Warm up.' });
    await s.sse.waitFor((e) => e.type === 'status' && e.data?.stage === 'idle', 30_000, 'warm-up idle', from);
  } finally {
    await load.close();
  }
}

export const mean = (values: number[]) => values.reduce((a, b) => a + b, 0) / Math.max(1, values.length);

export function hrUs(): number {
  return Number(process.hrtime.bigint() / 1000n);
}

function diffRecords(before: TreeSample, after: TreeSample): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [key, value] of Object.entries(after.byProcess))
    out[key] = Math.round(value - (before.byProcess[key] ?? 0));
  return out;
}

function roundRecord(record: Record<string, number>): Record<string, number> {
  const entries = Object.entries(record)
    .map(([k, v]) => [k, Math.round(v)] as const)
    .filter(([, v]) => v > 0)
    .sort((a, b) => b[1] - a[1]);
  return Object.fromEntries(entries);
}

export const round = (v: number, digits = 1) => Math.round(v * 10 ** digits) / 10 ** digits;
