import { afterEach, describe, expect, it } from 'vitest';
import pino from 'pino';
import { createActor, fromCallback, type InspectionEvent } from 'xstate';
import { sessionMachine, type MediaActorEvent, type SessionEvent } from '../machines/session.machine.ts';
import {
  SessionBus,
  logTurns,
  machineTrace,
  relayTurns,
  sessionInspect,
  type SessionBusEvents,
} from '../src/sessions/session-bus.ts';
import { SessionEventHub } from '../src/sessions/event-hub.ts';
import { SessionMetrics } from '../src/sessions/metrics.ts';
import { SPEAK_TURN, TEST_SESSION_INPUT, createRecordingActors, transcribeRequest } from './helpers/machine-events.ts';

/**
 * The session bus fed by the real machine (stage actors are recorders): turn lifecycle and outcomes come
 * from the event that ended the turn, never from what clients are told.
 */

const actors: Array<{ stop(): void }> = [];
afterEach(() => {
  for (const actor of actors.splice(0)) actor.stop();
});

function busSession() {
  const bus = new SessionBus((error) => {
    throw error;
  });
  const seen: Array<{ type: keyof SessionBusEvents; data: unknown }> = [];
  for (const type of ['turn.started', 'turn.finished', 'transition', 'spec'] as const)
    bus.on(type, (data) => seen.push({ type, data }));
  const recording = createRecordingActors();
  // As the real media actor: the flush happens inside the machine's step and tells the bus, then the machine hears of it.
  const media = fromCallback<MediaActorEvent, { sessionId: string }>(({ receive, sendBack }) => {
    // Its one event is FLUSH.
    receive(() => {
      bus.emit('media.flushed', {});
      sendBack({ type: 'MEDIA.FLUSHED' });
    });
  });
  const actor = createActor(sessionMachine.provide({ actors: { ...recording.actors, media } }), {
    input: TEST_SESSION_INPUT,
    inspect: machineTrace(bus),
  });
  relayTurns(actor, bus);
  actors.push(actor);
  actor.start();
  actor.send({ type: 'START' });
  // The TTS provider a turn speaks with, its text and its playout record are checked on their own below.
  const turns = () =>
    seen
      .filter((e) => e.type === 'turn.started' || e.type === 'turn.finished')
      .map((e) => {
        const {
          ttsProvider: _provider,
          text: _text,
          playout: _playout,
          ...data
        } = e.data as { ttsProvider?: string; text?: string; playout?: unknown };
        return { event: e.type, ...data };
      });
  const send = (event: SessionEvent) => actor.send(event);
  return { bus, seen, turns, send, actor };
}

const speak = (id: string): SessionEvent => ({ type: 'SPEAK', turn: { ...SPEAK_TURN, id } });

describe('session bus fed by the machine', () => {
  it('a turn finishes with the outcome of the event that ended it: completed, interrupted, paused, error, terminated', async () => {
    const { send, turns } = busSession();
    send(speak('a'));
    send({ type: 'TTS.FIRST_AUDIO' });
    send({ type: 'TTS.DONE' });
    send(speak('b'));
    send({ type: 'INTERRUPT' });
    await new Promise((resolve) => setTimeout(resolve, 10));
    send(speak('c'));
    send({ type: 'PAUSE' });
    send({ type: 'RESUME' });
    send(speak('d'));
    send({ type: 'STAGE.ERROR', code: 'tts_failed', message: 'boom', fatal: false });
    send(speak('e'));
    send({ type: 'TERMINATE' });
    expect(turns()).toEqual([
      { event: 'turn.started', turnId: 'a', kind: 'speak' },
      { event: 'turn.finished', turnId: 'a', kind: 'speak', outcome: 'completed' },
      { event: 'turn.started', turnId: 'b', kind: 'speak' },
      { event: 'turn.finished', turnId: 'b', kind: 'speak', outcome: 'interrupted' },
      { event: 'turn.started', turnId: 'c', kind: 'speak' },
      { event: 'turn.finished', turnId: 'c', kind: 'speak', outcome: 'paused' },
      { event: 'turn.started', turnId: 'd', kind: 'speak' },
      { event: 'turn.finished', turnId: 'd', kind: 'speak', outcome: 'error' },
      { event: 'turn.started', turnId: 'e', kind: 'speak' },
      { event: 'turn.finished', turnId: 'e', kind: 'speak', outcome: 'terminated' },
    ]);
  });

  it("turn.started names the TTS provider the turn speaks with (its own, else the session's) and its text (the transcript's)", () => {
    const { send, seen } = busSession();
    send({ type: 'SPEAK', turn: { ...SPEAK_TURN, id: 'own', tts: { provider: 'cloud_c', voice: null, model: null } } });
    send({ type: 'TTS.FIRST_AUDIO' });
    send({ type: 'TTS.DONE' });
    const { tts: _own, ...withoutVoice } = SPEAK_TURN;
    send({ type: 'SPEAK', turn: { ...withoutVoice, id: 'default' } });
    const started = seen.filter((e) => e.type === 'turn.started').map((e) => e.data);
    expect(started).toEqual([
      { turnId: 'own', kind: 'speak', ttsProvider: 'cloud_c', text: SPEAK_TURN.text, playout: SPEAK_TURN.playout },
      {
        turnId: 'default',
        kind: 'speak',
        ttsProvider: TEST_SESSION_INPUT.tts.provider,
        text: SPEAK_TURN.text,
        playout: SPEAK_TURN.playout,
      },
    ]);
  });

  it('a transcription that goes on as a chat stays one turn', () => {
    const { send, turns } = busSession();
    send({ type: 'TRANSCRIBE', request: transcribeRequest('t-1', true) });
    send({ type: 'ASR.DONE', text: 'What time is it?' });
    expect(turns()).toEqual([{ event: 'turn.started', turnId: 't-1', kind: 'transcribe' }]);
    send({ type: 'INTERRUPT' });
    expect(turns().at(-1)).toEqual({
      event: 'turn.finished',
      turnId: 't-1',
      kind: 'transcribe',
      outcome: 'interrupted',
    });
  });

  it('transitions name the leaf states and the event; spec events reach the SSE hub only through the bus', () => {
    const { bus, seen, send } = busSession();
    const hub = new SessionEventHub(bus);
    const published: string[] = [];
    hub.listen((event) => published.push(event.type));
    send(speak('a'));
    const transitions = seen.filter((e) => e.type === 'transition').map((e) => e.data);
    expect(transitions[0]).toEqual({ from: '', to: 'created', event: 'xstate.init' });
    expect(transitions).toContainEqual({ from: 'created', to: 'running.idle', event: 'START' });
    expect(transitions.at(-1)).toMatchObject({ from: 'running.idle', event: 'SPEAK' });
    expect((transitions.at(-1) as { to: string }).to).toMatch(/running\.turn\./);
    bus.publish('tts', { stage: 'start', ms_elapsed: 0 });
    expect(published).toEqual(['tts']);
    hub.close();
  });

  it('metrics follow the bus: a pause is no completed turn, an interrupt times its flush', () => {
    const { bus, send } = busSession();
    const metrics = new SessionMetrics();
    metrics.follow(bus);
    send(speak('a'));
    send({ type: 'PAUSE' });
    send({ type: 'RESUME' });
    send(speak('b'));
    // As `Session.send` sends an INTERRUPT: the media actor's flush happens inside the interrupt's step.
    metrics.timeInterrupt(() => send({ type: 'INTERRUPT' }));
    const [a, b] = metrics.snapshot().turns;
    expect(a).toMatchObject({ turn_id: 'a', outcome: 'paused' });
    expect(b).toMatchObject({ turn_id: 'b', outcome: 'interrupted' });
    expect(b.interrupt_to_flush_ms).toBeGreaterThanOrEqual(0);
  });

  it('an interrupt the machine ignores times nothing, and a later flush (a pause) is not taken for its flush', () => {
    const { bus, send } = busSession();
    const metrics = new SessionMetrics();
    metrics.follow(bus);
    let flushes = 0;
    bus.on('media.flushed', () => flushes++);
    metrics.timeInterrupt(() => send({ type: 'INTERRUPT' }));
    send(speak('a'));
    send({ type: 'PAUSE' });
    expect(flushes).toBe(1);
    expect(metrics.snapshot().turns).toEqual([
      expect.objectContaining({ turn_id: 'a', outcome: 'paused', interrupt_to_flush_ms: null }),
    ]);
  });

  it('XState inspection is attached only for the live inspector or, at debug, the transition trace', () => {
    const bus = new SessionBus();
    const inspector = (_event: InspectionEvent) => undefined;
    expect(sessionInspect(bus, pino({ level: 'info' }))).toBeUndefined();
    expect(sessionInspect(bus, pino({ level: 'info' }), inspector)).toBe(inspector);
    expect(sessionInspect(bus, pino({ level: 'debug', enabled: false }))).toBeUndefined();
    const traced = sessionInspect(bus, pino({ level: 'debug' }), inspector);
    expect(traced).toBeTypeOf('function');
    expect(traced).not.toBe(inspector);
  });

  it('at debug, a session logs its transitions (the trace goes through inspection, as a debugging aid)', () => {
    const lines: Array<{ msg: string; from?: string; to?: string; event?: string }> = [];
    const logger = pino({ level: 'debug' }, { write: (line: string) => void lines.push(JSON.parse(line)) });
    const bus = new SessionBus();
    logTurns(bus, logger);
    const actor = createActor(sessionMachine.provide({ actors: createRecordingActors().actors }), {
      input: TEST_SESSION_INPUT,
      inspect: sessionInspect(bus, logger),
    });
    actors.push(actor);
    actor.start();
    actor.send({ type: 'START' });
    expect(
      lines.filter((line) => line.msg === 'session transition').map(({ from, to, event }) => ({ from, to, event })),
    ).toEqual([
      { from: '', to: 'created', event: 'xstate.init' },
      { from: 'created', to: 'running.idle', event: 'START' },
    ]);
  });
});
