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
import { NotAdmitted, SessionTerminated } from '../domain-errors.ts';
import type { StoredSession } from '../store/sessions.ts';
import type { SessionEventHub } from './event-hub.ts';
import type { SessionMedia } from './media.ts';
import { SessionCloser } from './session-close.ts';
import { logTurns, machineFeed, type SessionBus } from './session-bus.ts';
import { createStageActors, type StageContext } from '../../actors/session/index.ts';
import { SessionConsumers } from './consumers.ts';
import { VoiceInput, type VoiceInputOptions, type VoiceSource } from './voice-input.ts';

/** What a session needs to listen hands-free (`voice-input.ts`); the rest comes from the session itself. */
export type VoiceDeps = Omit<VoiceInputOptions, 'host' | 'playout' | 'bus' | 'logger'>;

/** Bound on how long `close` waits for the machine to reach `terminated` before giving up on it. */
const TERMINATE_WAIT_MS = 2_000;

/**
 * A live session: its supervised XState actor, its internal bus, its SSE hub and its media. The machine's
 * transitions and turn lifecycle go on the bus (`machineFeed`); the hub, metrics and turn logs follow the bus.
 * Everything it owns is torn down by one close cascade (`session-close.ts`), started by `close()` or by the
 * machine terminating itself (fatal error), whichever comes first.
 */
export class Session {
  readonly actor: SessionActor;
  /** Who is using the session; a started session without any for `SERVICE_ORPHAN_TIMEOUT_S` is reaped. */
  readonly consumers = new SessionConsumers();
  /** The close cascade; taps of the media clock (recordings) register here to be finalised in order. */
  readonly closer: SessionCloser;
  private readonly terminated: Promise<void>;
  private voiceInput: VoiceInput | null = null;
  private voiceClosed = false;
  /** Set the moment the session starts to end (`close()`, or the machine terminating itself): nothing new attaches after. */
  private ending = false;

  constructor(
    public stored: StoredSession,
    readonly bus: SessionBus,
    readonly events: SessionEventHub,
    readonly media: SessionMedia,
    readonly stage: StageContext,
    readonly logger: Logger,
    /** XState's inspection callback (the live inspector); undefined when the inspector is off. */
    inspect?: (event: InspectionEvent) => void,
    /** Hands-free conversation (VAD, recogniser, settings); without it the session has no voice input. */
    private readonly voiceDeps?: VoiceDeps,
  ) {
    this.closer = new SessionCloser({ media, events, bus, logger });
    stage.metrics.follow(bus);
    logTurns(bus, logger);
    const feed = machineFeed(bus);
    const machine = sessionMachine.provide({ actors: createStageActors(stage) });
    this.actor = createActor(machine, {
      inspect: (event) => {
        feed(event);
        inspect?.(event);
      },
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
  admit(event: SessionEvent & { type: RequestEventType }): void {
    const refusal = this.offer(event);
    if (refusal !== null) throw new NotAdmitted(refusal);
  }

  /** `admit` for callers that answer a refusal themselves (the audio WebSocket): the refusal's detail, or null once sent. */
  offer(event: SessionEvent & { type: RequestEventType }): string | null {
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
  admitTap(name: string, finalise: () => Promise<unknown>): () => void {
    if (this.ending || this.closer.closing || this.state === 'terminated') throw new SessionTerminated();
    if (this.state === 'created') throw new NotAdmitted('session is not started: start it before recording');
    return this.closer.addTap(name, finalise);
  }

  /** Sends without asking: interrupts, termination, events the machine may ignore. */
  send(event: SessionEvent): void {
    this.actor.send(event);
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
      await Promise.race([this.terminated, new Promise((resolve) => (giveUp = setTimeout(resolve, TERMINATE_WAIT_MS).unref()))]);
      clearTimeout(giveUp);
      this.actor.stop();
    }
    await this.closer.close();
  }
}
