import { getShortestPaths } from '@xstate/graph';
import { describe, expect, it } from 'vitest';
import { createActor } from 'xstate';
import {
  sessionMachine,
  type SessionEmitted,
  type SessionEvent,
  type SessionSnapshot,
} from '../machines/session.machine.ts';
import {
  REPRESENTATIVE_EVENTS,
  STAGE_CHILD_IDS,
  TEST_SESSION_INPUT,
  createRecordingActors,
  runPure,
  runViolations,
  snapshotViolations,
  isClientEmitted,
} from './helpers/machine-events.ts';

/**
 * Model-based tests: @xstate/graph enumerates every (state value, context) reachable with the
 * representative event set; each shortest path, and each path extended by every event, is replayed on
 * a real actor whose stage actors record their lifecycle.
 */

const paths = getShortestPaths(sessionMachine, {
  input: TEST_SESSION_INPUT,
  events: [...REPRESENTATIVE_EVENTS],
});

/** The graph's first step is the synthetic `xstate.init`; the rest are the events to replay. */
function eventsOf(path: (typeof paths)[number]): SessionEvent[] {
  return path.steps
    .filter((step) => (step.event as { type: string }).type !== 'xstate.init')
    .map((step) => step.event as SessionEvent);
}

const describePath = (path: (typeof paths)[number]) =>
  `${JSON.stringify(path.state.value)} via [${eventsOf(path)
    .map((event) => event.type)
    .join(', ')}]`;

function stageIds(ids: Iterable<string>): string[] {
  return [...ids].filter((id) => (STAGE_CHILD_IDS as readonly string[]).includes(id)).sort();
}

interface Replay {
  snapshots: SessionSnapshot[];
  emittedPerStep: SessionEmitted[][];
  alivePerStep: string[][];
  actor: ReturnType<typeof createActor<typeof sessionMachine>>;
  recording: ReturnType<typeof createRecordingActors>;
}

/** Sends `events` to a real actor with recording stage actors; captures state after each send. */
function replayOnActor(events: readonly SessionEvent[]): Replay {
  const recording = createRecordingActors();
  const actor = createActor(sessionMachine.provide({ actors: recording.actors }), { input: TEST_SESSION_INPUT });
  const emitted: SessionEmitted[] = [];
  actor.on('*', (event) => {
    if (isClientEmitted(event)) emitted.push(event);
  });
  actor.start();
  const replay: Replay = { snapshots: [], emittedPerStep: [], alivePerStep: [], actor, recording };
  for (const event of events) {
    const before = emitted.length;
    if (actor.getSnapshot().status === 'active') actor.send(event);
    replay.snapshots.push(actor.getSnapshot() as SessionSnapshot);
    replay.emittedPerStep.push(emitted.slice(before));
    replay.alivePerStep.push(recording.alive());
  }
  return replay;
}

/** Real actor vs pure run, step by step, including which stage actors are really running. */
function expectReplayMatchesPure(events: readonly SessionEvent[]): Replay {
  const run = runPure(events);
  expect(runViolations(run)).toEqual([]);
  const replay = replayOnActor(events);
  try {
    run.steps.forEach((step, index) => {
      const real = replay.snapshots[index];
      const label = `step ${index} (${step.event.type})`;
      expect(real.value, label).toEqual(step.after.value);
      expect(real.status, label).toEqual(step.after.status);
      expect(real.context, label).toEqual(step.after.context);
      expect(snapshotViolations(real), label).toEqual([]);
      expect(replay.emittedPerStep[index], label).toEqual(step.emitted);
      // The stage actors whose cleanup has not run are exactly the snapshot's stage children.
      expect(stageIds(replay.alivePerStep[index]), label).toEqual(stageIds(Object.keys(step.after.children)));
      expect(replay.alivePerStep[index].includes('media'), label).toBe(real.status === 'active');
    });
  } finally {
    replay.actor.stop();
  }
  return replay;
}

describe('session machine: graph of reachable states', () => {
  it('reaches every documented state value', () => {
    const reached = paths.map((path) => path.state);
    const documented: Array<[string, (s: SessionSnapshot) => boolean]> = [
      ['created', (s) => s.matches('created')],
      ['running.idle', (s) => s.matches({ running: 'idle' })],
      ['running.listening', (s) => s.matches({ running: 'listening' })],
      ['running.turn.thinking', (s) => s.matches({ running: { turn: { phase: 'thinking' } } })],
      ['running.turn.speaking', (s) => s.matches({ running: { turn: { phase: 'speaking' } } })],
      ['running.interrupted', (s) => s.matches({ running: 'interrupted' })],
      ['paused', (s) => s.matches('paused')],
      ['terminated', (s) => s.matches('terminated') && s.status === 'done'],
    ];
    for (const [name, matches] of documented) {
      expect(
        reached.some((snapshot) => matches(snapshot as SessionSnapshot)),
        name,
      ).toBe(true);
    }
    // `running.error` is transient (eventless exit to idle), so no resting snapshot may sit in it.
    expect(reached.some((snapshot) => (snapshot as SessionSnapshot).matches({ running: 'error' }))).toBe(false);
  });

  it.each(paths.map((path) => [describePath(path), path] as const))(
    'shortest path to %s replays on a real actor',
    (_, path) => {
      const events = eventsOf(path);
      const replay = expectReplayMatchesPure(events);
      const last = replay.snapshots[replay.snapshots.length - 1] ?? (replay.actor.getSnapshot() as SessionSnapshot);
      expect(last.value).toEqual(path.state.value);
      expect(last.context).toEqual((path.state as SessionSnapshot).context);
    },
  );

  it('every representative event from every reachable state keeps the invariants on a real actor', () => {
    let edges = 0;
    for (const path of paths) {
      for (const event of REPRESENTATIVE_EVENTS) {
        expectReplayMatchesPure([...eventsOf(path), event]);
        edges++;
      }
    }
    expect(edges).toBe(paths.length * REPRESENTATIVE_EVENTS.length);
  });

  it('interrupting each busy state leads to interrupted, then idle on MEDIA.FLUSHED', () => {
    const busyPaths = paths.filter((path) => {
      const snapshot = path.state as SessionSnapshot;
      return snapshot.matches({ running: 'turn' }) || snapshot.matches({ running: 'listening' });
    });
    // speak/audio (preparing, speaking), chat (thinking, speaking, both text sub-states), listening.
    expect(busyPaths.length).toBeGreaterThanOrEqual(6);
    for (const path of busyPaths) {
      const replay = expectReplayMatchesPure([...eventsOf(path), { type: 'INTERRUPT' }, { type: 'MEDIA.FLUSHED' }]);
      const [interrupted, settled] = replay.snapshots.slice(-2);
      expect(interrupted.matches({ running: 'interrupted' }), describePath(path)).toBe(true);
      expect(settled.matches({ running: 'idle' }), describePath(path)).toBe(true);
      expect(replay.emittedPerStep.slice(-2).flat()).toEqual([
        { type: 'status', stage: 'interrupted' },
        { type: 'status', stage: 'idle' },
      ]);
      const media = replay.recording.of('media')[0];
      expect(media.received.filter((event) => event.type === 'FLUSH').length).toBeGreaterThanOrEqual(1);
      expect(replay.recording.records.filter((record) => record.id !== 'media').every((record) => record.stopped)).toBe(
        true,
      );
    }
  });
});
