import { assign, emit, fromCallback, raise, sendTo, setup, type ActorRefFrom, type SnapshotFrom } from 'xstate';

/**
 * The session state machine. Pure: no I/O here. The real stage actors (media, asr, llm, tts) are
 * plugged in with `.provide()` by `src/sessions/runtime.ts`; the placeholders below do nothing so the
 * machine can be tested and walked on its own.
 *
 * Top level: created → running ⇄ paused → terminated (final; absorbs everything).
 * `running` holds the pipeline: idle | listening | turn(thinking | speaking) | interrupted | error.
 * The media actor (renderer + playout + WebRTC) is invoked at the root because an avatar must stay on
 * screen (idle frames) in every non-terminated state; stage actors are invoked inside `running` only.
 */

export type TurnMode = 'speak' | 'chat' | 'audio' | 'audio_stream';

export interface TurnInfo {
  id: string;
  mode: TurnMode;
  /** speak: the text; chat: the prompt (or recognised text). */
  text?: string;
  voice?: string | null;
  ttsProvider?: string | null;
  ttsModel?: string | null;
  /** audio: apply rt-family segmentation and smoothing. */
  smoothing?: boolean;
}

export interface SessionContext {
  sessionId: string;
  avatarId: string;
  model: string;
  ttsProvider: string;
  ttsVoice: string | null;
  systemPrompt: string;
  turn: TurnInfo | null;
  transcribe: { id: string; triggerChat: boolean } | null;
}

export type SessionInput = Omit<SessionContext, 'turn' | 'transcribe'>;

export type SessionEvent =
  | { type: 'START' }
  | { type: 'PAUSE' }
  | { type: 'RESUME' }
  | { type: 'TERMINATE' }
  | { type: 'INTERRUPT' }
  | { type: 'SPEAK'; turn: TurnInfo }
  | { type: 'CHAT'; turn: TurnInfo }
  | { type: 'SPEAK_AUDIO'; turn: TurnInfo }
  | { type: 'TRANSCRIBE'; id: string; triggerChat: boolean }
  | { type: 'ASR.DONE'; text: string }
  | { type: 'LLM.SEGMENT'; text: string }
  | { type: 'LLM.DONE' }
  | { type: 'TTS.FIRST_AUDIO' }
  | { type: 'TTS.DONE' }
  | { type: 'MEDIA.FLUSHED' }
  | { type: 'CUSTOMIZE'; systemPrompt?: string; ttsVoice?: string | null; ttsProvider?: string }
  | { type: 'STAGE.ERROR'; code: string; message: string; fatal: boolean };

export type SessionEmitted =
  | { type: 'status'; stage: PipelineStage; message?: string }
  | { type: 'error'; code: string; message: string }
  | { type: 'session.terminated' };

export const PIPELINE_STAGES = ['listening', 'thinking', 'speaking', 'idle', 'interrupted', 'error'] as const;
export type PipelineStage = (typeof PIPELINE_STAGES)[number];
export const SESSION_STATES = ['created', 'running', 'paused', 'terminated'] as const;
export type SessionState = (typeof SESSION_STATES)[number];

/** Upper bound on waiting for the playout to confirm a flush; the spec promises idle within ~200 ms. */
export const INTERRUPT_SETTLE_MS = 150;

/** Inputs the stage actors receive; serialisable, the heavy data is looked up by turn id. */
export interface StageInput {
  sessionId: string;
  turn: TurnInfo;
}

export const sessionMachine = setup({
  types: {
    context: {} as SessionContext,
    events: {} as SessionEvent,
    input: {} as SessionInput,
    emitted: {} as SessionEmitted,
  },
  actors: {
    media: fromCallback<{ type: string }, { sessionId: string }>(() => () => undefined),
    asr: fromCallback<{ type: string }, { sessionId: string; transcribeId: string }>(() => () => undefined),
    llm: fromCallback<{ type: string }, StageInput & { systemPrompt: string }>(() => () => undefined),
    tts: fromCallback<{ type: string; text?: string }, StageInput & { voice: string | null; ttsProvider: string }>(
      () => () => undefined,
    ),
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
    flushMedia: sendTo('media', { type: 'FLUSH' }),
    clearTurn: assign({ turn: null, transcribe: null }),
    replayEvent: raise(({ event }) => event),
  },
}).createMachine({
  id: 'session',
  initial: 'created',
  context: ({ input }) => ({ ...input, turn: null, transcribe: null }),
  invoke: { id: 'media', src: 'media', input: ({ context }) => ({ sessionId: context.sessionId }) },
  on: {
    TERMINATE: { target: '.terminated' },
    // A fatal error of the media actor can arrive in any live state.
    'STAGE.ERROR': { guard: 'isFatal', target: '.terminated', actions: 'emitError' },
    CUSTOMIZE: {
      actions: assign(({ context, event }) => ({
        systemPrompt: event.systemPrompt ?? context.systemPrompt,
        ttsVoice: event.ttsVoice !== undefined ? event.ttsVoice : context.ttsVoice,
        ttsProvider: event.ttsProvider ?? context.ttsProvider,
      })),
    },
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
        PAUSE: { target: 'paused', actions: ['flushMedia', { type: 'emitStatus', params: { stage: 'idle', message: 'paused' } }] },
        'STAGE.ERROR': [
          { guard: 'isFatal', target: 'terminated', actions: 'emitError' },
          { target: '.error', actions: 'emitError' },
        ],
      },
      states: {
        idle: {
          entry: [{ type: 'clearTurn' }],
          on: {
            SPEAK: { target: 'turn', actions: assign({ turn: ({ event }) => event.turn }) },
            CHAT: { target: 'turn', actions: assign({ turn: ({ event }) => event.turn }) },
            SPEAK_AUDIO: { target: 'turn', actions: assign({ turn: ({ event }) => event.turn }) },
            TRANSCRIBE: {
              target: 'listening',
              actions: assign({ transcribe: ({ event }) => ({ id: event.id, triggerChat: event.triggerChat }) }),
            },
          },
        },
        listening: {
          entry: { type: 'emitStatus', params: { stage: 'listening' } },
          invoke: {
            id: 'asr',
            src: 'asr',
            input: ({ context }) => ({ sessionId: context.sessionId, transcribeId: context.transcribe!.id }),
          },
          on: {
            'ASR.DONE': [
              {
                guard: 'shouldChatAfterTranscript',
                target: 'turn',
                actions: assign({
                  turn: ({ context, event }) => ({ id: context.transcribe!.id, mode: 'chat' as const, text: event.text }),
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
              voice: context.turn!.voice ?? context.ttsVoice,
              ttsProvider: context.turn!.ttsProvider ?? context.ttsProvider,
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
                  on: {
                    'LLM.SEGMENT': { actions: sendTo('tts', ({ event }) => ({ type: 'TEXT.SEGMENT', text: event.text })) },
                    'LLM.DONE': { target: 'complete', actions: sendTo('tts', { type: 'TEXT.END' }) },
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
            // Not busy here, so routes accept new work; settle now and let idle take it rather than drop
            // it (a dropped TRANSCRIBE would leave its request waiting forever).
            SPEAK: { target: 'idle', actions: [{ type: 'emitStatus', params: { stage: 'idle' } }, 'replayEvent'] },
            CHAT: { target: 'idle', actions: [{ type: 'emitStatus', params: { stage: 'idle' } }, 'replayEvent'] },
            SPEAK_AUDIO: { target: 'idle', actions: [{ type: 'emitStatus', params: { stage: 'idle' } }, 'replayEvent'] },
            TRANSCRIBE: { target: 'idle', actions: [{ type: 'emitStatus', params: { stage: 'idle' } }, 'replayEvent'] },
          },
          after: { [INTERRUPT_SETTLE_MS]: { target: 'idle', actions: { type: 'emitStatus', params: { stage: 'idle' } } } },
        },
        error: {
          entry: ['flushMedia', { type: 'emitStatus', params: { stage: 'error' } }, 'clearTurn'],
          always: { target: 'idle', actions: { type: 'emitStatus', params: { stage: 'idle' } } },
        },
      },
    },
    paused: {
      entry: 'clearTurn',
      on: { RESUME: 'running' },
    },
    terminated: {
      type: 'final',
      entry: 'emitTerminated',
      // A running actor stops at a final state, but the pure `transition()` (graph walks, replays) does
      // not: without this, the root's TERMINATE / fatal STAGE.ERROR / CUSTOMIZE would still fire here
      // (emitting session.terminated again, changing context). Swallow everything.
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
  if (snapshot.matches({ running: 'listening' })) return 'listening';
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
