import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { PoolLoadSnapshot } from '../../actors/pool-load.ts';
import type { SessionBus, TurnOutcome } from '../sessions/session-bus.ts';
import type { TurnMark, TurnObserver } from '../sessions/metrics.ts';
import type { FrameCounts, ServiceMetricsFeed } from '../sessions/session-factory.ts';

/** Every metric name starts with this, the default process metrics too (`avatar_process_cpu_seconds_total`, …). */
export const METRICS_PREFIX = 'avatar_';

/**
 * Latency buckets in seconds, 25 ms to 10 s: first audio is expected in the low hundreds of milliseconds, an
 * upstream language model can take seconds, and anything past 10 s is a failure whichever bucket it lands in.
 */
export const LATENCY_BUCKETS_S = [0.025, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10];

/**
 * Event-loop delay sampling resolution (ms) of the default metrics: fine enough to see a 10 ms stall, which is
 * one audio chunk of the media clock; prom-client's default (10) as an explicit constant.
 */
const EVENT_LOOP_PRECISION_MS = 10;

/** What `GET /metrics` reads at scrape time from the live service. */
export interface MetricsSources {
  /** Live sessions by state (`created`, `running`, `paused`), and creations still in progress. */
  sessionsByState(): Record<string, number>;
  capacity(): { active: number; pending: number };
  /** Frames of the live sessions so far (sessions that ended are added when they end). */
  liveFrames(): { sent: number; late: number; peers: number };
  pools(): Record<string, PoolLoadSnapshot>;
  /** The render pool's reused frame buffers (`actors/render/frame-buffers.ts`). */
  frameBuffers?(): { outstanding: number; free: number; overReleases: number };
}

/** Spoken label of a termination reason (`deleted by client` → `deleted_by_client`). */
export function reasonLabel(reason: string): string {
  return (
    reason
      .toLowerCase()
      .replace(/[^a-z0-9]+/g, '_')
      .replace(/^_|_$/g, '') || 'unknown'
  );
}

/**
 * The service's Prometheus metrics (prom-client, own registry so several services in one process do not clash).
 * Turn latencies come from each session's `SessionMetrics` (the same figures `GET /sessions/{id}/metrics` shows),
 * through `turnObserver()`; session, frame and pool figures are read at scrape time from `MetricsSources`.
 * Turn ids are not labels (one series per turn would grow without bound): they are in the per-session metrics,
 * the logs (`turnId`) and the SSE events (`turn_id`).
 */
export class ServiceMetrics implements ServiceMetricsFeed {
  readonly registry = new Registry();
  private sources: MetricsSources | null = null;
  /** Frames of sessions that have ended, so the `_total` counters stay monotonic. */
  private readonly retired: FrameCounts = { sent: 0, late: 0 };

  private readonly turnsStarted: Counter<'kind'>;
  private readonly turns: Counter<'kind' | 'outcome'>;
  private readonly turnFirstAudio: Histogram<'kind'>;
  private readonly speakFirstAudio: Histogram;
  private readonly chatFirstToken: Histogram;
  private readonly ttsFirstAudio: Histogram<'provider'>;
  private readonly endOfSpeechFirstAudio: Histogram<'kind'>;
  private readonly interruptToSilence: Histogram;
  private readonly terminated: Counter<'reason'>;
  private readonly sseEvents: Counter<'event'>;
  /** Webhook deliveries (`src/webhooks/`): delivered, given up (refused or past the retry period), dropped by the outbox bound. */
  readonly webhookDeliveries: { delivered(): void; failed(): void; dropped(): void };

  constructor(info: { version: string }) {
    const registers = [this.registry];
    const p = METRICS_PREFIX;
    collectDefaultMetrics({
      register: this.registry,
      prefix: p,
      eventLoopMonitoringPrecision: EVENT_LOOP_PRECISION_MS,
    });
    new Gauge({
      name: `${p}build_info`,
      help: 'Service version (value always 1)',
      labelNames: ['version'],
      registers,
    }).set({ version: info.version }, 1);

    // prom-client calls `collect` with the metric as `this`; the service's figures come through these.
    const sources = () => this.sources;
    const retired = this.retired;
    new Gauge({
      name: `${p}sessions`,
      help: 'Live sessions by state: created (not started), running, paused, creating (POST /sessions in progress)',
      labelNames: ['state'],
      registers,
      collect() {
        this.reset();
        const byState = sources()?.sessionsByState() ?? {};
        for (const state of ['creating', 'created', 'running', 'paused']) this.set({ state }, byState[state] ?? 0);
      },
    });
    new Gauge({
      name: `${p}session_capacity`,
      help: 'Session caps: active (SERVICE_MAX_SESSIONS) and pending (SERVICE_MAX_PENDING_SESSIONS)',
      labelNames: ['kind'],
      registers,
      collect() {
        const capacity = sources()?.capacity();
        if (!capacity) return;
        this.set({ kind: 'active' }, capacity.active);
        this.set({ kind: 'pending' }, capacity.pending);
      },
    });
    new Gauge({
      name: `${p}webrtc_peers_connected`,
      help: 'Live sessions whose WebRTC peer is connected',
      registers,
      collect() {
        this.set(sources()?.liveFrames().peers ?? 0);
      },
    });
    this.terminated = new Counter({
      name: `${p}sessions_terminated_total`,
      help: 'Sessions terminated, by reason: deleted_by_client, orphaned, not_started_in_time, unrecoverable_error, service_shutting_down',
      labelNames: ['reason'],
      registers,
    });
    this.turnsStarted = new Counter({
      name: `${p}turns_started_total`,
      help: 'Turns started, by kind (speak, chat, audio, audio_stream, transcribe, voice)',
      labelNames: ['kind'],
      registers,
    });
    this.turns = new Counter({
      name: `${p}turns_total`,
      help: 'Turns finished, by kind and outcome (completed, interrupted, paused, error, terminated)',
      labelNames: ['kind', 'outcome'],
      registers,
    });
    const latency = <L extends string>(name: string, help: string, labelNames: L[] = []) =>
      new Histogram<L>({ name: `${p}${name}`, help, labelNames, buckets: LATENCY_BUCKETS_S, registers });
    this.turnFirstAudio = latency(
      'turn_first_audio_seconds',
      "Request accepted → the turn's first audio sample handed to WebRTC, by turn kind",
      ['kind'],
    );
    this.speakFirstAudio = latency(
      'speak_first_audio_seconds',
      'POST /speak accepted → first audio sample handed to WebRTC',
    );
    this.chatFirstToken = latency(
      'chat_first_token_seconds',
      'Chat turn accepted → first token from the language model (TTFT)',
    );
    this.ttsFirstAudio = latency(
      'tts_first_audio_seconds',
      'Synthesis started → first audio chunk from the TTS provider, by provider',
      ['provider'],
    );
    this.endOfSpeechFirstAudio = latency(
      'end_of_speech_first_audio_seconds',
      "The user's speech ended → first audio sample of the answer handed to WebRTC: kind voice from the VAD's end of turn (hands-free), transcribe from the upload",
      ['kind'],
    );
    this.interruptToSilence = latency(
      'interrupt_to_silence_seconds',
      'Interrupt received → playout flushed (the next 10 ms audio chunk is silence)',
    );
    this.sseEvents = new Counter({
      name: `${p}sse_events_total`,
      help: 'Events published to SSE consumers, by event type',
      labelNames: ['event'],
      registers,
    });
    const delivered = new Counter({
      name: `${p}webhook_deliveries_delivered_total`,
      help: 'Webhook deliveries a receiver accepted (2xx)',
      registers,
    });
    const failed = new Counter({
      name: `${p}webhook_deliveries_failed_total`,
      help: 'Webhook deliveries given up: refused by the receiver (4xx other than 408/429, a redirect) or still failing after the retry period',
      registers,
    });
    const dropped = new Counter({
      name: `${p}webhook_deliveries_dropped_total`,
      help: 'Webhook deliveries dropped undelivered because the outbox was full (oldest first)',
      registers,
    });
    this.webhookDeliveries = {
      delivered: () => delivered.inc(),
      failed: () => failed.inc(),
      dropped: () => dropped.inc(),
    };

    new Counter({
      name: `${p}frames_sent_total`,
      help: 'Video frames handed to WebRTC, all sessions',
      registers,
      collect() {
        this.reset();
        this.inc(retired.sent + (sources()?.liveFrames().sent ?? 0));
      },
    });
    new Counter({
      name: `${p}frames_late_total`,
      help: 'Video frames that left more than one frame period after their presentation time, all sessions',
      registers,
      collect() {
        this.reset();
        this.inc(retired.late + (sources()?.liveFrames().late ?? 0));
      },
    });
    const pools = () => Object.entries(sources()?.pools() ?? {});
    const poolGauge = (name: string, help: string, value: (load: PoolLoadSnapshot) => number) =>
      new Gauge({
        name: `${p}${name}`,
        help,
        labelNames: ['pool'],
        registers,
        collect() {
          for (const [pool, load] of pools()) this.set({ pool }, value(load));
        },
      });
    const frameBuffers = () => sources()?.frameBuffers?.() ?? { outstanding: 0, free: 0, overReleases: 0 };
    for (const [name, help, value] of [
      [
        'frame_buffers_outstanding',
        'Reused frame buffers being rendered into or read now: ~6-8 per live session with rendered frames, 0 with none live (a rising floor is a holder that forgets to release)',
        () => frameBuffers().outstanding,
      ],
      [
        'frame_buffers_free',
        'Reused frame buffers kept for the next frames (with those lent, at most MAX_FRAME_BUFFERS)',
        () => frameBuffers().free,
      ],
    ] as const) {
      new Gauge({
        name: `${p}${name}`,
        help,
        registers,
        collect() {
          this.set(value());
        },
      });
    }
    new Counter({
      name: `${p}frame_buffers_over_released_total`,
      help: 'Releases of a frame buffer already given back: a holder bug (0 in a healthy service)',
      registers,
      collect() {
        this.reset();
        this.inc(frameBuffers().overReleases);
      },
    });
    poolGauge('pool_threads', 'Worker threads of a pool (render, inference)', (l) => l.threads);
    poolGauge('pool_busy_threads', 'Worker threads running a task now', (l) => l.busy);
    poolGauge(
      'pool_utilization',
      'Busy threads / threads now (use rate(avatar_pool_busy_seconds_total) / threads for a window)',
      (l) => l.busy / l.threads,
    );
    poolGauge('pool_queue_depth', 'Work waiting for a free worker thread', (l) => l.queued);
    for (const [name, help, value] of [
      [
        'pool_busy_seconds_total',
        'Thread-seconds the pool spent running tasks',
        (l: PoolLoadSnapshot) => l.busySeconds,
      ],
      ['pool_tasks_total', 'Tasks the pool finished (successfully or not)', (l: PoolLoadSnapshot) => l.completed],
    ] as const) {
      new Counter({
        name: `${p}${name}`,
        help,
        labelNames: ['pool'],
        registers,
        collect() {
          this.reset();
          for (const [pool, load] of pools()) this.inc({ pool }, value(load));
        },
      });
    }
  }

  /** Where scrape-time figures come from (the supervisor and the pools); set once the service is built. */
  readFrom(sources: MetricsSources): void {
    this.sources = sources;
  }

  /** Feeds a session's `SessionMetrics`: each figure it records is observed here too. */
  turnObserver(): TurnObserver {
    return {
      marked: (turn, what: TurnMark, ms) => {
        const s = ms / 1000;
        if (what === 'llm_first_token_ms') this.chatFirstToken.observe(s);
        if (what !== 'first_sample_sent_ms') return;
        this.turnFirstAudio.observe({ kind: turn.mode }, s);
        if (turn.mode === 'speak') this.speakFirstAudio.observe(s);
        // A recognition upload comes once the user stopped speaking: its turn's first audio is end of speech → first audio.
        // Hands-free (`voice`) turns are timed from the VAD's end of turn instead (`voice.latency`, below).
        if (turn.mode === 'transcribe') this.endOfSpeechFirstAudio.observe({ kind: turn.mode }, s);
      },
      finished: (turn, outcome: TurnOutcome) => this.turns.inc({ kind: turn.mode, outcome }),
      interruptFlushed: (_turn, ms) => this.interruptToSilence.observe(ms / 1000),
    };
  }

  /** Follows a session's bus: turns started, SSE events by type, TTS first audio by provider, voice turns' end of speech → first audio. */
  followSession(bus: SessionBus): void {
    let provider = 'unknown';
    bus.on('turn.started', ({ kind, ttsProvider }) => {
      this.turnsStarted.inc({ kind });
      provider = ttsProvider ?? 'unknown';
    });
    bus.on('voice.latency', ({ firstSampleMs }) =>
      this.endOfSpeechFirstAudio.observe({ kind: 'voice' }, firstSampleMs / 1000),
    );
    bus.on('spec', (record) => {
      this.sseEvents.inc({ event: record.type });
      if (record.type === 'tts' && record.data.stage === 'first_audio')
        this.ttsFirstAudio.observe({ provider }, record.data.ms_elapsed / 1000);
    });
  }

  /** A session ended: its frames join the totals, its reason is counted. */
  sessionEnded(reason: string, frames: FrameCounts): void {
    this.retired.sent += frames.sent;
    this.retired.late += frames.late;
    this.terminated.inc({ reason: reasonLabel(reason) });
  }

  /** The text exposition (`text/plain; version=0.0.4`). */
  async render(): Promise<{ contentType: string; body: string }> {
    return { contentType: this.registry.contentType, body: await this.registry.metrics() };
  }
}
