import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { createActor, createMachine, type AnyStateMachine } from 'xstate';
import {
  isBusy,
  sessionMachine,
  sessionStateOf,
  type SessionEmitted,
  type SessionEvent,
  type SessionSnapshot,
} from '../machines/session.machine.ts';
import {
  REPRESENTATIVE_EVENTS,
  STREAM_TURN,
  TEST_SESSION_INPUT,
  runPure,
  runViolations,
  sessionEventArbitrary,
  sessionEventsArbitrary,
  stepViolations,
  transcribeRequest,
  isClientEmitted,
  TURN_PLAYOUT,
} from './helpers/machine-events.ts';

/** Enough random runs to visit every state many times while keeping the file well under a few seconds. */
/** 800: with the VOICE.* events in the alphabet, 400 runs met some invariant preconditions only ~20 times (flaky coverage floor). */
const PROPERTY_RUNS = 800;
const MAX_SEQUENCE_LENGTH = 40;

describe('session machine: invariants over random event sequences (pure transition)', () => {
  it('every step of every random sequence keeps all invariants', () => {
    // Count how often each invariant's precondition is met, so a generator drift that stops exercising
    // them makes this test fail instead of passing vacuously.
    const exercised = { busyInterrupt: 0, flushedAfterInterrupt: 0, errorEmitted: 0, absorbed: 0, startIgnored: 0 };
    fc.assert(
      fc.property(sessionEventsArbitrary(MAX_SEQUENCE_LENGTH), (events) => {
        const run = runPure(events);
        expect(runViolations(run)).toEqual([]);
        for (const step of run.steps) {
          if (step.event.type === 'INTERRUPT' && isBusy(step.before)) exercised.busyInterrupt++;
          if (step.event.type === 'MEDIA.FLUSHED' && step.before.matches({ running: 'interrupted' }))
            exercised.flushedAfterInterrupt++;
          if (step.emitted.some((e) => e.type === 'error')) exercised.errorEmitted++;
          if (step.before.status === 'done') exercised.absorbed++;
          if (step.event.type === 'START' && sessionStateOf(step.before) !== 'created') exercised.startIgnored++;
        }
      }),
      { numRuns: PROPERTY_RUNS },
    );
    for (const [name, count] of Object.entries(exercised)) expect(count, name).toBeGreaterThan(20);
  });

  it('terminated absorbs every event, from wherever the session was terminated', () => {
    fc.assert(
      fc.property(
        sessionEventsArbitrary(15),
        fc.constantFrom<SessionEvent>(
          { type: 'TERMINATE' },
          { type: 'STAGE.ERROR', code: 'media_failed', message: 'renderer crashed', fatal: true },
        ),
        fc.array(sessionEventArbitrary, { minLength: 1, maxLength: 20 }),
        (prefix, ending, suffix) => {
          const run = runPure([...prefix, ending, ...suffix]);
          const endIndex = run.steps.findIndex((step) => step.after.status === 'done');
          expect(endIndex).toBeGreaterThanOrEqual(0);
          for (const step of run.steps.slice(endIndex)) {
            expect(step.after.value).toBe('terminated');
            expect(step.after.status).toBe('done');
          }
          for (const step of run.steps.slice(endIndex + 1)) {
            expect(step.emitted).toEqual([]);
            expect(step.after.context).toEqual(step.before.context);
          }
        },
      ),
      { numRuns: 200 },
    );
  });

  it('START succeeds exactly once: created is never re-entered and later STARTs change nothing', () => {
    fc.assert(
      fc.property(sessionEventsArbitrary(MAX_SEQUENCE_LENGTH), (events) => {
        const run = runPure([{ type: 'START' }, ...events]);
        expect(run.steps[0].after.matches({ running: 'idle' })).toBe(true);
        for (const step of run.steps.slice(1)) {
          expect(sessionStateOf(step.after)).not.toBe('created');
          if (step.event.type === 'START') {
            expect(step.after.value).toEqual(step.before.value);
            expect(step.after.context).toEqual(step.before.context);
            expect(step.emitted).toEqual([]);
          }
        }
      }),
      { numRuns: 200 },
    );
  });

  it('after INTERRUPT while busy the machine is interrupted, and idle once media reports FLUSHED', () => {
    // A busy prefix is forced so every run exercises the property rather than the rare random case.
    const busyStart = fc.constantFrom<SessionEvent[]>(
      [{ type: 'SPEAK', turn: { id: 'a', playout: TURN_PLAYOUT, mode: 'speak', text: 'Hi.' } }],
      [{ type: 'CHAT', turn: { id: 'b', playout: TURN_PLAYOUT, mode: 'chat', text: 'Hi?' } }],
      [
        { type: 'CHAT', turn: { id: 'b', playout: TURN_PLAYOUT, mode: 'chat', text: 'Hi?' } },
        { type: 'TTS.FIRST_AUDIO' },
      ],
      [{ type: 'SPEAK_AUDIO', turn: STREAM_TURN }],
      [{ type: 'TRANSCRIBE', request: transcribeRequest('d', true) }],
      [
        { type: 'TRANSCRIBE', request: transcribeRequest('d', true) },
        { type: 'ASR.DONE', text: 'hello' },
      ],
    );
    const harmless = fc.array(
      fc.constantFrom<SessionEvent>(
        { type: 'LLM.SEGMENT', text: 'x' },
        { type: 'START' },
        { type: 'INTERRUPT' },
        { type: 'RESUME' },
      ),
      { maxLength: 4 },
    );
    fc.assert(
      fc.property(busyStart, harmless, (busy, noise) => {
        const run = runPure([{ type: 'START' }, ...busy, { type: 'INTERRUPT' }, ...noise, { type: 'MEDIA.FLUSHED' }]);
        const interruptStep = run.steps[busy.length + 1];
        expect(isBusy(interruptStep.before)).toBe(true);
        expect(interruptStep.after.matches({ running: 'interrupted' })).toBe(true);
        for (const step of run.steps.slice(busy.length + 2, -1)) {
          expect(step.after.matches({ running: 'interrupted' })).toBe(true);
        }
        expect(run.final.matches({ running: 'idle' })).toBe(true);
        const emitted = run.steps.slice(busy.length + 1).flatMap((step) => step.emitted);
        expect(emitted).toEqual([
          { type: 'status', stage: 'interrupted' },
          { type: 'status', stage: 'idle' },
        ]);
      }),
      { numRuns: 150 },
    );
  });

  it('the checker catches a stage actor invoked at the root (the invariant can fail)', () => {
    // A mutant of the real machine: identical, except `tts` is also invoked at the root.
    const config = sessionMachine.config as { invoke: unknown };
    const mutant = createMachine(
      {
        ...(sessionMachine.config as object),
        invoke: [
          config.invoke,
          {
            id: 'tts',
            src: 'tts',
            input: ({ context }: { context: { sessionId: string } }) => ({ sessionId: context.sessionId }),
          },
        ],
      } as never,
      sessionMachine.implementations as never,
    ) as AnyStateMachine;
    const violations = runViolations(runPure([{ type: 'START' }, { type: 'PAUSE' }], mutant));
    expect(violations.some((v) => v.includes('stage child tts referenced in "created"'))).toBe(true);
    expect(violations.some((v) => v.includes('stage child tts referenced in "paused"'))).toBe(true);
    // …and the unmodified machine passes the same sequence.
    expect(runViolations(runPure([{ type: 'START' }, { type: 'PAUSE' }]))).toEqual([]);
  });

  it('the checker catches work dropped while interrupted (not busy, so routes would accept it)', () => {
    // A mutant whose interrupted state only waits for MEDIA.FLUSHED, as the machine first did.
    const config = sessionMachine.config as { states: Record<string, any> };
    const running = config.states.running;
    const mutant = createMachine(
      {
        ...(config as object),
        states: {
          ...config.states,
          running: {
            ...running,
            states: {
              ...running.states,
              interrupted: {
                ...running.states.interrupted,
                on: { 'MEDIA.FLUSHED': running.states.interrupted.on['MEDIA.FLUSHED'] },
              },
            },
          },
        },
      } as never,
      sessionMachine.implementations as never,
    ) as AnyStateMachine;
    const events: SessionEvent[] = [
      { type: 'START' },
      { type: 'SPEAK', turn: { id: 'a', playout: TURN_PLAYOUT, mode: 'speak' } },
      { type: 'INTERRUPT' },
      { type: 'TRANSCRIBE', request: transcribeRequest('b', false) },
    ];
    expect(runViolations(runPure(events, mutant)).some((v) => v.includes('transcribe dropped'))).toBe(true);
    expect(runViolations(runPure(events))).toEqual([]);
  });

  it('a broken step is reported: an error not followed by idle or termination', () => {
    const run = runPure([{ type: 'START' }, REPRESENTATIVE_EVENTS.find((e) => e.type === 'STAGE.ERROR' && !e.fatal)!]);
    const step = run.steps[1];
    const truncated = { ...step, emitted: step.emitted.slice(0, 1) };
    expect(stepViolations(step)).toEqual([]);
    expect(stepViolations(truncated).some((v) => v.includes('error followed by []'))).toBe(true);
  });
});

describe('session machine: pure transition() agrees with a real actor', () => {
  it('same value, context, emitted events and stage children after every event', () => {
    fc.assert(
      fc.property(sessionEventsArbitrary(MAX_SEQUENCE_LENGTH), (events) => {
        const run = runPure(events);
        const actor = createActor(sessionMachine, { input: TEST_SESSION_INPUT });
        const emitted: SessionEmitted[] = [];
        actor.on('*', (event) => {
          if (isClientEmitted(event)) emitted.push(event);
        });
        actor.start();
        try {
          for (const step of run.steps) {
            // A finished actor is stopped; sending to it only logs a warning, and the pure run already
            // proves absorption, so the comparison ends where the actor does.
            if (actor.getSnapshot().status !== 'active') break;
            const emittedBefore = emitted.length;
            actor.send(step.event);
            const real = actor.getSnapshot() as SessionSnapshot;
            expect(real.value).toEqual(step.after.value);
            expect(real.status).toEqual(step.after.status);
            expect(real.context).toEqual(step.after.context);
            expect(emitted.slice(emittedBefore)).toEqual(step.emitted);
            expect(Object.keys(real.children).sort()).toEqual(Object.keys(step.after.children).sort());
          }
          expect((actor.getSnapshot() as SessionSnapshot).value).toEqual(run.final.value);
        } finally {
          // Cancels the interrupted state's settle timer if the run ended there.
          actor.stop();
        }
      }),
      { numRuns: PROPERTY_RUNS },
    );
  });
});
