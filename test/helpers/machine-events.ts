import fc from 'fast-check';
import { fromCallback, initialTransition, transition, type AnyStateMachine } from 'xstate';
import {
  isBusy,
  pipelineStageOf,
  sessionMachine,
  sessionStateOf,
  type SessionEmitted,
  type SessionEvent,
  type SessionInput,
  type SessionSnapshot,
  type Settle,
  type TranscribeRequest,
  type TurnInfo,
} from '../../machines/session.machine.ts';
import type { TtsSelection } from '../../actors/tts/types.ts';
import { TurnPlayout } from '../../actors/media/turn-playout.ts';

/**
 * Shared material for the session machine tests: fast-check arbitraries for `SessionEvent`, a fixed
 * representative event set for graph walks, a pure (no actors started) runner built on XState's
 * `transition()`, and the invariant checker every test style applies to each step.
 */

export const TEST_SESSION_INPUT: SessionInput = {
  sessionId: '6f1c2a44-1b7e-4c1e-9d3a-2f1f0e6c9a10',
  avatarId: 'avatar-test',
  model: 'wav2lip',
  tts: { provider: 'builtin', voice: null, model: null },
  systemPrompt: 'You are a test assistant.',
};

export const STAGE_CHILD_IDS = ['asr', 'llm', 'tts'] as const;
export type StageChildId = (typeof STAGE_CHILD_IDS)[number];

// ---------------------------------------------------------------------------------------------------
// Payloads: opaque to the machine, so a few fixed instances stand for every real one (and keep the
// context space of graph walks finite)
// ---------------------------------------------------------------------------------------------------

/** A settle target that remembers what it was given, as a route's deferred would. */
export function recordingSettle<T>(): Settle<T> & { settled: Array<{ value?: T; error?: unknown }> } {
  const settled: Array<{ value?: T; error?: unknown }> = [];
  return { settled, resolve: (value) => settled.push({ value }), reject: (error) => settled.push({ error }) };
}

export const CLIP_AUDIO = { kind: 'clip', pcm: new Int16Array(160) } as const;
export const STREAM_AUDIO = { kind: 'stream', chunks: [] as unknown as AsyncIterable<Int16Array> } as const;
const CHAT_ACCEPTED = recordingSettle<void>();
const TRANSCRIBE_RESULT = recordingSettle<string>();
/** The media clock's record of a turn's audio: opaque to the machine, so one instance stands for every turn's. */
export const TURN_PLAYOUT = new TurnPlayout();

export function transcribeRequest(id: string, triggerChat: boolean): TranscribeRequest {
  return {
    id,
    playout: TURN_PLAYOUT,
    triggerChat,
    pcm: new Int16Array(320),
    sampleRate: 16_000,
    result: TRANSCRIBE_RESULT,
  };
}

/** An utterance the voice input cut from the microphone (hands-free), as `VOICE.END` carries it. */
export function voiceRequest(id: string): TranscribeRequest {
  return { ...transcribeRequest(id, true), source: 'voice' };
}

// ---------------------------------------------------------------------------------------------------
// Arbitraries
// ---------------------------------------------------------------------------------------------------

const idArbitrary = fc.constantFrom('t-1', 't-2', 't-3');
const textArbitrary = fc.constantFrom('', '  ', 'Hello.', 'How are you today?', 'Bonjour à tous.');
const selectionArbitrary: fc.Arbitrary<TtsSelection> = fc.record({
  provider: fc.constantFrom('builtin', 'compat_http'),
  voice: fc.constantFrom(null, 'alice'),
  model: fc.constantFrom(null, 'tiny'),
});

/** Turns as routes build them: speak/chat with a resolved voice (a chat sometimes with a waiting request), audio with its payload. */
export function turnArbitrary(mode: TurnInfo['mode']): fc.Arbitrary<TurnInfo> {
  const common = { id: idArbitrary, playout: fc.constant(TURN_PLAYOUT), mode: fc.constant(mode) };
  if (mode === 'speak') return fc.record({ ...common, text: textArbitrary, tts: selectionArbitrary });
  if (mode === 'chat') {
    return fc.record(
      { ...common, text: textArbitrary, tts: selectionArbitrary, accepted: fc.constant<Settle<void>>(CHAT_ACCEPTED) },
      {
        requiredKeys: ['id', 'playout', 'mode', 'text', 'tts'],
      },
    );
  }
  return fc.record({
    ...common,
    smoothing: fc.boolean(),
    audio: fc.constant(mode === 'audio' ? CLIP_AUDIO : STREAM_AUDIO),
  });
}

const stageErrorArbitrary = (fatal: boolean): fc.Arbitrary<SessionEvent> =>
  fc.record({
    type: fc.constant('STAGE.ERROR' as const),
    code: fc.constantFrom('upstream_error', 'tts_failed', 'media_failed'),
    message: fc.constantFrom('boom', 'provider returned 502'),
    fatal: fc.constant(fatal),
  });

/**
 * Every `SessionEvent` shape. Ending events (TERMINATE, fatal errors) are rare so that random sequences
 * spend most of their length in the live states where the interesting transitions are; START is
 * frequent because nothing but `created` happens without it.
 */
export const sessionEventArbitrary: fc.Arbitrary<SessionEvent> = fc.oneof(
  { weight: 3, arbitrary: fc.constant({ type: 'START' } as const) },
  { weight: 2, arbitrary: fc.constant({ type: 'PAUSE' } as const) },
  { weight: 3, arbitrary: fc.constant({ type: 'RESUME' } as const) },
  { weight: 1, arbitrary: fc.constant({ type: 'TERMINATE' } as const) },
  { weight: 6, arbitrary: fc.constant({ type: 'INTERRUPT' } as const) },
  { weight: 4, arbitrary: turnArbitrary('speak').map((turn) => ({ type: 'SPEAK' as const, turn })) },
  { weight: 5, arbitrary: turnArbitrary('chat').map((turn) => ({ type: 'CHAT' as const, turn })) },
  {
    weight: 2,
    arbitrary: fc
      .constantFrom('audio' as const, 'audio_stream' as const)
      .chain((mode) => turnArbitrary(mode))
      .map((turn) => ({ type: 'SPEAK_AUDIO' as const, turn })),
  },
  {
    weight: 4,
    arbitrary: fc
      .tuple(idArbitrary, fc.boolean())
      .map(([id, triggerChat]) => ({ type: 'TRANSCRIBE' as const, request: transcribeRequest(id, triggerChat) })),
  },
  { weight: 3, arbitrary: fc.constant({ type: 'VOICE.START' } as const) },
  { weight: 3, arbitrary: idArbitrary.map((id) => ({ type: 'VOICE.END' as const, request: voiceRequest(id) })) },
  { weight: 1, arbitrary: fc.constant({ type: 'VOICE.CANCEL' } as const) },
  { weight: 4, arbitrary: fc.record({ type: fc.constant('ASR.DONE' as const), text: textArbitrary }) },
  { weight: 4, arbitrary: fc.record({ type: fc.constant('LLM.SEGMENT' as const), text: textArbitrary }) },
  { weight: 3, arbitrary: fc.constant({ type: 'LLM.DONE' } as const) },
  { weight: 4, arbitrary: fc.constant({ type: 'TTS.FIRST_AUDIO' } as const) },
  {
    weight: 2,
    arbitrary: fc.record({
      type: fc.constant('TTS.QUEUED' as const),
      text: textArbitrary,
      durationMs: fc.constantFrom(0, 850),
    }),
  },
  { weight: 4, arbitrary: fc.constant({ type: 'TTS.DONE' } as const) },
  { weight: 6, arbitrary: fc.constant({ type: 'MEDIA.FLUSHED' } as const) },
  {
    weight: 1,
    arbitrary: fc.record(
      {
        type: fc.constant('CUSTOMIZE' as const),
        systemPrompt: fc.constantFrom('Be brief.', 'Be verbose.'),
        tts: selectionArbitrary,
      },
      { requiredKeys: ['type'] },
    ),
  },
  { weight: 3, arbitrary: stageErrorArbitrary(false) },
  { weight: 1, arbitrary: stageErrorArbitrary(true) },
);

/**
 * Random sequences. Most start with START (otherwise a sequence mostly exercises `created`), and
 * `size: 'max'` lets lengths reach `maxLength` instead of fast-check's small default.
 */
export function sessionEventsArbitrary(maxLength = 40): fc.Arbitrary<SessionEvent[]> {
  const events = fc.array(sessionEventArbitrary, { minLength: 1, maxLength, size: 'max' });
  return fc.oneof(
    { weight: 4, arbitrary: events.map((rest): SessionEvent[] => [{ type: 'START' }, ...rest]) },
    { weight: 1, arbitrary: events },
  );
}

// ---------------------------------------------------------------------------------------------------
// Representative events for graph walks (fixed values keep the context space finite)
// ---------------------------------------------------------------------------------------------------

export const SPEAK_TURN: TurnInfo = {
  id: 'turn-speak',
  playout: TURN_PLAYOUT,
  mode: 'speak',
  text: 'Hello there.',
  tts: { provider: 'compat_http', voice: null, model: null },
};
export const CHAT_TURN: TurnInfo = {
  id: 'turn-chat',
  playout: TURN_PLAYOUT,
  mode: 'chat',
  text: 'Tell me a joke.',
  accepted: CHAT_ACCEPTED,
};
export const AUDIO_TURN: TurnInfo = {
  id: 'turn-audio',
  playout: TURN_PLAYOUT,
  mode: 'audio',
  smoothing: true,
  audio: CLIP_AUDIO,
};
export const STREAM_TURN: TurnInfo = {
  id: 'turn-stream',
  playout: TURN_PLAYOUT,
  mode: 'audio_stream',
  audio: STREAM_AUDIO,
};

export const REPRESENTATIVE_EVENTS: readonly SessionEvent[] = [
  { type: 'START' },
  { type: 'PAUSE' },
  { type: 'RESUME' },
  { type: 'TERMINATE' },
  { type: 'INTERRUPT' },
  { type: 'SPEAK', turn: SPEAK_TURN },
  { type: 'CHAT', turn: CHAT_TURN },
  { type: 'SPEAK_AUDIO', turn: AUDIO_TURN },
  { type: 'TRANSCRIBE', request: transcribeRequest('transcribe-chat', true) },
  { type: 'TRANSCRIBE', request: transcribeRequest('transcribe-only', false) },
  { type: 'VOICE.START' },
  { type: 'VOICE.END', request: voiceRequest('voice-turn') },
  { type: 'VOICE.CANCEL' },
  { type: 'ASR.DONE', text: 'What time is it?' },
  { type: 'LLM.SEGMENT', text: 'It is noon.' },
  { type: 'LLM.DONE' },
  { type: 'TTS.FIRST_AUDIO' },
  { type: 'TTS.QUEUED', text: 'It is noon.', durationMs: 900 },
  { type: 'TTS.DONE' },
  { type: 'MEDIA.FLUSHED' },
  { type: 'STAGE.ERROR', code: 'tts_failed', message: 'provider returned 502', fatal: false },
  { type: 'STAGE.ERROR', code: 'media_failed', message: 'renderer crashed', fatal: true },
];

// ---------------------------------------------------------------------------------------------------
// Reading the executable actions returned by `transition()`
// ---------------------------------------------------------------------------------------------------

/** The subset of an executable action we read; XState's exported type is a wide union. */
interface ExecutableActionView {
  type: string;
  params?: unknown;
}

function paramsOf(action: ExecutableActionView): Record<string, unknown> {
  return (action.params ?? {}) as Record<string, unknown>;
}

/** The turn lifecycle the machine emits for the session's bus (metrics, turn logs), beside what it tells clients. */
export type TurnLifecycleEmitted = Extract<SessionEmitted, { type: 'turn.started' | 'turn.finished' }>;
export type ClientEmitted = Exclude<SessionEmitted, TurnLifecycleEmitted>;

/** What the machine emits for clients (`status`, `error`, `session.terminated`): what these tests specify as `emitted`. */
export function isClientEmitted(event: { type: string }): event is ClientEmitted {
  return event.type !== 'turn.started' && event.type !== 'turn.finished';
}

function allEmittedOf(actions: readonly unknown[]): SessionEmitted[] {
  return (actions as ExecutableActionView[])
    .filter((action) => action.type === 'xstate.emit')
    .map((action) => paramsOf(action).event as SessionEmitted);
}

export function emittedOf(actions: readonly unknown[]): ClientEmitted[] {
  return allEmittedOf(actions).filter(isClientEmitted);
}

/** The turn lifecycle events (`turn.started`, `turn.finished`) a step emitted, in order. */
export function turnEventsOf(actions: readonly unknown[]): TurnLifecycleEmitted[] {
  return allEmittedOf(actions).filter((event): event is TurnLifecycleEmitted => !isClientEmitted(event));
}

/** Events sent to a child by id (`sendTo`), in order. */
export function sentToChildOf(actions: readonly unknown[], childId: string): Array<{ type: string; text?: string }> {
  return (actions as ExecutableActionView[])
    .filter((action) => action.type === 'xstate.sendTo')
    .filter((action) => {
      const params = paramsOf(action);
      const target = params.to as { id?: string } | string | undefined;
      return params.targetId === childId || (typeof target === 'object' && target?.id === childId);
    })
    .map((action) => paramsOf(action).event as { type: string; text?: string });
}

/** Applies the spawn/stop actions of one step to the set of children alive before it. */
export function applyChildLifecycle(aliveBefore: ReadonlySet<string>, actions: readonly unknown[]): Set<string> {
  const alive = new Set(aliveBefore);
  for (const action of actions as ExecutableActionView[]) {
    const id = paramsOf(action).id;
    if (typeof id !== 'string') continue;
    if (action.type === 'xstate.spawnChild') alive.add(id);
    if (action.type === 'xstate.stopChild') alive.delete(id);
  }
  return alive;
}

// ---------------------------------------------------------------------------------------------------
// Pure runner
// ---------------------------------------------------------------------------------------------------

export interface PureStep {
  event: SessionEvent;
  before: SessionSnapshot;
  after: SessionSnapshot;
  actions: readonly unknown[];
  emitted: ClientEmitted[];
  turns: TurnLifecycleEmitted[];
  /** Children alive per the spawn/stop actions, before and after this step. */
  aliveBefore: ReadonlySet<string>;
  aliveAfter: ReadonlySet<string>;
}

export interface PureRun {
  initial: SessionSnapshot;
  initialEmitted: SessionEmitted[];
  initialAlive: ReadonlySet<string>;
  steps: PureStep[];
  final: SessionSnapshot;
}

/** Runs `events` through `transition()` only: no actor is created or started, nothing executes. */
export function runPure(
  events: readonly SessionEvent[],
  machine: AnyStateMachine = sessionMachine,
  input: SessionInput = TEST_SESSION_INPUT,
): PureRun {
  const [initial, initialActions] = initialTransition(machine, input) as [SessionSnapshot, unknown[]];
  const initialAlive = applyChildLifecycle(new Set(), initialActions);
  let snapshot = initial;
  let alive: ReadonlySet<string> = initialAlive;
  const steps: PureStep[] = [];
  for (const event of events) {
    const [next, actions] = transition(machine, snapshot, event) as [SessionSnapshot, unknown[]];
    const aliveAfter = applyChildLifecycle(alive, actions);
    steps.push({
      event,
      before: snapshot,
      after: next,
      actions,
      emitted: emittedOf(actions),
      turns: turnEventsOf(actions),
      aliveBefore: alive,
      aliveAfter,
    });
    snapshot = next;
    alive = aliveAfter;
  }
  return { initial, initialEmitted: allEmittedOf(initialActions), initialAlive, steps, final: snapshot };
}

// ---------------------------------------------------------------------------------------------------
// Invariants
// ---------------------------------------------------------------------------------------------------

function stageChildrenOf(snapshot: SessionSnapshot): string[] {
  return Object.keys(snapshot.children ?? {}).filter((id) => (STAGE_CHILD_IDS as readonly string[]).includes(id));
}

function sameStageSet(a: Iterable<string>, b: Iterable<string>): boolean {
  const left = [...a].filter((id) => (STAGE_CHILD_IDS as readonly string[]).includes(id)).sort();
  const right = [...b].filter((id) => (STAGE_CHILD_IDS as readonly string[]).includes(id)).sort();
  return JSON.stringify(left) === JSON.stringify(right);
}

const isStatus = (emitted: SessionEmitted | undefined, stage: string): boolean =>
  emitted?.type === 'status' && emitted.stage === stage;

/** Invariants that hold for any single snapshot (used by every test style, incl. real actors). */
export function snapshotViolations(snapshot: SessionSnapshot): string[] {
  const violations: string[] = [];
  const top = sessionStateOf(snapshot);
  const where = JSON.stringify(snapshot.value);
  for (const id of stageChildrenOf(snapshot)) {
    if (top !== 'running') violations.push(`stage child ${id} referenced in ${where}`);
  }
  const children = new Set(stageChildrenOf(snapshot));
  if (children.has('asr') !== snapshot.matches({ running: 'listening' })) {
    violations.push(`asr child presence (${children.has('asr')}) disagrees with listening in ${where}`);
  }
  if (children.has('tts') !== snapshot.matches({ running: 'turn' })) {
    violations.push(`tts child presence (${children.has('tts')}) disagrees with turn in ${where}`);
  }
  if (children.has('llm') !== snapshot.matches({ running: { turn: { text: 'generating' } } })) {
    violations.push(`llm child presence (${children.has('llm')}) disagrees with a chat turn in ${where}`);
  }
  if ((pipelineStageOf(snapshot) !== 'idle' || isBusy(snapshot)) && top !== 'running') {
    violations.push(`pipeline stage ${pipelineStageOf(snapshot)} / busy outside running in ${where}`);
  }
  if (snapshot.status === 'done' && snapshot.value !== 'terminated') {
    violations.push(`done but not terminated: ${where}`);
  }
  const quiet =
    top === 'paused' || snapshot.matches({ running: 'idle' }) || snapshot.matches({ running: 'interrupted' });
  if (quiet && (snapshot.context.turn !== null || snapshot.context.transcribe !== null)) {
    violations.push(`turn/transcribe left in context in ${where}`);
  }
  return violations;
}

/** Invariants of one pure step (before --event--> after, with the actions `transition` returned). */
export function stepViolations(step: PureStep): string[] {
  const { event, before, after, emitted } = step;
  const violations = snapshotViolations(after).map((v) => `after ${event.type}: ${v}`);
  const fail = (message: string) => violations.push(`${event.type} from ${JSON.stringify(before.value)}: ${message}`);
  const topBefore = sessionStateOf(before);
  const topAfter = sessionStateOf(after);

  // Children alive per spawn/stop actions must match the snapshot (pure path) — stage children only,
  // since XState keeps the root's media ref in a final snapshot after stopping it.
  if (!sameStageSet(step.aliveAfter, Object.keys(after.children ?? {}))) {
    fail(
      `children alive per actions [${[...step.aliveAfter]}] != snapshot children [${Object.keys(after.children ?? {})}]`,
    );
  }
  if (step.aliveAfter.has('media') !== (after.status === 'active'))
    fail(`media alive=${step.aliveAfter.has('media')} with status ${after.status}`);

  // The llm actor hears how its turn ended before it is stopped: completed only when the audio played out.
  if (step.aliveBefore.has('llm') && !step.aliveAfter.has('llm')) {
    const ends = sentToChildOf(step.actions, 'llm').filter((e) => e.type === 'TURN.END') as Array<{
      type: string;
      completed?: boolean;
    }>;
    if (ends.length !== 1 || ends[0].completed !== (event.type === 'TTS.DONE'))
      fail(`llm stopped after TURN.END ${JSON.stringify(ends)}`);
  }

  // terminated absorbs everything.
  if (before.status === 'done') {
    if (after.status !== 'done' || after.value !== 'terminated')
      fail(`left terminated: ${JSON.stringify(after.value)}`);
    if (emitted.length > 0) fail(`emitted ${JSON.stringify(emitted)} after termination`);
    if ([...step.aliveAfter].some((id) => !step.aliveBefore.has(id))) fail('spawned a child after termination');
  }

  // START succeeds once.
  if (topBefore !== 'created' && topAfter === 'created') fail('returned to created');
  if (event.type === 'START') {
    if (topBefore === 'created') {
      if (!after.matches({ running: 'idle' })) fail(`START from created reached ${JSON.stringify(after.value)}`);
    } else if (JSON.stringify(after.value) !== JSON.stringify(before.value) || emitted.length > 0) {
      fail(
        `START changed ${JSON.stringify(before.value)} to ${JSON.stringify(after.value)} / emitted ${emitted.length}`,
      );
    }
  }

  // INTERRUPT while busy → interrupted (+ flush), otherwise a no-op.
  if (event.type === 'INTERRUPT' && topBefore === 'running') {
    if (isBusy(before)) {
      if (!after.matches({ running: 'interrupted' })) fail(`busy INTERRUPT reached ${JSON.stringify(after.value)}`);
      if (!(emitted.length === 1 && isStatus(emitted[0], 'interrupted'))) fail(`emitted ${JSON.stringify(emitted)}`);
      if (!sentToChildOf(step.actions, 'media').some((e) => e.type === 'FLUSH')) fail('no FLUSH sent to media');
    } else if (JSON.stringify(after.value) !== JSON.stringify(before.value) || emitted.length > 0) {
      fail(`idle INTERRUPT changed state to ${JSON.stringify(after.value)}`);
    }
  }
  if (event.type === 'MEDIA.FLUSHED' && before.matches({ running: 'interrupted' })) {
    if (!after.matches({ running: 'idle' })) fail(`reached ${JSON.stringify(after.value)}`);
    if (!(emitted.length === 1 && isStatus(emitted[0], 'idle'))) fail(`emitted ${JSON.stringify(emitted)}`);
  }

  // Emitted order: an error is resolved within the same step, by status (error→)idle or termination.
  emitted.forEach((item, index) => {
    if (item.type !== 'error') return;
    const next = emitted[index + 1];
    const okIdle = isStatus(next, 'idle');
    const okErrorIdle = isStatus(next, 'error') && isStatus(emitted[index + 2], 'idle');
    const okTerminated = next?.type === 'session.terminated';
    if (!(okIdle || okErrorIdle || okTerminated)) fail(`error followed by ${JSON.stringify(emitted.slice(index + 1))}`);
    if (event.type !== 'STAGE.ERROR') fail('error emitted without a STAGE.ERROR');
  });
  const terminatedIndex = emitted.findIndex((item) => item.type === 'session.terminated');
  const justTerminated = before.status === 'active' && after.status === 'done';
  if (justTerminated !== terminatedIndex >= 0)
    fail(`session.terminated emitted=${terminatedIndex >= 0}, terminated now=${justTerminated}`);
  if (terminatedIndex >= 0 && terminatedIndex !== emitted.length - 1) fail('events emitted after session.terminated');

  // Routes accept work whenever the session runs and is not busy: such work must never be dropped.
  if (topBefore === 'running' && !isBusy(before)) {
    if (
      (event.type === 'SPEAK' || event.type === 'CHAT' || event.type === 'SPEAK_AUDIO') &&
      !after.matches({ running: 'turn' })
    ) {
      fail(`turn request dropped, now ${JSON.stringify(after.value)}`);
    }
    if (event.type === 'TRANSCRIBE' && !after.matches({ running: 'listening' }))
      fail(`transcribe dropped, now ${JSON.stringify(after.value)}`);
  }

  // The last status announced in a step is the stage the snapshot is in — except that a speak/audio
  // turn before its first audio (`preparing`) is not announced yet, though pipelineStageOf calls it speaking.
  const statuses = emitted.filter(
    (item): item is Extract<SessionEmitted, { type: 'status' }> => item.type === 'status',
  );
  const announced = after.matches({ running: { turn: { phase: 'preparing' } } }) ? 'idle' : pipelineStageOf(after);
  if (statuses.length > 0 && statuses[statuses.length - 1].stage !== announced) {
    fail(`last status ${statuses[statuses.length - 1].stage} but stage is ${announced}`);
  }

  // A turn is the context's `turn` or `transcribe` entry: it starts when one with a new id appears and finishes when it
  // goes (or the session terminates with it); a transcription that goes on as a chat keeps its id and stays one turn.
  const turnIdOf = (snapshot: SessionSnapshot) =>
    snapshot.status === 'done' ? null : (snapshot.context.turn?.id ?? snapshot.context.transcribe?.id ?? null);
  const [turnBefore, turnAfter] = [turnIdOf(before), turnIdOf(after)];
  const expectedTurns = [
    ...(turnBefore !== null && turnBefore !== turnAfter ? [`turn.finished ${turnBefore}`] : []),
    ...(turnAfter !== null && turnAfter !== turnBefore ? [`turn.started ${turnAfter}`] : []),
  ];
  const turns = step.turns.map((item) => `${item.type} ${item.turnId}`);
  if (JSON.stringify(turns) !== JSON.stringify(expectedTurns))
    fail(`turn events ${JSON.stringify(turns)}, expected ${JSON.stringify(expectedTurns)}`);
  return violations;
}

export function runViolations(run: PureRun): string[] {
  const violations = snapshotViolations(run.initial);
  if (run.initialEmitted.length > 0) violations.push(`initial emitted ${JSON.stringify(run.initialEmitted)}`);
  for (const step of run.steps) violations.push(...stepViolations(step));
  return violations;
}

// ---------------------------------------------------------------------------------------------------
// Recording stage actors for real-actor replays
// ---------------------------------------------------------------------------------------------------

export type ChildId = StageChildId | 'media';

export interface ChildRecord {
  id: ChildId;
  input: unknown;
  received: Array<{ type: string; text?: string }>;
  /** Set when the actor's cleanup ran (XState stopped it). */
  stopped: boolean;
}

type SendBack = (event: SessionEvent) => void;

export interface RecordingHooks {
  onStart?: (id: ChildId, input: unknown, sendBack: SendBack) => void;
  onReceive?: (id: ChildId, event: { type: string; text?: string }, sendBack: SendBack) => void;
}

/**
 * Callback actors standing in for media/asr/llm/tts that record their input, every event they
 * receive and whether their cleanup ran; optional hooks let a scenario script their replies.
 * Hooks run on a microtask so replies arrive as separate events, as they would from real I/O.
 */
export function createRecordingActors(hooks: RecordingHooks = {}) {
  const records: ChildRecord[] = [];
  const recorder = (id: ChildId) =>
    // Event type `any`: one recorder stands in for actors that each receive their own event union.
    fromCallback<any, any>(({ input, receive, sendBack }) => {
      const record: ChildRecord = { id, input, received: [], stopped: false };
      records.push(record);
      const reply: SendBack = (event) => {
        if (!record.stopped) sendBack(event);
      };
      if (hooks.onStart) queueMicrotask(() => hooks.onStart?.(id, input, reply));
      receive((event) => {
        const received = event as { type: string; text?: string };
        record.received.push(received);
        if (hooks.onReceive) queueMicrotask(() => hooks.onReceive?.(id, received, reply));
      });
      return () => {
        record.stopped = true;
      };
    });
  return {
    actors: { media: recorder('media'), asr: recorder('asr'), llm: recorder('llm'), tts: recorder('tts') },
    records,
    /** Ids of the recorded actors started and not yet cleaned up. */
    alive: (): ChildId[] => records.filter((record) => !record.stopped).map((record) => record.id),
    of: (id: ChildId): ChildRecord[] => records.filter((record) => record.id === id),
  };
}
