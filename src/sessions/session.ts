import type { Logger } from 'pino';
import { createActor, type InspectionEvent } from 'xstate';
import {
  admitsRequest,
  audioStreamRefusal,
  isBusy,
  pipelineStageOf,
  refusalDetail,
  sessionMachine,
  sessionStateOf,
  type PipelineStage,
  type RequestEventType,
  type SessionActor,
  type SessionEvent,
  type SessionState,
} from '../../machines/session.machine.ts';
import type { Writable } from 'node:stream';
import { NotAdmitted, SessionResourceNotFound, SessionTerminated } from '../domain-errors.ts';
import { SessionOutputs, type OutputRequest, type OutputStatus } from '../streaming/outputs.ts';
import { outputConnector, type OutputSettings } from '../streaming/connector.ts';
import type { RecordingRegistry, RecordingStatus } from '../recording/registry.ts';
import type { StoredSession } from '../store/sessions.ts';
import type { SessionEventHub, SessionEventRecord } from './event-hub.ts';
import type { SessionMedia } from './media.ts';
import type { SessionMetrics } from './metrics.ts';
import type { PoseChannelFigures } from './pose-channel.ts';
import { SessionCloser } from './session-close.ts';
import { logTurns, relayTurns, sessionInspect, type SessionBus } from './session-bus.ts';
import { createStageActors, type StageContext } from '../../actors/session-actors.ts';
import { SessionConsumers, type ConsumerKind } from './consumers.ts';
import { sessionPersona, type PersonaBase } from './persona.ts';
import type { TtsSelection } from '../../actors/tts/types.ts';
import { deferred, type AsyncQueue } from '../../actors/async-queue.ts';
import type { ExpressionRequest } from '../../actors/media/playout.ts';
import type { ExpressionCue } from '../../actors/expression.ts';
import { VoiceInput, type VoiceInputOptions, type VoiceSource } from './voice-input.ts';
import type { SessionToolDefinition, SessionTools } from './tools.ts';
import type { SessionTranscripts, TranscriptTurn } from './transcript.ts';
import { newTurnHandle } from './turn.ts';

/** What a session needs to listen hands-free (`voice-input.ts`); the rest comes from the session itself. */
export type VoiceDeps = Omit<VoiceInputOptions, 'host' | 'playout' | 'bus' | 'logger'>;

/** The stage actors' context as a session fills it: the ports are the session's own bus, media and metrics. */
export type SessionStage = StageContext & {
  events: SessionBus;
  media: SessionMedia;
  metrics: SessionMetrics;
  tools: SessionTools;
};

/**
 * A session's parts, for the modules of `src/sessions/` that assemble and supervise it (and for tests that watch
 * them); not exported by the barrel. Routes and sockets use the session's verbs instead.
 */
export interface SessionParts {
  readonly actor: SessionActor;
  /** Who is using the session; a started session without any for `SERVICE_ORPHAN_TIMEOUT_S` is reaped. */
  readonly consumers: SessionConsumers;
  /** The close cascade; taps of the media clock (recordings) register here to be finalised in order. */
  readonly closer: SessionCloser;
  readonly bus: SessionBus;
  readonly events: SessionEventHub;
  readonly media: SessionMedia;
  readonly stage: SessionStage;
  readonly logger: Logger;
}

/** The figures of a session's media clock and outputs (`GET /sessions/{id}/metrics`, `GET /metrics`). */
export interface SessionMediaFigures {
  fps: number;
  mediaMs: number;
  queuedSpeechMs: number;
  sentFrames: number;
  lateFrames: number;
  peerConnected: boolean;
  sseConsumers: number;
  /** A client-rendered session's pose stream (`pose-channel.ts`): sent, late, skipped. */
  poses?: PoseChannelFigures;
}

/** A persona change the machine admits (`CUSTOMIZE`): the voice, and the system prompt and tools when they change too. */
export interface PersonaChange {
  tts: TtsSelection;
  systemPrompt?: string | null;
  /** Replaces the session's tools (`[]` removes them all). */
  tools?: SessionToolDefinition[];
  /** How much the avatar moves besides blinks and the mouth, 0..1 (`FrameRequest.motion`). */
  motion?: number;
}

/**
 * The test seam: the parts of `session` (`SessionParts`), for tests that watch them. Nothing in the service calls
 * it; the supervisor and every route use the session's verbs.
 */
export function sessionParts(session: Session): SessionParts {
  return session.partsForTests();
}

/** Bound on how long `close` waits for the machine to reach `terminated` before giving up on it. */
const TERMINATE_WAIT_MS = 2_000;

/**
 * A live session: its supervised XState actor, its internal bus, its SSE hub and its media. The turn lifecycle the
 * machine emits (`relayTurns`) goes on the bus; the hub, metrics and turn logs follow the bus. XState's inspection is
 * attached only for the live inspector and, at debug, the transition trace (`sessionInspect`).
 * Everything it owns is torn down by one close cascade (`session-close.ts`), started by `close()` or by the
 * machine terminating itself (fatal error), whichever comes first.
 */
export class Session {
  private readonly actor: SessionActor;
  private readonly consumers = new SessionConsumers();
  private readonly closer: SessionCloser;
  private readonly terminated: Promise<void>;
  private voiceInput: VoiceInput | null = null;
  /** RTMP/WHIP pushes, created with the first one. */
  private outputs: SessionOutputs | null = null;
  private voiceClosed = false;
  /** Set the moment the session starts to end (`close()`, or the machine terminating itself): nothing new attaches after. */
  private ending = false;

  constructor(
    /** The session's stored record: read through `record`, `persona`, `systemPrompt`; changed by the verbs. */
    private stored: StoredSession,
    private readonly bus: SessionBus,
    private readonly events: SessionEventHub,
    private readonly media: SessionMedia,
    private readonly stage: SessionStage,
    private readonly logger: Logger,
    /** XState's inspection callback (the live inspector); undefined when the inspector is off. */
    inspect?: (event: InspectionEvent) => void,
    /** Hands-free conversation (VAD, recogniser, settings); without it the session has no voice input. */
    private readonly voiceDeps?: VoiceDeps,
  ) {
    this.closer = new SessionCloser({ media, events, bus, logger });
    stage.metrics.follow(bus);
    logTurns(bus, logger);
    const machine = sessionMachine.provide({ actors: createStageActors(stage) });
    this.actor = createActor(machine, {
      inspect: sessionInspect(bus, logger, inspect),
      input: {
        sessionId: stored.session_id,
        avatarId: stored.avatar_id,
        model: stored.model,
        tts: { provider: stored.tts_provider, voice: stored.tts_voice, model: stored.tts_model ?? null },
        systemPrompt: stored.llm_system_prompt ?? '',
      },
    });
    // A peer counts while its connection is up: disconnected, failed or closed is a viewer gone.
    this.consumers.watch('webrtc', () => media.output.connected);
    this.consumers.watch('whep', () => media.viewers.count > 0);
    // The browser's microphone on the peer feeds the voice input (hands-free conversation).
    if (voiceDeps) {
      let microphone: VoiceSource | null = null;
      media.output.onMicrophone({
        opened: () => {
          microphone?.close();
          microphone = this.voice?.attach('webrtc') ?? null;
        },
        audio: (samples, sampleRate) => microphone?.push(samples, sampleRate),
        closed: () => {
          microphone?.close();
          microphone = null;
        },
      });
    }
    // Emitted events are delivered once the transition is done: the snapshot already holds the turn a status opens.
    this.actor.on('status', ({ stage: s, message }) => {
      const { turn, transcribe } = this.actor.getSnapshot().context;
      const turnId = turn?.id ?? transcribe?.id;
      bus.publish('status', { stage: s, ...(message ? { message } : {}), ...(turnId ? { turn_id: turnId } : {}) });
    });
    this.actor.on('error', ({ code, message }) => bus.publish('error', { code, message }));
    relayTurns(this.actor, bus);
    this.terminated = new Promise((resolve) => {
      this.actor.on('session.terminated', () => {
        this.ending = true;
        resolve();
        this.closeVoice();
        // The cascade publishes `session.terminated` to clients as its last step.
        void this.closer.close();
      });
    });
    this.actor.subscribe({
      error: (error) => logger.error({ err: (error as Error).message }, 'session actor crashed'),
    });
    this.actor.start();
  }

  get id(): string {
    return this.stored.session_id;
  }

  get state(): SessionState {
    return sessionStateOf(this.actor.getSnapshot());
  }

  get pipelineStage(): PipelineStage {
    return pipelineStageOf(this.actor.getSnapshot());
  }

  get busy(): boolean {
    return isBusy(this.actor.getSnapshot());
  }

  /** The session's stored record as it is now (the store holds it as of the last `recordState`). */
  get record(): Readonly<StoredSession> {
    return this.stored;
  }

  /** The session's voice, what request overrides apply to (`persona.ts`). */
  get persona(): PersonaBase {
    return sessionPersona(this.stored);
  }

  get systemPrompt(): string | null {
    return this.stored.llm_system_prompt;
  }

  /** The session's logger: its lines carry the session id (the sockets working on it log through it). */
  get log(): Logger {
    return this.logger;
  }

  /** The session's audio sample rate (its media clock, its TTS and the audio sockets' default input rate). */
  get sampleRate(): number {
    return this.stage.sampleRate;
  }

  /** Ms of speech queued for playout: the audio socket's back-pressure reads it. */
  get queuedSpeechMs(): number {
    return this.media.queuedMs;
  }

  /** Frames sent and late so far on the media clock. */
  get frameCounts(): { sent: number; late: number } {
    return { sent: this.media.playout.sentFrames, late: this.media.playout.lateFrames };
  }

  /** A WebRTC peer is connected (a viewer). */
  get peerConnected(): boolean {
    return this.media.output.connected;
  }

  /** The media clock's and outputs' figures now. */
  mediaFigures(): SessionMediaFigures {
    const { playout } = this.media;
    return {
      fps: playout.fps,
      mediaMs: playout.mediaMs,
      queuedSpeechMs: this.media.queuedMs,
      sentFrames: playout.sentFrames,
      lateFrames: playout.lateFrames,
      peerConnected: this.media.output.connected,
      sseConsumers: this.events.subscriberCount,
      ...(this.media.poseFigures ? { poses: { ...this.media.poseFigures } } : {}),
    };
  }

  /** Per-turn latency figures and their summary (`metrics.ts`). */
  metricsSnapshot(): ReturnType<SessionMetrics['snapshot']> {
    return this.stage.metrics.snapshot();
  }

  /**
   * Starts the session: the machine admits `START` (the 409 `admit` gives otherwise), then the media clock ticks and
   * frames are rendered: only now does the session cost anything.
   */
  start(): void {
    this.admit({ type: 'START' });
    this.media.start();
    this.logger.info('session started');
  }

  /**
   * Speaks `text` in `tts` (spec 4.4), bypassing the language model. `NotAdmitted` (409) unless the session takes a
   * turn now. Returns the turn's id (`X-Turn-Id`, `turn_id` on its SSE events).
   */
  speak(text: string, tts: TtsSelection): string {
    const turn = newTurnHandle();
    this.admit({ type: 'SPEAK', turn: { ...turn, mode: 'speak', text, tts } });
    return turn.id;
  }

  /**
   * Runs `prompt` through the language model, then speaks the reply in `tts` (spec 4.5). Resolves with the turn's id
   * once the model accepted the request (its first delta); `NotAdmitted` (409) when the session does not take a turn
   * now or the turn was interrupted before the model answered; the model's own failure (502) as it comes.
   */
  async chat(prompt: string, tts: TtsSelection): Promise<string> {
    const accepted = deferred<void>();
    const turn = newTurnHandle();
    this.admit({ type: 'CHAT', turn: { ...turn, mode: 'chat', text: prompt, tts, accepted } });
    try {
      await accepted.promise;
    } catch (error) {
      // Interrupted (or the session ended) before the first token: the client's own doing, not a server fault.
      if ((error as Error).name === 'AbortError')
        throw new NotAdmitted('chat was interrupted before the language model answered');
      throw error;
    }
    return turn.id;
  }

  /** Plays decoded client audio (`speak_audio`, `speak_rt_audio` with `smoothing`) as a turn; `NotAdmitted` (409) when busy. Returns the turn's id. */
  speakAudio(pcm: Int16Array, smoothing: boolean): string {
    const turn = newTurnHandle();
    this.admit({ type: 'SPEAK_AUDIO', turn: { ...turn, mode: 'audio', smoothing, audio: { kind: 'clip', pcm } } });
    return turn.id;
  }

  /**
   * Plays one burst of the audio WebSocket (`chunks`, ended by the socket) as the turn `turnId`: the machine's
   * refusal (busy, paused) as its detail for the socket to report, or null once the turn started.
   */
  speakAudioStream(turnId: string, chunks: AsyncQueue<Int16Array>): string | null {
    return this.offer({
      type: 'SPEAK_AUDIO',
      turn: { ...newTurnHandle(turnId), mode: 'audio_stream', audio: { kind: 'stream', chunks } },
    });
  }

  /**
   * Recognises decoded client audio (`sampleRate`, the session's) and, with `triggerChat`, answers it through the
   * language model. Resolves with the transcript and the turn's id; `NotAdmitted` (409) when busy or interrupted
   * before the transcript came.
   */
  async transcribe(
    pcm: Int16Array,
    sampleRate: number,
    triggerChat: boolean,
  ): Promise<{ transcript: string; turnId: string }> {
    const result = deferred<string>();
    const turn = newTurnHandle();
    this.admit({ type: 'TRANSCRIBE', request: { ...turn, triggerChat, pcm, sampleRate, result } });
    try {
      return { transcript: await result.promise, turnId: turn.id };
    } catch (error) {
      if ((error as Error).name === 'AbortError') throw new NotAdmitted('transcription was interrupted');
      throw error;
    }
  }

  /**
   * Barge-in: cancels whatever turn or transcription is in flight; playout stops at the next chunk boundary. Always
   * accepted (a priority event the machine ignores when idle), timed to its flush for the interrupt → flush figure.
   */
  interrupt(): void {
    this.send({ type: 'INTERRUPT' });
  }

  /** Pauses the session (`NotAdmitted`, 409, unless the machine admits `PAUSE` now). */
  pause(): void {
    this.admit({ type: 'PAUSE' });
  }

  /** Resumes a paused session (`NotAdmitted`, 409, unless the machine admits `RESUME` now). */
  resume(): void {
    this.admit({ type: 'RESUME' });
  }

  /**
   * A persona change: sent as `CUSTOMIZE` when the machine admits it (409 otherwise, e.g. terminated), then kept in
   * the session's record (persisted by the supervisor's `persistState`). Applies from the next turn.
   */
  customize(change: PersonaChange): void {
    const { tts, systemPrompt } = change;
    // Checked before the machine is asked, so a bad definition changes nothing (400).
    const tools = change.tools && this.stage.tools.check(change.tools);
    this.admit({ type: 'CUSTOMIZE', tts, ...(systemPrompt !== undefined ? { systemPrompt: systemPrompt ?? '' } : {}) });
    if (tools) this.stage.tools.replace(tools);
    if (change.motion !== undefined) this.media.setMotion(change.motion);
    this.stored = {
      ...this.stored,
      tts_provider: tts.provider,
      tts_voice: tts.voice,
      tts_model: tts.model,
      ...(systemPrompt !== undefined ? { llm_system_prompt: systemPrompt } : {}),
      ...(change.motion !== undefined ? { motion: change.motion } : {}),
    };
  }

  /**
   * An expression on the avatar from now on (`POST /sessions/{id}/expression`): admitted as `EXPRESS` (409 once
   * terminated), placed on the media clock, and published as SSE `expression` (the transcript records it with the turn).
   */
  setExpression(request: ExpressionRequest): ExpressionCue {
    this.admit({ type: 'EXPRESS', name: request.name });
    const cue = this.media.express(request, 'now');
    this.bus.publish('expression', {
      name: cue.name,
      intensity: cue.intensity,
      duration_ms: cue.durationMs ?? null,
      start_ms: Math.round(cue.startMs),
      source: 'api',
    });
    return cue;
  }

  /** The session's tools as the client defined them (create or customize). */
  get tools(): readonly SessionToolDefinition[] {
    return this.stage.tools.list;
  }

  /**
   * A client's answer to a client tool call (`POST /sessions/{id}/tool_results`); 404 (`ToolCallNotFound`) for a call
   * the session never made, 409 (`ToolCallClosed`) for one past its deadline, answered, or cut by an interrupt.
   */
  answerToolCall(callId: string, output: unknown): void {
    if (this.ending || this.state === 'terminated') throw new SessionTerminated();
    this.stage.tools.answer(callId, output);
  }

  /** Writes the machine's state into the session's record and returns the record to store. */
  recordState(): StoredSession {
    this.stored = { ...this.stored, state: this.state, updated_at: new Date().toISOString() };
    return this.stored;
  }

  /** Answers a WebRTC offer (a new peer replaces the previous one; `PeerGoneError` when superseded or terminated). */
  async answerOffer(sdp: string, signal: AbortSignal): Promise<{ sdp: string; type: 'answer' }> {
    const answer = await this.media.output.answer(sdp, signal);
    this.logger.info('webrtc peer connected');
    return answer;
  }

  /**
   * Answers a WHEP viewer's offer: one more send-only peer on the session's media clock, ended by `removeViewer`, by
   * its connection failing, or with the session. `ViewersFullError` (an `Overloaded`, 503) when `MAX_WHEP_VIEWERS` watch already,
   * `SessionTerminated` once the session is ending; `MalformedSdpError` (400) and `PeerGoneError` (409) as for offers.
   */
  async addViewer(sdp: string, signal: AbortSignal): Promise<{ viewerId: string; sdp: string }> {
    if (this.ending || this.closer.closing || this.state === 'terminated') throw new SessionTerminated();
    // A client-rendered session draws for its viewers on the server: the renderer is open before the viewer's first frame.
    const releasePictures = await this.media.holdPictures(signal);
    let answer: { viewerId: string; sdp: string };
    try {
      answer = await this.media.viewers.answer(sdp, signal);
    } finally {
      releasePictures();
    }
    this.logger.info({ viewers: this.media.viewers.count }, 'whep viewer joined');
    return answer;
  }

  /** Ends one WHEP viewer; `SessionResourceNotFound` (404) when the session has no viewer with this id. */
  removeViewer(viewerId: string): void {
    if (!this.media.viewers.close(viewerId)) throw new SessionResourceNotFound('WHEP viewer not found');
    this.logger.info({ viewers: this.media.viewers.count }, 'whep viewer left');
  }

  /**
   * Starts pushing the session to a media server (RTMP or WHIP, docs/streaming.md); answers before it is live. The
   * outputs attach to the close cascade on first use, which stops them (WHIP DELETE, ffmpeg ended). `NotAdmitted`
   * before start (the clock runs from start), `SessionTerminated` once ending; `InvalidInput` for a bad URL,
   * `OutputLimitReached` past `MAX_OUTPUTS_PER_SESSION`. Failures reach clients as SSE `error` `output_failed`.
   */
  addOutput(request: OutputRequest, settings: OutputSettings): OutputStatus {
    if (!this.outputs) {
      const outputs = new SessionOutputs(
        outputConnector(this.media, settings),
        (outputId, message) => this.bus.publish('error', { code: 'output_failed', message, output_id: outputId }),
        this.logger.child({ component: 'outputs' }),
      );
      // Validates before the session takes the outputs on: a refused first request leaves nothing attached.
      this.admitTap('outputs', () => outputs.closeAll(), 'adding outputs');
      this.outputs = outputs;
      this.consumers.watch('output', () => outputs.active > 0);
    } else if (this.ending || this.closer.closing || this.state === 'terminated') {
      throw new SessionTerminated();
    }
    return this.outputs.add(request);
  }

  /** The session's outputs with their states (URLs redacted). */
  listOutputs(): OutputStatus[] {
    return this.outputs?.list() ?? [];
  }

  /** Stops one output; `SessionResourceNotFound` (404) for an unknown id. */
  async removeOutput(outputId: string): Promise<void> {
    if (!this.outputs) throw new SessionResourceNotFound('output not found');
    await this.outputs.remove(outputId);
  }

  /** A REST call on the session: counts as activity for the orphan rule. */
  touch(): void {
    this.consumers.touch();
  }

  /** Ms since the session last had a consumer or a REST call (the orphan rule). */
  idleMs(): number {
    return this.consumers.idleMs();
  }

  /** Calls `listener` once the machine terminated (by itself, a fatal stage error, or by `close`). */
  onTerminated(listener: () => void): void {
    this.actor.on('session.terminated', listener);
  }

  /** Keeps the session's transcript in `transcripts`, each finished turn also handed to `onTurn` (the webhook). */
  keepTranscript(transcripts: SessionTranscripts, onTurn: (turn: TranscriptTurn) => void): void {
    transcripts.follow(this.id, this.bus, this.media, onTurn);
  }

  /**
   * Streams the session's events (SSE) to `out` until it closes; the stream counts as a consumer meanwhile.
   * `onClose` runs once when it is detached.
   */
  attachEvents(out: Writable, onClose: () => void): void {
    const release = this.consumers.hold('sse');
    this.events.attach(out, () => {
      release();
      onClose();
    });
  }

  /** Calls `listener` with each event the session publishes; returns the unsubscribe. */
  onEvent(listener: (event: SessionEventRecord) => void): () => void {
    return this.events.listen(listener);
  }

  /** Marks a consumer present until the returned (idempotent) release is called. */
  holdConsumer(kind: ConsumerKind): () => void {
    return this.consumers.hold(kind);
  }

  /** Counts no REST call as activity but a consumer present while `isPresent` says so (one per kind). */
  watchConsumer(kind: ConsumerKind, isPresent: () => boolean): void {
    this.consumers.watch(kind, isPresent);
  }

  /**
   * Records the session's media clock with `recordings`: the session admits the recording (409 before start, or once
   * it is ending) in the step that attaches it to its close cascade, which finalises it after the clock stopped and
   * before SSE clients hear session.terminated. A running recording counts as a consumer.
   */
  async startRecording(recordings: RecordingRegistry): Promise<RecordingStatus> {
    const status = await recordings.start(this.id, this.media, (finalise) => {
      this.admitTap('recording', finalise);
    });
    this.consumers.watch('recording', () => recordings.isRecording(this.id));
    return status;
  }

  /**
   * The session's voice input (hands-free conversation), created on first use: microphone sources attach to
   * it. Null when the session has none or is closing.
   */
  get voice(): VoiceInput | null {
    if (this.voiceClosed || !this.voiceDeps) return null;
    // eslint-disable-next-line @typescript-eslint/no-this-alias -- the host's getters read the live session
    const session = this;
    this.voiceInput ??= new VoiceInput({
      ...this.voiceDeps,
      host: {
        offerVoice: (event) => {
          if (!this.actor.getSnapshot().can(event)) return false;
          this.send(event);
          return true;
        },
        send: (event) => this.send(event),
        get state() {
          return session.state;
        },
        get pipelineStage() {
          return session.pipelineStage;
        },
        get busy() {
          return session.busy;
        },
      },
      playout: this.media.playout,
      bus: this.bus,
      logger: this.logger,
    });
    return this.voiceInput;
  }

  private closeVoice(): void {
    this.voiceClosed = true;
    this.voiceInput?.close();
    this.voiceInput = null;
  }

  /**
   * A client's call as a machine event: sent when the machine accepts it in its current state
   * (`snapshot.can`), otherwise `NotAdmitted` (409) with the detail the machine derives from that state. Synchronous, so
   * nothing can change the state between the answer and the send.
   */
  private admit(event: SessionEvent & { type: RequestEventType }): void {
    const refusal = this.offer(event);
    if (refusal !== null) throw new NotAdmitted(refusal);
  }

  /** `admit` for callers that answer a refusal themselves (the audio WebSocket): the refusal's detail, or null once sent. */
  private offer(event: SessionEvent & { type: RequestEventType }): string | null {
    const snapshot = this.actor.getSnapshot();
    if (!snapshot.can(event)) return refusalDetail(snapshot, event.type);
    this.send(event);
    return null;
  }

  /** Why the audio WebSocket may not connect now (the machine's answer), or null. */
  get audioStreamRefusal(): string | null {
    return audioStreamRefusal(this.actor.getSnapshot());
  }

  /** The refusal `admit` would give now, raised before a request's payload exists (before reading an upload). */
  assertAdmits(type: RequestEventType): void {
    const snapshot = this.actor.getSnapshot();
    if (!admitsRequest(snapshot, type)) throw new NotAdmitted(refusalDetail(snapshot, type));
  }

  /**
   * Admission of a tap of the media clock (a recording): attached to the close cascade, which finalises it,
   * in the same synchronous step as the check. `NotAdmitted` when there is nothing to record yet (created: the
   * clock runs from start), `SessionTerminated` when the session is ending or terminated (its cascade may have
   * passed the taps' step already, so nothing would ever finalise it). Returns the tap's removal.
   */
  admitTap(name: string, finalise: () => Promise<unknown>, purpose = 'recording'): () => void {
    if (this.ending || this.closer.closing || this.state === 'terminated') throw new SessionTerminated();
    if (this.state === 'created') throw new NotAdmitted(`session is not started: start it before ${purpose}`);
    return this.closer.addTap(name, finalise);
  }

  /** Sends without asking: interrupts (timed to their flush), the voice input's events the machine may ignore. */
  private send(event: SessionEvent): void {
    if (event.type === 'INTERRUPT') this.stage.metrics.timeInterrupt(() => this.actor.send(event));
    else this.actor.send(event);
  }

  /** The test seam behind `sessionParts`: the session's parts, for tests that watch them; the service never calls it. */
  partsForTests(): SessionParts {
    const { actor, consumers, closer, bus, events, media, stage, logger } = this;
    return { actor, consumers, closer, bus, events, media, stage, logger };
  }

  /**
   * Terminates the machine (stopping every child) and runs the close cascade: clock → WebRTC → renderer →
   * recording → events. Idempotent: every call, and the machine's own termination, share one cascade.
   */
  async close(): Promise<void> {
    this.ending = true;
    this.closeVoice();
    if (this.actor.getSnapshot().status === 'active') {
      this.actor.send({ type: 'TERMINATE' });
      let giveUp: NodeJS.Timeout | undefined;
      await Promise.race([
        this.terminated,
        new Promise((resolve) => (giveUp = setTimeout(resolve, TERMINATE_WAIT_MS).unref())),
      ]);
      clearTimeout(giveUp);
      this.actor.stop();
    }
    await this.closer.close();
  }
}
