/**
 * Hands-free turns in the session machine (real actor, recording stage actors): speech start → `hearing`
 * (status listening once), end of turn → recognition and the chat, barge-in as INTERRUPT then VOICE.START,
 * and a client's request during `hearing` going ahead.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { createActor, waitFor } from 'xstate';
import {
  isBusy,
  pipelineStageOf,
  sessionMachine,
  type SessionEmitted,
  type SessionSnapshot,
} from '../machines/session.machine.ts';
import {
  TEST_SESSION_INPUT,
  createRecordingActors,
  isClientEmitted,
  voiceRequest,
  type RecordingHooks,
  TURN_PLAYOUT,
} from './helpers/machine-events.ts';

const WAIT_MS = 1_000;

const hooks: RecordingHooks = {
  onStart(id, _input, sendBack) {
    if (id === 'llm') {
      sendBack({ type: 'LLM.SEGMENT', text: 'It is noon.' });
      sendBack({ type: 'LLM.DONE' });
    }
    if (id === 'asr') sendBack({ type: 'ASR.DONE', text: 'what time is it' });
  },
  onReceive(id, event, sendBack) {
    if (id === 'tts' && event.type === 'TEXT.SEGMENT') sendBack({ type: 'TTS.FIRST_AUDIO' });
    if (id === 'media' && event.type === 'FLUSH') sendBack({ type: 'MEDIA.FLUSHED' });
  },
};

const started: Array<{ stop: () => void }> = [];
afterEach(() => {
  for (const actor of started.splice(0)) actor.stop();
});

function startSession() {
  const recording = createRecordingActors(hooks);
  const actor = createActor(sessionMachine.provide({ actors: recording.actors }), { input: TEST_SESSION_INPUT });
  const emitted: SessionEmitted[] = [];
  actor.on('*', (event) => {
    if (isClientEmitted(event)) emitted.push(event);
  });
  actor.start();
  started.push(actor);
  actor.send({ type: 'START' });
  const statuses = () =>
    emitted.filter((event) => event.type === 'status').map((event) => (event as { stage: string }).stage);
  const until = (predicate: (snapshot: SessionSnapshot) => boolean) =>
    waitFor(actor, (s) => predicate(s as SessionSnapshot), { timeout: WAIT_MS });
  return { actor, recording, statuses, until };
}

describe('session machine: hands-free turns', () => {
  it('speech start → hearing (listening, not busy); end of turn → recognition → the chat turn; listening is said once', async () => {
    const { actor, recording, statuses, until } = startSession();
    expect(actor.getSnapshot().can({ type: 'VOICE.END', request: voiceRequest('v-1') })).toBe(false);
    actor.send({ type: 'VOICE.START' });
    const hearing = actor.getSnapshot();
    expect(hearing.matches({ running: 'hearing' })).toBe(true);
    expect(pipelineStageOf(hearing)).toBe('listening');
    expect(isBusy(hearing)).toBe(false);
    expect(recording.of('asr')).toEqual([]);
    actor.send({ type: 'VOICE.END', request: voiceRequest('v-1') });
    await until((s) => s.matches({ running: { turn: { phase: 'speaking' } } }));
    expect(statuses()).toEqual(['listening', 'thinking', 'speaking']);
    expect(recording.of('asr')[0].input).toMatchObject({ request: { id: 'v-1', source: 'voice', triggerChat: true } });
    expect(actor.getSnapshot().context.turn).toMatchObject({ id: 'v-1', mode: 'chat', text: 'what time is it' });
  });

  it('barge-in: INTERRUPT then VOICE.START while speaking → interrupted, idle, listening (hearing)', async () => {
    const { actor, statuses, until } = startSession();
    actor.send({ type: 'CHAT', turn: { id: 'c-1', playout: TURN_PLAYOUT, mode: 'chat', text: 'Tell me a story' } });
    await until((s) => s.matches({ running: { turn: { phase: 'speaking' } } }));
    expect(actor.getSnapshot().can({ type: 'VOICE.START' })).toBe(false);
    actor.send({ type: 'INTERRUPT' });
    expect(actor.getSnapshot().can({ type: 'VOICE.START' })).toBe(true);
    actor.send({ type: 'VOICE.START' });
    await until((s) => s.matches({ running: 'hearing' }));
    expect(statuses()).toEqual(['thinking', 'speaking', 'interrupted', 'idle', 'listening']);
  });

  it('a client request during hearing goes ahead and drops the user turn; VOICE.CANCEL returns to idle', async () => {
    const { actor, statuses, until } = startSession();
    actor.send({ type: 'VOICE.START' });
    actor.send({ type: 'VOICE.CANCEL' });
    expect(actor.getSnapshot().matches({ running: 'idle' })).toBe(true);
    actor.send({ type: 'VOICE.START' });
    actor.send({ type: 'CHAT', turn: { id: 'c-2', playout: TURN_PLAYOUT, mode: 'chat', text: 'Hello' } });
    await until((s) => s.matches({ running: { turn: { phase: 'speaking' } } }));
    expect(actor.getSnapshot().can({ type: 'VOICE.END', request: voiceRequest('late') })).toBe(false);
    expect(statuses()).toEqual(['listening', 'idle', 'listening', 'thinking', 'speaking']);
  });

  it('paused: voice events are refused', () => {
    const { actor } = startSession();
    actor.send({ type: 'PAUSE' });
    expect(actor.getSnapshot().can({ type: 'VOICE.START' })).toBe(false);
    expect(actor.getSnapshot().can({ type: 'VOICE.END', request: voiceRequest('p') })).toBe(false);
  });
});
