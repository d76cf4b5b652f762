import pino from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { createActor, waitFor } from 'xstate';
import { sessionMachine, type SessionEvent } from '../machines/session.machine.ts';
import { heardReply } from '../actors/llm/heard.ts';
import { createLlmActor } from '../actors/stage/llm.actor.ts';
import type { StageContext } from '../actors/stage/stage.ts';
import { ConversationHistory, INTERRUPTED_MARKER } from '../actors/llm/history.ts';
import type { LlmProvider } from '../actors/llm/types.ts';
import type { SessionMedia } from '../src/sessions/media.ts';
import { SessionBus } from '../src/sessions/session-bus.ts';
import { SessionMetrics } from '../src/sessions/metrics.ts';
import { TEST_SESSION_INPUT, TURN_PLAYOUT, createRecordingActors, recordingSettle } from './helpers/machine-events.ts';

/**
 * The chat history after a turn: the real llm actor inside the real machine, with a scripted language model
 * and a media clock that reports how much of the turn was played. The tts actor is a recorder; the test
 * plays its part by sending TTS.QUEUED for each segment, as the real one does once a segment's audio is queued.
 */

/** Scripted replies arrive within a few microtasks; this bound only stops a broken machine hanging. */
const WAIT_MS = 1_000;

const REPLY = ['First sentence. ', 'Second sentence. ', 'Third one.'];

/** A language model that streams `deltas` at once and then stays open until aborted when `hold` is set. */
function scriptedLlm(deltas: string[], hold = false): LlmProvider {
  return {
    id: 'scripted',
    status: () => ({ configured: true }),
    async *stream({ signal }) {
      for (const delta of deltas) yield delta;
      if (hold)
        await new Promise((_, reject) => signal.addEventListener('abort', () => reject(signal.reason), { once: true }));
    },
  };
}

const actors: Array<{ stop(): void }> = [];
afterEach(() => {
  for (const actor of actors.splice(0)) actor.stop();
});

function chatSession(llm: LlmProvider, playedMs: number) {
  const history = new ConversationHistory({ maxTurns: 12, maxChars: 12_000 });
  const ctx = {
    sessionId: TEST_SESSION_INPUT.sessionId,
    sampleRate: 16_000,
    logger: pino({ level: 'silent' }),
    events: new SessionBus(),
    media: { playedMsOf: () => playedMs } as unknown as SessionMedia,
    history,
    tts: () => {
      throw new Error('the recording tts actor synthesises nothing');
    },
    llm,
    asr: {} as StageContext['asr'],
    metrics: new SessionMetrics(),
    smoothAudio: (pcm: Int16Array) => pcm,
  } satisfies StageContext;
  const recording = createRecordingActors({
    onReceive(id, event, sendBack) {
      if (id === 'media' && event.type === 'FLUSH') sendBack({ type: 'MEDIA.FLUSHED' });
    },
  });
  const machine = sessionMachine.provide({ actors: { ...recording.actors, llm: createLlmActor(ctx) } });
  const actor = createActor(machine, { input: TEST_SESSION_INPUT });
  actors.push(actor);
  actor.start();
  actor.send({ type: 'START' });
  const send = (event: SessionEvent) => actor.send(event);
  const until = (predicate: Parameters<typeof waitFor<typeof actor>>[1]) =>
    waitFor(actor, predicate, { timeout: WAIT_MS });
  return { actor, history, recording, send, until };
}

/** Lets the machine forward the llm's segments, then reports each as queued with 1 s of audio. */
async function queueSegments(session: ReturnType<typeof chatSession>, count: number): Promise<string[]> {
  await waitFor(session.actor, () => (session.recording.of('tts')[0]?.received.length ?? 0) >= count, {
    timeout: WAIT_MS,
  });
  const texts = session.recording
    .of('tts')[0]
    .received.slice(0, count)
    .map((event) => event.text!);
  for (const text of texts) session.send({ type: 'TTS.QUEUED', text, durationMs: 1_000 });
  return texts;
}

describe('heardReply: a playback position mapped to the queued reply segments', () => {
  const queued = [
    { text: 'One.', durationMs: 800 },
    { text: 'Two.', durationMs: 1_200 },
    { text: 'Three.', durationMs: 500 },
  ];

  it.each([
    [0, ''],
    [1, 'One.'],
    [800, 'One.'],
    [801, 'One. Two.'],
    [2_000, 'One. Two.'],
    [2_001, 'One. Two. Three.'],
    [60_000, 'One. Two. Three.'],
  ])('after %i ms played the listener heard %j', (playedMs, heard) => {
    expect(heardReply(queued, playedMs)).toBe(heard);
  });

  it('text not queued for playout yet was never heard', () => {
    expect(heardReply([], 5_000)).toBe('');
  });
});

describe('chat history commit by the llm actor at the end of its turn', () => {
  it('a turn whose audio played to the end keeps the whole reply, not marked interrupted', async () => {
    const session = chatSession(scriptedLlm(REPLY), 0);
    session.send({
      type: 'CHAT',
      turn: { id: 'c-1', playout: TURN_PLAYOUT, mode: 'chat', text: 'Talk to me.', accepted: recordingSettle<void>() },
    });
    await queueSegments(session, 3);
    await waitFor(
      session.actor,
      () => session.recording.of('tts')[0].received.some((event) => event.type === 'TEXT.END'),
      { timeout: WAIT_MS },
    );
    // The llm finished long before the audio did: nothing is committed until the turn ends.
    expect(session.history.turns()).toEqual([]);
    session.send({ type: 'TTS.DONE' });
    expect(session.history.turns()).toEqual([{ user: 'Talk to me.', assistant: REPLY.join(''), interrupted: false }]);
  });

  it('interrupted after the llm finished: only the segments whose audio had started, marked interrupted', async () => {
    const session = chatSession(scriptedLlm(REPLY), 1_500);
    session.send({
      type: 'CHAT',
      turn: { id: 'c-2', playout: TURN_PLAYOUT, mode: 'chat', text: 'Tell me three things.' },
    });
    const [first, second] = await queueSegments(session, 3);
    await waitFor(
      session.actor,
      () => session.recording.of('tts')[0].received.some((event) => event.type === 'TEXT.END'),
      { timeout: WAIT_MS },
    );
    session.send({ type: 'INTERRUPT' });
    expect(session.history.turns()).toEqual([
      { user: 'Tell me three things.', assistant: `${first} ${second}`, interrupted: true },
    ]);
    expect(session.history.messagesFor('Go on.').at(-2)).toEqual({
      role: 'assistant',
      content: `First sentence. Second sentence.${INTERRUPTED_MARKER}`,
    });
  });

  it('interrupted while the llm still streams: what was heard, not what was streamed', async () => {
    const session = chatSession(scriptedLlm(REPLY, true), 400);
    const accepted = recordingSettle<void>();
    session.send({ type: 'CHAT', turn: { id: 'c-3', playout: TURN_PLAYOUT, mode: 'chat', text: 'Go.', accepted } });
    const [first] = await queueSegments(session, 2);
    session.send({ type: 'INTERRUPT' });
    expect(session.history.turns()).toEqual([{ user: 'Go.', assistant: first, interrupted: true }]);
    // The request waiting on the first delta was answered then, and nothing changes it afterwards.
    expect(accepted.settled[0]).toEqual({ value: undefined });
  });

  it('a pause cuts the turn like an interrupt; nothing played yet keeps an empty, interrupted reply', async () => {
    const session = chatSession(scriptedLlm(REPLY, true), 0);
    session.send({ type: 'CHAT', turn: { id: 'c-4', playout: TURN_PLAYOUT, mode: 'chat', text: 'Hello?' } });
    await queueSegments(session, 1);
    session.send({ type: 'PAUSE' });
    expect(session.history.turns()).toEqual([{ user: 'Hello?', assistant: '', interrupted: true }]);
  });

  it('cut before the first delta: the waiting request is refused with an AbortError and the history is unchanged', async () => {
    const session = chatSession(scriptedLlm([], true), 0);
    const accepted = recordingSettle<void>();
    session.send({ type: 'CHAT', turn: { id: 'c-5', playout: TURN_PLAYOUT, mode: 'chat', text: 'Anyone?', accepted } });
    session.send({ type: 'INTERRUPT' });
    expect(session.history.turns()).toEqual([]);
    expect((accepted.settled[0]?.error as Error | undefined)?.name).toBe('AbortError');
  });
});
