import { getShortestPaths } from '@xstate/graph';
import { describe, expect, it } from 'vitest';
import {
  admitsRequest,
  audioStreamRefusal,
  refusalDetail,
  sessionMachine,
  type RequestEventType,
  type SessionEvent,
  type SessionSnapshot,
} from '../machines/session.machine.ts';
import {
  AUDIO_TURN,
  CHAT_TURN,
  REPRESENTATIVE_EVENTS,
  SPEAK_TURN,
  STREAM_TURN,
  TEST_SESSION_INPUT,
  runPure,
  transcribeRequest,
} from './helpers/machine-events.ts';

/**
 * Admission is the machine's answer: a client's call is accepted exactly when `snapshot.can(event)` is true
 * (`Session.admit`). These tests pin that answer, for every reachable state, to the table the specification
 * and the issue give — written out here independently of the machine — and the 409 detail to the state.
 */

type Where = 'created' | 'idle' | 'busy' | 'interrupted' | 'paused' | 'terminated';

/** Where a snapshot is, in the table's terms. */
function whereOf(snapshot: SessionSnapshot): Where {
  if (snapshot.status === 'done') return 'terminated';
  if (snapshot.matches('created')) return 'created';
  if (snapshot.matches('paused')) return 'paused';
  if (snapshot.matches({ running: 'interrupted' })) return 'interrupted';
  if (snapshot.matches({ running: 'turn' }) || snapshot.matches({ running: 'listening' })) return 'busy';
  return 'idle';
}

/** Work a client starts: admitted only while running and not busy (interrupted is not busy: its flush settles). */
const WORK: ReadonlySet<Where> = new Set(['idle', 'interrupted']);
const RUNNING: ReadonlySet<Where> = new Set(['idle', 'busy', 'interrupted']);

/** The specification's table: which request each state admits. */
const ADMITTED: Record<RequestEventType, (where: Where) => boolean> = {
  START: (where) => where === 'created',
  PAUSE: (where) => RUNNING.has(where),
  RESUME: (where) => where === 'paused',
  SPEAK: (where) => WORK.has(where),
  CHAT: (where) => WORK.has(where),
  SPEAK_AUDIO: (where) => WORK.has(where),
  TRANSCRIBE: (where) => WORK.has(where),
  CUSTOMIZE: (where) => where !== 'terminated',
  EXPRESS: (where) => where !== 'terminated',
};

/** Every request with a real payload, as the routes send it. */
const REQUESTS: ReadonlyArray<SessionEvent & { type: RequestEventType }> = [
  { type: 'START' },
  { type: 'PAUSE' },
  { type: 'RESUME' },
  { type: 'SPEAK', turn: SPEAK_TURN },
  { type: 'CHAT', turn: CHAT_TURN },
  { type: 'SPEAK_AUDIO', turn: AUDIO_TURN },
  { type: 'SPEAK_AUDIO', turn: STREAM_TURN },
  { type: 'TRANSCRIBE', request: transcribeRequest('admission', true) },
  { type: 'CUSTOMIZE', systemPrompt: 'Be brief.', tts: { provider: 'builtin', voice: null, model: null } },
  { type: 'EXPRESS', name: 'smile' },
];

const paths = getShortestPaths(sessionMachine, { input: TEST_SESSION_INPUT, events: [...REPRESENTATIVE_EVENTS] });
const reachable = paths.map((path) => path.state as SessionSnapshot);

function snapshotAfter(events: SessionEvent[]): SessionSnapshot {
  return runPure(events).final;
}

describe('admission: snapshot.can is the specification table, in every reachable state', () => {
  it('the walk reaches every row of the table', () => {
    const rows = new Set(reachable.map(whereOf));
    expect([...rows].sort()).toEqual(['busy', 'created', 'idle', 'interrupted', 'paused', 'terminated']);
  });

  it.each(REQUESTS.map((event) => [event.type, event] as const))(
    '%s is admitted exactly where the table says',
    (_, event) => {
      for (const snapshot of reachable) {
        const where = whereOf(snapshot);
        expect(snapshot.can(event), `${event.type} in ${JSON.stringify(snapshot.value)} (${where})`).toBe(
          ADMITTED[event.type](where),
        );
      }
    },
  );

  it('the answer before the payload exists (admitsRequest, asked before reading an upload) is the answer with it', () => {
    for (const snapshot of reachable) {
      for (const event of REQUESTS)
        expect(admitsRequest(snapshot, event.type), `${event.type} in ${JSON.stringify(snapshot.value)}`).toBe(
          snapshot.can(event),
        );
    }
  });

  it('an admitted request changes the state; a refused one would have changed nothing', () => {
    for (const path of paths) {
      const snapshot = path.state as SessionSnapshot;
      const prefix = path.steps
        .map((step) => step.event as SessionEvent)
        .filter((event) => (event.type as string) !== 'xstate.init');
      for (const event of REQUESTS) {
        if (snapshot.can(event) || event.type === 'CUSTOMIZE') continue;
        const after = snapshotAfter([...prefix, event]);
        expect(after.value, `${event.type} in ${JSON.stringify(snapshot.value)}`).toEqual(snapshot.value);
        expect(after.context).toEqual(snapshot.context);
      }
    }
  });

  it('terminated refuses every event, not only requests', () => {
    const terminated = reachable.filter((snapshot) => whereOf(snapshot) === 'terminated');
    expect(terminated.length).toBeGreaterThan(0);
    for (const snapshot of terminated)
      for (const event of REPRESENTATIVE_EVENTS) expect(snapshot.can(event), event.type).toBe(false);
  });

  it('INTERRUPT does something only while busy (the route always answers 200; the machine decides if it acts)', () => {
    for (const snapshot of reachable)
      expect(snapshot.can({ type: 'INTERRUPT' }), JSON.stringify(snapshot.value)).toBe(whereOf(snapshot) === 'busy');
  });
});

describe('admission: the 409 detail is derived from the state', () => {
  const created = snapshotAfter([]);
  const idle = snapshotAfter([{ type: 'START' }]);
  const paused = snapshotAfter([{ type: 'START' }, { type: 'PAUSE' }]);
  const terminated = snapshotAfter([{ type: 'START' }, { type: 'TERMINATE' }]);
  const busyWith = (event: SessionEvent) => snapshotAfter([{ type: 'START' }, event]);

  it.each([
    ['SPEAK in created', created, 'SPEAK', 'session is not started: call POST /sessions/{session_id}/start first'],
    ['CHAT in paused', paused, 'CHAT', 'session is paused: call POST /sessions/{session_id}/resume first'],
    ['TRANSCRIBE in terminated', terminated, 'TRANSCRIBE', 'session is terminated'],
    ['START in running', idle, 'START', 'session is already running'],
    ['START in paused', paused, 'START', 'session is already paused'],
    ['PAUSE in created', created, 'PAUSE', 'session is created, only a running session can be paused'],
    ['RESUME in running', idle, 'RESUME', 'session is running, only a paused session can be resumed'],
    ['CUSTOMIZE in terminated', terminated, 'CUSTOMIZE', 'session is terminated'],
  ] as Array<[string, SessionSnapshot, RequestEventType, string]>)('%s', (_, snapshot, type, detail) => {
    expect(admitsRequest(snapshot, type)).toBe(false);
    expect(refusalDetail(snapshot, type)).toBe(detail);
  });

  it.each([
    ['speak', { type: 'SPEAK', turn: SPEAK_TURN }],
    ['chat', { type: 'CHAT', turn: CHAT_TURN }],
    ['speak_audio', { type: 'SPEAK_AUDIO', turn: AUDIO_TURN }],
    ['audio stream', { type: 'SPEAK_AUDIO', turn: STREAM_TURN }],
    ['transcribe', { type: 'TRANSCRIBE', request: transcribeRequest('busy', false) }],
  ] as Array<[string, SessionEvent]>)('busy with a %s: names it and says to interrupt', (what, event) => {
    const busy = busyWith(event);
    for (const type of ['SPEAK', 'CHAT', 'SPEAK_AUDIO', 'TRANSCRIBE'] as const) {
      expect(admitsRequest(busy, type)).toBe(false);
      expect(refusalDetail(busy, type)).toBe(`a previous ${what} is in flight (call interrupt first)`);
    }
  });

  it('the audio WebSocket connects while running, busy or not, and is told why not otherwise', () => {
    expect(audioStreamRefusal(idle)).toBeNull();
    expect(audioStreamRefusal(busyWith({ type: 'SPEAK', turn: SPEAK_TURN }))).toBeNull();
    expect(audioStreamRefusal(created)).toMatch(/not started/);
    expect(audioStreamRefusal(paused)).toMatch(/paused/);
    expect(audioStreamRefusal(terminated)).toBe('session is terminated');
  });
});
