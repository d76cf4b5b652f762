import {
  assign,
  emit,
  enqueueActions,
  fromCallback,
  raise,
  sendTo,
  setup,
  type ActorRefFrom,
  type EventObject,
  type SnapshotFrom,
} from 'xstate';
import type { TtsSelection } from '../actors/tts/types.ts';
import type { SegmentExpression } from '../actors/llm/types.ts';
import type { TurnHandle } from '../actors/stage/ports.ts';

/**
 * The session state machine, and the one place that decides what a session accepts: a client's call is
 * admitted exactly when `snapshot.can(event)` says so (`Session.admit`), and the 409's detail is
 * `refusalDetail` of the same snapshot. Pure: no I/O here. The real child actors (media, asr, llm, tts,
 * in `actors/<stage>/<stage>.actor.ts`) are plugged in with `.provide()` by `src/sessions/session.ts`; the placeholders
 * below do nothing so the machine can be tested and walked on its own.
 *
 * Top level: created → running ⇄ paused → terminated (final; absorbs everything).
 * `running` holds the pipeline: idle | listening | turn(thinking | speaking) | interrupted | error.
 * The media actor (renderer + playout + WebRTC) is invoked at the root because an avatar must stay on
 * screen (idle frames) in every non-terminated state; stage actors are invoked inside `running` only.
 *
 * Turn payloads (an uploaded clip, the audio WebSocket's queue, a transcription's PCM, the deferreds a
 * waiting HTTP request settles on) ride on the events into the context and reach the stage actors through
 * their `input`. The machine never looks inside them: no guard reads a payload, so what is admitted
 * depends on the state alone.
 *
 * Turns: the machine emits `turn.started` when a turn or transcription enters its context and `turn.finished` when
 * it leaves (or the session terminates with it), with the outcome told by the event that ended it; the session
 * relays both to its bus (metrics, turn logs, the SSE hub's `turn_id`), as it relays `status`.
 */

export type TurnMode = 'speak' | 'chat' | 'audio' | 'audio_stream';

/** What a turn was started by: the machine's turn modes, or a transcription (which may go on as a chat). */
export type TurnKind = TurnMode | 'transcribe' | 'voice';
/**
 * How a turn ended, from the event that ended it: its audio played out (`completed`), an interrupt, a
 * pause, a stage error, or the session ending.
 */
export type TurnOutcome = 'completed' | 'interrupted' | 'paused' | 'error' | 'terminated';

/** Settles a request that waits on a stage actor (an HTTP handler's deferred). Opaque to the machine. */
export interface Settle<T> {
  resolve(value: T): void;
  reject(error: unknown): void;
}

/** Audio a turn plays without synthesis: an uploaded clip, or the audio WebSocket's queue. Opaque to the machine. */
export type DirectAudio = { kind: 'clip'; pcm: Int16Array } | { kind: 'stream'; chunks: AsyncIterable<Int16Array> };

/**
 * A turn: its handle (`id`, and `playout`, the media clock's record of its audio, made with the turn and opaque to the
 * machine), its mode and payloads.
 */
export interface TurnInfo extends TurnHandle {
  mode: TurnMode;
  /** speak: the text; chat: the prompt (or recognised text). */
  text?: string;
  /** The turn's voice; absent: the session's (a chat the machine starts from a transcript). */
  tts?: TtsSelection;
  /** audio: apply rt-family segmentation and smoothing. */
  smoothing?: boolean;
  /** audio, audio_stream: what to play. */
  audio?: DirectAudio;
  /** chat: settled once the language model accepted the request (first delta), or rejected with why not. */
  accepted?: Settle<void>;
}

/**
 * A transcription request: its turn's handle (a transcription that goes on as a chat stays that turn), the upload's
 * PCM and the deferred its HTTP request waits on.
 */
export interface TranscribeRequest extends TurnHandle {
  triggerChat: boolean;
  pcm: Int16Array;
  sampleRate: number;
  result: Settle<string>;
  /** `voice`: an utterance the voice input (VAD) cut from the microphone; absent: an uploaded clip. */
  source?: 'voice';
}

export interface SessionContext {
  sessionId: string;
  avatarId: string;
  model: string;
  /** The session's persona voice; a turn without its own selection speaks with it. */
  tts: TtsSelection;
  systemPrompt: string;
  turn: TurnInfo | null;
  transcribe: TranscribeRequest | null;
  /** The turn is a chat the machine started from a transcript: the transcription's kind (it stays that one turn). */
  chatFrom: 'transcribe' | 'voice' | null;
  /** The expression a client last asked for (`EXPRESS`; the renderers' vocabulary is `actors/expression.ts`). */
  expression: string;
}

export type SessionInput = Omit<SessionContext, 'turn' | 'transcribe' | 'chatFrom' | 'expression'>;

export type SessionEvent =
  | { type: 'START' }
  | { type: 'PAUSE' }
  | { type: 'RESUME' }
  | { type: 'TERMINATE' }
  | { type: 'INTERRUPT' }
  | { type: 'SPEAK'; turn: TurnInfo }
  | { type: 'CHAT'; turn: TurnInfo }
  | { type: 'SPEAK_AUDIO'; turn: TurnInfo }
  | { type: 'TRANSCRIBE'; request: TranscribeRequest }
  /** The voice input heard speech begin (hands-free conversation, `src/sessions/voice-input.ts`). */
  | { type: 'VOICE.START' }
  /** The user's turn ended: the utterance to recognise (and answer). */
  | { type: 'VOICE.END'; request: TranscribeRequest }
  /** The speech that began was not a turn after all (too long, the source went away). */
  | { type: 'VOICE.CANCEL' }
  | { type: 'ASR.DONE'; text: string }
  /**
   * A reply segment to speak, with the expression tags written in it (shown as its audio starts); `filler`: a filler
   * sentence the service says while the model thinks or tools run, heard but not the model's words.
   */
  | { type: 'LLM.SEGMENT'; text: string; expressions?: SegmentExpression[]; filler?: boolean }
  | { type: 'LLM.DONE' }
  | { type: 'TTS.FIRST_AUDIO' }
  /** A reply segment's audio is all queued for playout: its text and how long it plays. */
  | { type: 'TTS.QUEUED'; text: string; durationMs: number; filler?: boolean }
  | { type: 'TTS.DONE' }
  | { type: 'MEDIA.FLUSHED' }
  | { type: 'CUSTOMIZE'; systemPrompt?: string; tts?: TtsSelection }
  /** A client asks for an expression (`POST /sessions/{id}/expression`): admitted in every state but terminated. */
  | { type: 'EXPRESS'; name: string }
  | { type: 'STAGE.ERROR'; code: string; message: string; fatal: boolean };

/** What the llm actor hears from the machine while its chat turn lasts. */
export type LlmActorEvent =
  | { type: 'TTS.QUEUED'; text: string; durationMs: number; filler?: boolean }
  /** Sent as the turn ends, before the actor is stopped: `completed` when its audio played to the end. */
  | { type: 'TURN.END'; completed: boolean };

/** What the media actor hears from the machine: empty the playout now (interrupt, pause, error). */
export type MediaActorEvent = { type: 'FLUSH' };

/** What the tts actor hears from the machine: the chat reply's segments as the llm produces them. */
export type TtsActorEvent =
  | { type: 'TEXT.SEGMENT'; text: string; expressions?: SegmentExpression[]; filler?: boolean }
  | { type: 'TEXT.END' };

export type SessionEmitted =
  | { type: 'status'; stage: PipelineStage; message?: string }
  | { type: 'error'; code: string; message: string }
  | { type: 'session.terminated' }
  /**
   * `ttsProvider`: the provider the turn speaks with (its own, else the session's); `playout`: the media clock's record
   * of the turn's audio, from its handle (the session's turn record holds the same one).
   */
  | {
      type: 'turn.started';
      turnId: string;
      kind: TurnKind;
      ttsProvider: string;
      text?: string;
      playout: TurnHandle['playout'];
    }
  | { type: 'turn.finished'; turnId: string; kind: TurnKind; outcome: TurnOutcome };

export const PIPELINE_STAGES = ['listening', 'thinking', 'speaking', 'idle', 'interrupted', 'error'] as const;
export type PipelineStage = (typeof PIPELINE_STAGES)[number];
export const SESSION_STATES = ['created', 'running', 'paused', 'terminated'] as const;
export type SessionState = (typeof SESSION_STATES)[number];

/** Upper bound on waiting for the playout to confirm a flush; the spec promises idle within ~200 ms. */
export const INTERRUPT_SETTLE_MS = 150;

/** Inputs of the stage actors; the turn carries its payloads (audio, deferreds) as given by the event. */
export interface StageInput {
  sessionId: string;
  turn: TurnInfo;
}
export type TtsInput = StageInput & { tts: TtsSelection };
export type LlmInput = StageInput & { systemPrompt: string };
export interface AsrInput {
  sessionId: string;
  request: TranscribeRequest;
}

/** The turn in the context (a turn, else a transcription): its id, kind and the TTS provider it speaks with. */
function currentTurn(
  context: SessionContext,
): { turnId: string; kind: TurnKind; ttsProvider: string; playout: TurnHandle['playout'] } | null {
  const { turn, transcribe, tts } = context;
  if (turn)
    return {
      turnId: turn.id,
      kind: context.chatFrom ?? turn.mode,
      ttsProvider: turn.tts?.provider ?? tts.provider,
      playout: turn.playout,
    };
  if (transcribe)
    return {
      turnId: transcribe.id,
      kind: transcribe.source === 'voice' ? 'voice' : 'transcribe',
      ttsProvider: tts.provider,
      playout: transcribe.playout,
    };
  return null;
}

/** `turn.finished` for the turn in the context, ended by `event`; null without a turn. */
function finishedTurn(
  context: SessionContext,
  event: SessionEvent,
): Extract<SessionEmitted, { type: 'turn.finished' }> | null {
  const ended = currentTurn(context);
  return ended && { type: 'turn.finished', turnId: ended.turnId, kind: ended.kind, outcome: turnOutcomeOf(event) };
}

/** How the event that ends a turn ends it (a pause is not a completed turn). */
function turnOutcomeOf(event: SessionEvent): TurnOutcome {
  switch (event.type) {
    case 'INTERRUPT':
      return 'interrupted';
    case 'PAUSE':
      return 'paused';
    case 'STAGE.ERROR':
      return 'error';
    case 'TERMINATE':
      return 'terminated';
    default:
      return 'completed';
  }
}

export const sessionMachine = setup({
  types: {
    context: {} as SessionContext,
    events: {} as SessionEvent,
    input: {} as SessionInput,
    emitted: {} as SessionEmitted,
  },
  actors: {
    media: fromCallback<MediaActorEvent, { sessionId: string }>(() => () => undefined),
    asr: fromCallback<EventObject, AsrInput>(() => () => undefined),
    llm: fromCallback<LlmActorEvent, LlmInput>(() => () => undefined),
    tts: fromCallback<TtsActorEvent, TtsInput>(() => () => undefined),
  },
  guards: {
    turnIsChat: ({ context }) => context.turn?.mode === 'chat',
    shouldChatAfterTranscript: ({ context, event }) =>
      context.transcribe?.triggerChat === true && event.type === 'ASR.DONE' && event.text.trim().length > 0,
    isFatal: ({ event }) => event.type === 'STAGE.ERROR' && event.fatal,
  },
  actions: {
    emitStatus: emit((_, params: { stage: PipelineStage; message?: string }) => ({
      type: 'status' as const,
      stage: params.stage,
      ...(params.message ? { message: params.message } : {}),
    })),
    emitError: emit(({ event }) => ({
      type: 'error' as const,
      code: event.type === 'STAGE.ERROR' ? event.code : 'internal',
      message: event.type === 'STAGE.ERROR' ? event.message : 'internal error',
    })),
    emitTerminated: emit({ type: 'session.terminated' as const }),
    /** After the turn or transcription went into the context. */
    emitTurnStarted: enqueueActions(({ context, enqueue }) => {
      const started = currentTurn(context);
      // The text (speak: what is said; chat: the prompt) is for the session's transcript.
      const text = context.turn?.text;
      if (started) enqueue.emit({ type: 'turn.started', ...started, ...(text === undefined ? {} : { text }) });
    }),
    /** The turn in the context (if any) is over; the context keeps it (the terminated state does not clear it). */
    emitTurnFinished: enqueueActions(({ context, event, enqueue }) => {
      const finished = finishedTurn(context, event);
      if (finished) enqueue.emit(finished);
    }),
    flushMedia: sendTo('media', { type: 'FLUSH' }),
    clearTurn: enqueueActions(({ context, event, enqueue }) => {
      const finished = finishedTurn(context, event);
      if (finished) enqueue.emit(finished);
      enqueue.assign({ turn: null, transcribe: null, chatFrom: null });
    }),
    replayEvent: raise(({ event }) => event),
  },
}).createMachine({
  id: 'session',
  initial: 'created',
  context: ({ input }) => ({ ...input, turn: null, transcribe: null, chatFrom: null, expression: 'neutral' }),
  invoke: { id: 'media', src: 'media', input: ({ context }) => ({ sessionId: context.sessionId }) },
  on: {
    TERMINATE: { target: '.terminated' },
    // A fatal error of the media actor can arrive in any live state.
    'STAGE.ERROR': { guard: 'isFatal', target: '.terminated', actions: 'emitError' },
    CUSTOMIZE: {
      actions: assign(({ context, event }) => ({
        systemPrompt: event.systemPrompt ?? context.systemPrompt,
        tts: event.tts ?? context.tts,
      })),
    },
    EXPRESS: { actions: assign({ expression: ({ event }) => event.name }) },
  },
  states: {
    created: {
      on: { START: 'running' },
    },
    running: {
      initial: 'idle',
      on: {
        // Interrupt is a priority event: handled once here for every busy pipeline state.
        INTERRUPT: {
          guard: ({ context }) => context.turn !== null || context.transcribe !== null,
          target: '.interrupted',
        },
        // Clients watching SSE must see the turn end when a pause cuts it short.
        PAUSE: {
          target: 'paused',
          actions: ['flushMedia', { type: 'emitStatus', params: { stage: 'idle', message: 'paused' } }],
        },
        'STAGE.ERROR': [
          { guard: 'isFatal', target: 'terminated', actions: 'emitError' },
          { target: '.error', actions: 'emitError' },
        ],
      },
      states: {
        idle: {
          entry: [{ type: 'clearTurn' }],
          on: {
            SPEAK: { target: 'turn', actions: [assign({ turn: ({ event }) => event.turn }), 'emitTurnStarted'] },
            CHAT: { target: 'turn', actions: [assign({ turn: ({ event }) => event.turn }), 'emitTurnStarted'] },
            SPEAK_AUDIO: { target: 'turn', actions: [assign({ turn: ({ event }) => event.turn }), 'emitTurnStarted'] },
            TRANSCRIBE: {
              target: 'listening',
              actions: [
                assign({ transcribe: ({ event }) => event.request }),
                'emitTurnStarted',
                { type: 'emitStatus', params: { stage: 'listening' } },
              ],
            },
            'VOICE.START': { target: 'hearing', actions: { type: 'emitStatus', params: { stage: 'listening' } } },
          },
        },
        // The user is speaking (voice input): status `listening` until the end of their turn, when the
        // utterance goes to recognition. Not busy: a client's request still goes ahead (dropping this turn).
        hearing: {
          on: {
            'VOICE.END': {
              target: 'listening',
              actions: [assign({ transcribe: ({ event }) => event.request }), 'emitTurnStarted'],
            },
            'VOICE.CANCEL': { target: 'idle', actions: { type: 'emitStatus', params: { stage: 'idle' } } },
            SPEAK: { target: 'idle', actions: 'replayEvent' },
            CHAT: { target: 'idle', actions: 'replayEvent' },
            SPEAK_AUDIO: { target: 'idle', actions: 'replayEvent' },
            TRANSCRIBE: { target: 'idle', actions: 'replayEvent' },
          },
        },
        listening: {
          invoke: {
            id: 'asr',
            src: 'asr',
            input: ({ context }) => ({ sessionId: context.sessionId, request: context.transcribe! }),
          },
          on: {
            'ASR.DONE': [
              {
                guard: 'shouldChatAfterTranscript',
                target: 'turn',
                actions: assign({
                  turn: ({ context, event }) => ({
                    id: context.transcribe!.id,
                    playout: context.transcribe!.playout,
                    mode: 'chat' as const,
                    text: event.text,
                  }),
                  chatFrom: ({ context }) => (context.transcribe!.source === 'voice' ? 'voice' : 'transcribe'),
                  transcribe: null,
                }),
              },
              { target: 'idle', actions: { type: 'emitStatus', params: { stage: 'idle' } } },
            ],
          },
        },
        turn: {
          type: 'parallel',
          invoke: {
            id: 'tts',
            src: 'tts',
            input: ({ context }) => ({
              sessionId: context.sessionId,
              turn: context.turn!,
              tts: context.turn!.tts ?? context.tts,
            }),
          },
          on: {
            'TTS.DONE': { target: 'idle', actions: { type: 'emitStatus', params: { stage: 'idle' } } },
          },
          states: {
            text: {
              initial: 'routing',
              states: {
                routing: { always: [{ guard: 'turnIsChat', target: 'generating' }, { target: 'complete' }] },
                // The llm actor lives as long as the chat turn (its stream ends earlier, with LLM.DONE): it commits
                // the history once it knows what was heard. The state stays flat so the chart stays drawable.
                generating: {
                  invoke: {
                    id: 'llm',
                    src: 'llm',
                    input: ({ context }) => ({
                      sessionId: context.sessionId,
                      turn: context.turn!,
                      systemPrompt: context.systemPrompt,
                    }),
                  },
                  // Exit actions reach the child before it is stopped; only TTS.DONE ends a turn whose audio all played.
                  exit: sendTo('llm', ({ event }) => ({
                    type: 'TURN.END' as const,
                    completed: event.type === 'TTS.DONE',
                  })),
                  on: {
                    'LLM.SEGMENT': {
                      actions: sendTo('tts', ({ event }) => ({
                        type: 'TEXT.SEGMENT' as const,
                        text: event.text,
                        expressions: event.expressions,
                        filler: event.filler,
                      })),
                    },
                    'LLM.DONE': { actions: sendTo('tts', { type: 'TEXT.END' as const }) },
                    'TTS.QUEUED': {
                      actions: sendTo('llm', ({ event }) => ({
                        type: 'TTS.QUEUED' as const,
                        text: event.text,
                        durationMs: event.durationMs,
                        filler: event.filler,
                      })),
                    },
                  },
                },
                complete: { type: 'final' },
              },
            },
            phase: {
              initial: 'routing',
              states: {
                routing: { always: [{ guard: 'turnIsChat', target: 'thinking' }, { target: 'preparing' }] },
                thinking: {
                  entry: { type: 'emitStatus', params: { stage: 'thinking' } },
                  on: { 'TTS.FIRST_AUDIO': 'speaking' },
                },
                preparing: { on: { 'TTS.FIRST_AUDIO': 'speaking' } },
                speaking: { entry: { type: 'emitStatus', params: { stage: 'speaking' } } },
              },
            },
          },
        },
        interrupted: {
          entry: ['flushMedia', { type: 'emitStatus', params: { stage: 'interrupted' } }, 'clearTurn'],
          on: {
            'MEDIA.FLUSHED': { target: 'idle', actions: { type: 'emitStatus', params: { stage: 'idle' } } },
            // Not busy here, so new work is admitted; settle now and let idle take it rather than drop it
            // (a dropped TRANSCRIBE would leave its request waiting forever).
            SPEAK: { target: 'idle', actions: [{ type: 'emitStatus', params: { stage: 'idle' } }, 'replayEvent'] },
            CHAT: { target: 'idle', actions: [{ type: 'emitStatus', params: { stage: 'idle' } }, 'replayEvent'] },
            SPEAK_AUDIO: {
              target: 'idle',
              actions: [{ type: 'emitStatus', params: { stage: 'idle' } }, 'replayEvent'],
            },
            TRANSCRIBE: { target: 'idle', actions: [{ type: 'emitStatus', params: { stage: 'idle' } }, 'replayEvent'] },
            // Barge-in by voice: the interrupt, then the user's speech.
            'VOICE.START': {
              target: 'idle',
              actions: [{ type: 'emitStatus', params: { stage: 'idle' } }, 'replayEvent'],
            },
          },
          after: {
            [INTERRUPT_SETTLE_MS]: { target: 'idle', actions: { type: 'emitStatus', params: { stage: 'idle' } } },
          },
        },
        error: {
          entry: ['flushMedia', { type: 'emitStatus', params: { stage: 'error' } }, 'clearTurn'],
          always: { target: 'idle', actions: { type: 'emitStatus', params: { stage: 'idle' } } },
        },
      },
    },
    paused: {
      entry: 'clearTurn',
      // Every client watching SSE (another tab, a kiosk's operator console) learns the session runs again.
      on: {
        RESUME: { target: 'running', actions: { type: 'emitStatus', params: { stage: 'idle', message: 'resumed' } } },
      },
    },
    terminated: {
      type: 'final',
      entry: ['emitTurnFinished', 'emitTerminated'],
      // A running actor stops at a final state, but the pure `transition()` (graph walks, replays) does
      // not: without this, the root's TERMINATE / fatal STAGE.ERROR / CUSTOMIZE would still fire here
      // (emitting session.terminated again, changing context). Swallow everything; `can` is false for all.
      on: { '*': {} },
    },
  },
});

export type SessionActor = ActorRefFrom<typeof sessionMachine>;
export type SessionSnapshot = SnapshotFrom<typeof sessionMachine>;

/** The top-level state of a snapshot as the spec names it. */
export function sessionStateOf(snapshot: SessionSnapshot): SessionState {
  const value = snapshot.value;
  const top = typeof value === 'string' ? value : Object.keys(value)[0];
  return top as SessionState;
}

/** The pipeline stage (spec 3.2) of a snapshot; `idle` outside `running`. */
export function pipelineStageOf(snapshot: SessionSnapshot): PipelineStage {
  if (snapshot.matches({ running: 'listening' }) || snapshot.matches({ running: 'hearing' })) return 'listening';
  if (snapshot.matches({ running: { turn: { phase: 'thinking' } } })) return 'thinking';
  if (snapshot.matches({ running: 'turn' })) return 'speaking';
  if (snapshot.matches({ running: 'interrupted' })) return 'interrupted';
  if (snapshot.matches({ running: 'error' })) return 'error';
  return 'idle';
}

/** True while a chat, speak, speak_audio, stream or transcribe is in flight (spec 8 concurrency). */
export function isBusy(snapshot: SessionSnapshot): boolean {
  return snapshot.matches({ running: 'turn' }) || snapshot.matches({ running: 'listening' });
}

/** The events a client's call becomes. Each is admitted exactly when `snapshot.can(event)` is true. */
export type RequestEventType =
  | 'START'
  | 'PAUSE'
  | 'RESUME'
  | 'SPEAK'
  | 'CHAT'
  | 'SPEAK_AUDIO'
  | 'TRANSCRIBE'
  | 'CUSTOMIZE'
  | 'EXPRESS';

/**
 * Whether a request of this type would be admitted now, asked before its payload exists (a route checks
 * this before reading an upload). The same answer as `snapshot.can` with the full event, because no guard
 * of these events reads a payload (the machine tests pin that).
 */
export function admitsRequest(snapshot: SessionSnapshot, type: RequestEventType): boolean {
  return snapshot.can({ type } as SessionEvent);
}

/** What is in flight, in the words of the call that started it. */
function workInFlight(snapshot: SessionSnapshot): string {
  const { turn, transcribe } = snapshot.context;
  if (transcribe || snapshot.matches({ running: 'listening' })) return 'transcribe';
  switch (turn?.mode) {
    case 'chat':
      return 'chat';
    case 'audio':
      return 'speak_audio';
    case 'audio_stream':
      return 'audio stream';
    default:
      return 'speak';
  }
}

/** The 409 detail for a request the machine refuses in this snapshot, derived from its state. */
export function refusalDetail(snapshot: SessionSnapshot, type: RequestEventType): string {
  const state = sessionStateOf(snapshot);
  if (state === 'terminated') return 'session is terminated';
  switch (type) {
    case 'START':
      return `session is already ${state}`;
    case 'PAUSE':
      return `session is ${state}, only a running session can be paused`;
    case 'RESUME':
      return `session is ${state}, only a paused session can be resumed`;
    default:
      if (state === 'created') return 'session is not started: call POST /sessions/{session_id}/start first';
      if (state === 'paused') return 'session is paused: call POST /sessions/{session_id}/resume first';
      return `a previous ${workInFlight(snapshot)} is in flight (call interrupt first)`;
  }
}

/**
 * Whether the audio WebSocket may connect: while the session runs, busy or not (each burst it carries is
 * admitted on its own as SPEAK_AUDIO); otherwise the refusal detail.
 */
export function audioStreamRefusal(snapshot: SessionSnapshot): string | null {
  return sessionStateOf(snapshot) === 'running' ? null : refusalDetail(snapshot, 'SPEAK_AUDIO');
}
