import type { Logger } from 'pino';
import type { SessionEvent, TranscribeRequest } from '../../machines/session.machine.ts';
import type { AsrProvider } from '../../actors/asr/types.ts';
import type { InferencePool } from '../../actors/inference/pool.ts';
import type { PlayoutClock } from '../../actors/media/playout.ts';
import { StreamResampler } from '../../actors/audio/stream-resampler.ts';
import { SILERO_SAMPLE_RATE, SileroVadStream, type VadEvent } from '../../actors/vad/silero.ts';
import { PAUSE_MAX_MS, PAUSE_MIN_MS } from '../../actors/attention.ts';
import { ECHO_POST_ONSET_MS, Envelope, isEcho, needsEchoCheck } from '../../actors/vad/echo-guard.ts';
import { errorForLog } from '../logger.ts';
import type { SessionBus } from './session-bus.ts';
import { newTurnHandle } from './turn.ts';

/** Audio kept before the VAD's speech start, so a soft first consonant reaches the recogniser. */
export const PRE_ROLL_MS = 200;
/** Audio kept after the VAD's speech end (where the trailing silence began): word endings fade into it. */
export const POST_ROLL_MS = 200;
/**
 * Longest utterance: a turn still open after this goes to recognition as it is (Whisper-style recognisers
 * take ≤ 30 s per request; the buffer stays bounded at ~1 MB).
 */
export const MAX_UTTERANCE_MS = 30_000;
/**
 * Audio kept while nobody speaks, behind what the VAD has judged: it reports a start up to min-speech + one frame
 * after it began; 2 s covers that with room. Audio still waiting for the VAD (at most MAX_VAD_BACKLOG_MS, on a
 * loaded host) is kept on top, or an utterance would lose its beginning before the VAD even saw it.
 */
export const IDLE_RETAIN_MS = 2_000;
/**
 * Audio waiting for the VAD, at most. A real-time source never gets near it; beyond it the inference pool
 * is saturated (or a client sends far faster than real time) and the excess is dropped.
 */
export const MAX_VAD_BACKLOG_MS = 2_000;
/**
 * The same bound while the VAD is still starting (its worker threads load onnxruntime and the model when the
 * first microphone attaches: seconds, over 2 s on a host at half speed). A microphone sends from the moment it
 * connects, and what it says then must not be dropped for a start-up that happens once; 10 s is 320 KB.
 */
export const MAX_VAD_WARMUP_BACKLOG_MS = 10_000;

export type VoiceSourceKind = 'webrtc' | 'listen';

/** What a source's client is told about its own speech (the `/listen` socket forwards these). */
export type VoiceMessage =
  | { type: 'speech_start' }
  | { type: 'speech_end' }
  | { type: 'transcript'; text: string }
  | { type: 'error'; code: string; message: string };

/** The session seen from the voice input: the machine's answer to its events, and its state. */
export interface VoiceHost {
  /** Sends a voice event if the machine accepts it now (`snapshot.can`); true when sent. */
  offerVoice(event: Extract<SessionEvent, { type: 'VOICE.START' | 'VOICE.END' | 'VOICE.CANCEL' }>): boolean;
  /** Sends without asking (INTERRUPT for barge-in, STAGE.ERROR for the missing recogniser). */
  send(event: SessionEvent): void;
  readonly state: string;
  readonly pipelineStage: string;
  readonly busy: boolean;
}

export interface VoiceInputOptions {
  host: VoiceHost;
  /** The shared inference pool (created on first use). */
  pool: () => InferencePool;
  asr: AsrProvider;
  /** SERVICE_VAD_SILENCE_MS: silence that ends the user's turn. */
  silenceMs: number;
  /** SERVICE_VAD_MIN_SPEECH_MS: shorter sounds (a cough, a click) are no turn; also the barge-in minimum. */
  minSpeechMs: number;
  playout: Pick<PlayoutClock, 'on' | 'off'>;
  bus: SessionBus;
  logger: Logger;
}

export const ASR_NOT_CONFIGURED_CODE = 'asr_not_configured';
const ASR_NOT_CONFIGURED_MESSAGE =
  'hands-free conversation needs speech recognition: set SERVICE_ASR_BASE_URL (speech is detected but not answered)';

/**
 * Hands-free conversation for one session: microphone audio in (from the WebRTC peer or `/listen`), Silero
 * VAD on the shared inference pool, turn-taking (speech start → `VOICE.START`, end of turn after the
 * configured silence → `VOICE.END` with the utterance, which the machine recognises and answers as a chat),
 * and barge-in: speech that lasts the minimum while the avatar is busy interrupts it by the same path as
 * `POST /interrupt`, unless it is the avatar's own voice heard back (`actors/vad/echo-guard.ts`).
 *
 * One source at a time: attaching a new one (a new peer with a microphone, a new `/listen` socket)
 * replaces the previous, which is told so. Each source has its own VAD state.
 */
export class VoiceInput {
  private source: VoiceSource | null = null;
  /** Loudness of what the service sent (for the echo check), on the performance.now() clock. */
  readonly sent = new Envelope();
  /** When the avatar's current (latest) turn became audible on the wire. */
  avatarStartedAt: number | null = null;
  private asrErrorReported = false;
  private closed = false;
  private readonly unsubscribe: Array<() => void> = [];
  private readonly onAudio = (samples: Int16Array) => this.sent.add(samples, performance.now());
  private readonly onTurnStarted = () => (this.avatarStartedAt = performance.now());

  constructor(readonly options: VoiceInputOptions) {
    options.playout.on('audio', this.onAudio);
    options.playout.on('turnStarted', this.onTurnStarted);
    const { bus } = options;
    this.unsubscribe.push(
      // A voice turn's figures are on its turn record (`Turn.voiceLatency`) until its first sample is sent.
      bus.on('voice.transcript', ({ turnId, ms }) => {
        const latency = bus.turn(turnId)?.voiceLatency;
        if (latency) latency.transcriptMs = Math.round(ms);
      }),
      bus.on('spec', (record) => {
        const latency = bus.runningTurn?.voiceLatency;
        if (record.type !== 'llm' || !latency || latency.transcriptMs === null || latency.firstTokenMs !== null) return;
        latency.firstTokenMs = Math.round(performance.now() - latency.endedAt);
      }),
      bus.on('media.firstSample', ({ turnId }) => {
        const turn = bus.turn(turnId);
        const latency = turn?.voiceLatency;
        if (!turn || !latency) return;
        turn.voiceLatency = null;
        const figures = {
          turnId,
          transcriptMs: latency.transcriptMs,
          firstTokenMs: latency.firstTokenMs,
          firstSampleMs: Math.round(performance.now() - latency.endedAt),
        };
        options.logger.info(figures, 'voice turn latency');
        bus.emit('voice.latency', figures);
      }),
    );
  }

  /** @internal a voice turn, now running, went to recognition at `endedAt` (its end of turn). */
  trackLatency(turnId: string, endedAt: number): void {
    const turn = this.options.bus.turn(turnId);
    if (turn) turn.voiceLatency = { endedAt, transcriptMs: null, firstTokenMs: null };
  }

  get asrConfigured(): boolean {
    return this.options.asr.status().configured;
  }

  /** A new microphone; the previous source (if any) is closed and told it was replaced. */
  attach(kind: VoiceSourceKind, notify: (message: VoiceMessage) => void = () => undefined): VoiceSource {
    if (this.closed) throw new Error('voice input is closed');
    const previous = this.source;
    const source = new VoiceSource(this, kind, notify);
    this.source = source;
    if (previous) {
      previous.notifyReplaced();
      previous.close();
    }
    this.options.logger.info({ source: kind }, 'voice input attached');
    if (!this.asrConfigured)
      notify({ type: 'error', code: ASR_NOT_CONFIGURED_CODE, message: ASR_NOT_CONFIGURED_MESSAGE });
    return source;
  }

  get current(): VoiceSource | null {
    return this.source;
  }

  /** @internal a source closing itself */
  detached(source: VoiceSource): void {
    if (this.source === source) this.source = null;
  }

  /**
   * The SSE `error` for speech nobody can recognise, once per session, through the machine (a recoverable
   * stage error: `error`, then `status idle`). Sent only while idle, so it never cuts a turn short.
   */
  reportMissingAsr(): void {
    if (this.asrErrorReported || this.options.host.busy || this.options.host.state !== 'running') return;
    this.asrErrorReported = true;
    this.options.host.send({
      type: 'STAGE.ERROR',
      code: ASR_NOT_CONFIGURED_CODE,
      message: ASR_NOT_CONFIGURED_MESSAGE,
      fatal: false,
    });
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.options.playout.off('audio', this.onAudio);
    this.options.playout.off('turnStarted', this.onTurnStarted);
    for (const off of this.unsubscribe.splice(0)) off();
    this.source?.close();
    this.source = null;
  }
}

interface OpenTurn {
  /** 16 kHz timeline sample where the VAD says speech began. */
  startSample: number;
  /** The machine took VOICE.START (hearing); false: the speech is reported but makes no turn. */
  accepted: boolean;
  /** The barge-in decision waiting for ECHO_POST_ONSET_MS of audio after the onset. */
  pending?: { timer: NodeJS.Timeout; decide(): void };
}

/** One microphone stream: resampled to 16 kHz, analysed by its own VAD state, cut into utterances. */
export class VoiceSource {
  private readonly vad: SileroVadStream;
  private resampler: StreamResampler | null = null;
  /** Loudness of what the microphone heard, on the performance.now() clock (for the echo check). */
  private readonly mic = new Envelope();
  /** 16 kHz audio kept for utterances: chunks from `bufferStart` on (timeline samples). */
  private chunks: Int16Array[] = [];
  private bufferStart = 0;
  /** 16 kHz samples received so far (the end of the timeline) and when the last arrived. */
  private received = 0;
  private lastArrival = performance.now();
  private backlog = 0;
  /** Until the VAD's workers are up and it has caught up with what came meanwhile, the backlog may grow to MAX_VAD_WARMUP_BACKLOG_MS. */
  private vadWarm = false;
  private vadCaughtUp = false;
  private turn: OpenTurn | null = null;
  private overflowReported = false;
  private closed = false;
  /** Settles when every pushed chunk has been analysed. */
  private analysed: Promise<void> = Promise.resolve();
  private readonly controller = new AbortController();
  private readonly log: Logger;

  constructor(
    private readonly input: VoiceInput,
    readonly kind: VoiceSourceKind,
    private readonly notify: (message: VoiceMessage) => void,
  ) {
    const { pool, silenceMs, minSpeechMs, logger } = input.options;
    this.vad = new SileroVadStream(pool(), {
      sampleRate: SILERO_SAMPLE_RATE,
      minSilenceMs: silenceMs,
      minSpeechMs,
      pauseMs: { min: PAUSE_MIN_MS, max: PAUSE_MAX_MS },
    });
    this.log = logger.child({ voiceSource: kind });
    // Failed or not, once it settles the normal bound applies (a failing VAD reports per chunk).
    const started = () => (this.vadWarm = true);
    this.vad.warmUp(this.controller.signal).then(started, started);
  }

  /**
   * Microphone PCM (mono, any rate). Returns false when the chunk was dropped: the VAD is more than
   * MAX_VAD_BACKLOG_MS behind (the caller may tell its client once).
   */
  push(pcm: Int16Array, sampleRate: number): boolean {
    if (this.closed || pcm.length === 0) return !this.closed;
    if (!this.resampler || this.resampler.fromRate !== sampleRate)
      this.resampler = new StreamResampler(sampleRate, SILERO_SAMPLE_RATE);
    const samples = this.resampler.push(pcm);
    const perMs = SILERO_SAMPLE_RATE / 1000;
    if (this.vadWarm && this.backlog / perMs <= MAX_VAD_BACKLOG_MS) this.vadCaughtUp = true;
    const boundMs = this.vadCaughtUp ? MAX_VAD_BACKLOG_MS : MAX_VAD_WARMUP_BACKLOG_MS;
    if ((this.backlog + samples.length) / perMs > boundMs) {
      if (!this.overflowReported)
        this.log.warn({ backlogMs: Math.round(this.backlog / 16) }, 'voice input behind, audio dropped');
      this.overflowReported = true;
      return false;
    }
    this.overflowReported = false;
    const now = performance.now();
    this.mic.add(samples, now);
    this.lastArrival = now;
    this.chunks.push(samples);
    this.received += samples.length;
    this.backlog += samples.length;
    this.trim();
    const analysed = this.vad.push(samples, this.controller.signal).then(
      (result) => this.onEvents(result.events),
      (error: unknown) => {
        if (!this.closed) this.log.warn({ err: errorForLog(error) }, 'voice activity detection failed for a chunk');
      },
    );
    this.analysed = analysed.finally(() => (this.backlog -= samples.length));
    return true;
  }

  /** End of the audio (`eos`): an open turn ends here. Resolves once its utterance went to the machine. */
  async end(): Promise<void> {
    if (this.closed) return;
    await this.analysed;
    const events = await this.vad.end(this.controller.signal).catch(() => []);
    this.onEvents(events);
  }

  /** True while the VAD says the user is speaking. */
  get speaking(): boolean {
    return this.turn !== null;
  }

  notifyReplaced(): void {
    this.notify({
      type: 'error',
      code: 'voice_input_replaced',
      message: 'another microphone source took over this session',
    });
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.controller.abort(new DOMException('voice source closed', 'AbortError'));
    this.vad.close();
    if (this.turn?.pending) clearTimeout(this.turn.pending.timer);
    if (this.turn?.accepted) this.input.options.host.offerVoice({ type: 'VOICE.CANCEL' });
    this.turn = null;
    this.chunks = [];
    this.input.detached(this);
  }

  private onEvents(events: VadEvent[]): void {
    for (const event of events) {
      if (this.closed) return;
      if (event.type === 'speech_start') this.onSpeechStart(event.sample);
      else if (event.type === 'speech_pause')
        this.input.options.bus.emit('voice.pause', {
          source: this.kind,
          atMs: this.msOf(event.sample),
          pauseMs: this.msOf(event.endSample - event.sample),
        });
      else this.onSpeechEnd(event.sample);
    }
    // A monologue past the bound goes to recognition as it is.
    if (this.turn && this.received - this.turn.startSample > (MAX_UTTERANCE_MS * SILERO_SAMPLE_RATE) / 1000) {
      this.log.info({ maxMs: MAX_UTTERANCE_MS }, 'utterance too long, cut');
      this.onSpeechEnd(this.received);
    }
  }

  private onSpeechStart(sample: number): void {
    const { host, bus } = this.input.options;
    this.notify({ type: 'speech_start' });
    bus.emit('voice.speech', { source: this.kind, stage: 'start', atMs: this.msOf(sample) });
    const turn: OpenTurn = { startSample: sample, accepted: false };
    this.turn = turn;
    if (!this.input.asrConfigured) return this.input.reportMissingAsr();
    if (host.state !== 'running') return;
    if (!host.busy) {
      turn.accepted = host.offerVoice({ type: 'VOICE.START' });
      return;
    }
    // On the performance.now() clock, where the envelopes live.
    const onsetAt = this.lastArrival - ((this.received - sample) * 1000) / SILERO_SAMPLE_RATE;
    const decide = () => {
      turn.pending = undefined;
      if (this.closed || this.turn !== turn || !host.busy) {
        if (!this.closed && this.turn === turn) turn.accepted = host.offerVoice({ type: 'VOICE.START' });
        return;
      }
      if (isEcho(this.mic, this.input.sent, onsetAt, this.input.avatarStartedAt)) {
        this.log.info('speech onset ignored: it follows the avatar’s own voice');
        bus.emit('voice.echoIgnored', { source: this.kind });
        return;
      }
      // Barge-in: the very path of POST /interrupt, then the user's turn.
      this.log.info({ pipeline: host.pipelineStage }, 'barge-in by voice');
      bus.emit('voice.bargeIn', { source: this.kind });
      host.send({ type: 'INTERRUPT' });
      turn.accepted = host.offerVoice({ type: 'VOICE.START' });
    };
    // Right after the avatar started speaking, the echo check needs the audio up to onset + ECHO_POST_ONSET_MS.
    const waitMs = needsEchoCheck(onsetAt, this.input.avatarStartedAt)
      ? onsetAt + ECHO_POST_ONSET_MS - performance.now()
      : 0;
    if (waitMs <= 0) return decide();
    turn.pending = { timer: setTimeout(decide, waitMs), decide };
  }

  private onSpeechEnd(sample: number): void {
    const turn = this.turn;
    if (!turn) return;
    if (turn.pending) {
      // The audio ended (eos) before the echo check's span was in: decide on what there is.
      clearTimeout(turn.pending.timer);
      turn.pending.decide();
    }
    this.turn = null;
    const { host, bus } = this.input.options;
    this.notify({ type: 'speech_end' });
    bus.emit('voice.speech', { source: this.kind, stage: 'end', atMs: this.msOf(sample) });
    if (!turn.accepted) return;
    const perMs = SILERO_SAMPLE_RATE / 1000;
    const pcm = this.slice(turn.startSample - PRE_ROLL_MS * perMs, sample + POST_ROLL_MS * perMs);
    const endedAt = performance.now();
    const request: TranscribeRequest = {
      ...newTurnHandle(),
      triggerChat: true,
      pcm,
      sampleRate: SILERO_SAMPLE_RATE,
      source: 'voice',
      result: {
        resolve: (text) => {
          if (!this.closed && text) this.notify({ type: 'transcript', text });
          bus.emit('voice.transcript', { turnId: request.id, ms: performance.now() - endedAt });
        },
        reject: () => undefined,
      },
    };
    if (!host.offerVoice({ type: 'VOICE.END', request })) {
      this.log.debug('utterance dropped: the session moved on while the user spoke');
      return;
    }
    this.input.trackLatency(request.id, endedAt);
    bus.emit('voice.turn', {
      turnId: request.id,
      source: this.kind,
      speechMs: Math.round((sample - turn.startSample) / perMs),
    });
  }

  /** Timeline samples [from, to) that are still kept (what is older was trimmed). */
  private slice(from: number, to: number): Int16Array {
    const start = Math.max(from, this.bufferStart);
    const end = Math.min(to, this.received);
    const out = new Int16Array(Math.max(0, end - start));
    let position = this.bufferStart;
    for (const chunk of this.chunks) {
      const chunkEnd = position + chunk.length;
      if (chunkEnd > start && position < end) {
        const a = Math.max(start, position) - position;
        const b = Math.min(end, chunkEnd) - position;
        out.set(chunk.subarray(a, b), Math.max(start, position) - start);
      }
      position = chunkEnd;
    }
    return out;
  }

  /** Drops audio no utterance can need: older than IDLE_RETAIN_MS outside a turn, the bound inside one. */
  private trim(): void {
    const perMs = SILERO_SAMPLE_RATE / 1000;
    const keepFrom = this.turn
      ? Math.max(
          this.turn.startSample - PRE_ROLL_MS * perMs,
          this.received - (MAX_UTTERANCE_MS + IDLE_RETAIN_MS) * perMs,
        )
      : this.received - this.backlog - IDLE_RETAIN_MS * perMs;
    while (this.chunks.length > 1 && this.bufferStart + this.chunks[0].length <= keepFrom) {
      this.bufferStart += this.chunks.shift()!.length;
    }
  }

  private msOf(sample: number): number {
    return Math.round((sample * 1000) / SILERO_SAMPLE_RATE);
  }
}
