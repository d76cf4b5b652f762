import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { json, makeAvatarBundle, post, startTestApp, tempDir, type TestApp } from './helpers/app.ts';
import { SseClient } from './helpers/sse.ts';
import { startOpenAiUpstream, type OpenAiUpstream } from './fakes/openai-upstream.ts';
import { toneTtsRegistry } from './fakes/tone-tts.ts';
import { SessionBus } from '../src/sessions/session-bus.ts';
import { TranscriptRecorder, type TranscriptTurn } from '../src/sessions/transcript.ts';
import { TurnPlayout } from '../actors/media/turn-playout.ts';

/** Every segment plays this long: an interrupt shortly after the first audio leaves the first sentence heard, only. */
const SEGMENT_MS = 3_000;
/** A turn of the tone TTS with playout in real time; generous for 2 busy cores. */
const TURN_MS = 20_000;
const REPLY = ['First sentence.', ' Second sentence.', ' Third sentence.'];

describe('GET /sessions/{id}/transcript', () => {
  let upstream: OpenAiUpstream;
  let t: TestApp;
  let dataDir: string;
  let avatarsDir: string;

  const start = () =>
    startTestApp({
      dataDir,
      avatarsDir,
      env: { SERVICE_LLM_BASE_URL: upstream.baseUrl, SERVICE_LLM_MODEL: 'fake-model' },
      overrides: { tts: toneTtsRegistry(SEGMENT_MS) },
    });

  beforeAll(async () => {
    upstream = await startOpenAiUpstream({ chat: { replyTokens: REPLY } });
    dataDir = await tempDir('transcript-data-');
    avatarsDir = await tempDir('transcript-avatars-');
    await makeAvatarBundle(avatarsDir, 'card');
    t = await start();
  });

  afterAll(async () => {
    await t?.close();
    await upstream?.close();
  });

  it('lists the turns in order with user and assistant text, and the heard text of the interrupted one; kept after termination and a restart', async () => {
    const id = (await json(await post(t.baseUrl, '/sessions', { avatar_id: 'card', model: 'mock' })))
      .session_id as string;
    expect((await post(t.baseUrl, `/sessions/${id}/start`)).status).toBe(200);
    const sse = await SseClient.open(`${t.baseUrl}/sessions/${id}/events`);
    try {
      const idleAfter = (from: number) =>
        sse.waitFor((e) => e.type === 'status' && e.data.stage === 'idle', TURN_MS, 'status idle', from);

      let from = sse.events.length;
      expect((await post(t.baseUrl, `/sessions/${id}/speak`, { text: 'Hello there.' })).status).toBe(200);
      await idleAfter(from);

      from = sse.events.length;
      expect((await post(t.baseUrl, `/sessions/${id}/chat`, { prompt: 'Tell me three things.' })).status).toBe(200);
      await sse.waitFor(
        (e) => e.type === 'tts' && e.data.stage === 'first_audio',
        TURN_MS,
        'first audio of the reply',
        from,
      );
      // The first sentence is playing (it plays for SEGMENT_MS); the model's whole reply has streamed.
      await sse.waitFor((e) => e.type === 'llm' && e.data.delta === REPLY.at(-1), TURN_MS, 'the last delta', from);
      await new Promise((resolve) => setTimeout(resolve, 300));
      expect((await post(t.baseUrl, `/sessions/${id}/interrupt`)).status).toBe(200);
      await idleAfter(from);

      const live = await json(await fetch(`${t.baseUrl}/sessions/${id}/transcript`));
      expect(live.session_id).toBe(id);
      expect(live.turns).toHaveLength(2);
      const [speak, chat] = live.turns as TranscriptTurn[];
      expect(speak).toMatchObject({
        kind: 'speak',
        user_text: null,
        assistant_text: 'Hello there.',
        heard_text: 'Hello there.',
        outcome: 'completed',
        tool_calls: [],
      });
      expect(chat).toMatchObject({
        kind: 'chat',
        user_text: 'Tell me three things.',
        assistant_text: REPLY.join(''),
        outcome: 'interrupted',
        tool_calls: [],
      });
      expect(chat.heard_text?.trim()).toBe('First sentence.');
      for (const turn of [speak, chat]) {
        expect(turn.turn_id).toMatch(/^[0-9a-f-]{36}$/u);
        expect(Date.parse(turn.ended_at)).toBeGreaterThanOrEqual(Date.parse(turn.started_at));
      }
      expect(Date.parse(chat.started_at)).toBeGreaterThanOrEqual(Date.parse(speak.ended_at));

      await expectPages(id, live.turns);

      expect((await fetch(`${t.baseUrl}/sessions/${id}`, { method: 'DELETE' })).status).toBe(200);
      expect(await json(await fetch(`${t.baseUrl}/sessions/${id}/transcript`))).toEqual(live);
      await expectPages(id, live.turns);

      // The tombstone and the transcript survive a restart together.
      await t.close();
      t = await start();
      expect(await json(await fetch(`${t.baseUrl}/sessions/${id}/transcript`))).toEqual(live);
      await expectPages(id, live.turns);
    } finally {
      sse.close();
    }
  });

  /** `limit`/`after` page through the same turns; a bad page is 400 {detail}. */
  async function expectPages(id: string, turns: TranscriptTurn[]): Promise<void> {
    const page = async (query: string) => {
      const res = await fetch(`${t.baseUrl}/sessions/${id}/transcript?${query}`);
      return { status: res.status, body: await json(res) };
    };
    expect((await page('limit=1')).body).toEqual({ session_id: id, turns: [turns[0]] });
    expect((await page(`limit=1&after=${turns[0].turn_id}`)).body).toEqual({ session_id: id, turns: [turns[1]] });
    expect((await page(`after=${turns[1].turn_id}`)).body).toEqual({ session_id: id, turns: [] });
    for (const bad of ['after=not-a-turn', 'limit=0', 'limit=201', 'limit=x']) {
      const answer = await page(bad);
      expect(answer.status, bad).toBe(400);
      expect(answer.body.detail, bad).toEqual(expect.any(String));
    }
  }

  it('a session without turns has an empty transcript; an unknown session is 404 {detail}', async () => {
    const id = (await json(await post(t.baseUrl, '/sessions', { avatar_id: 'card', model: 'mock' })))
      .session_id as string;
    expect(await json(await fetch(`${t.baseUrl}/sessions/${id}/transcript`))).toEqual({ session_id: id, turns: [] });
    const missing = await fetch(`${t.baseUrl}/sessions/00000000-0000-4000-8000-000000000000/transcript`);
    expect(missing.status).toBe(404);
    expect((await json(missing)).detail).toEqual(expect.any(String));
  });

  it('is forgotten with the tombstone', async () => {
    const short = await startTestApp({
      avatarsDir,
      env: { SERVICE_SESSION_TOMBSTONE_MS: '0' },
      overrides: { tts: toneTtsRegistry(100) },
    });
    try {
      const id = (await json(await post(short.baseUrl, '/sessions', { avatar_id: 'card', model: 'mock' })))
        .session_id as string;
      await fetch(`${short.baseUrl}/sessions/${id}`, { method: 'DELETE' });
      await short.close();
      const again = await startTestApp({
        dataDir: short.dataDir,
        avatarsDir,
        overrides: { tts: toneTtsRegistry(100) },
      });
      try {
        expect((await fetch(`${again.baseUrl}/sessions/${id}/transcript`)).status).toBe(404);
        expect(await again.services.store.sublevel('transcript-index').get(id)).toBeUndefined();
      } finally {
        await again.close();
      }
    } finally {
      await short.close();
    }
  });
});

describe('TranscriptRecorder on a session bus', () => {
  function recorder() {
    const bus = new SessionBus();
    const finished: TranscriptTurn[] = [];
    const rec = new TranscriptRecorder(bus, { playedMsOf: () => 0 }, (turn) => finished.push(turn));
    return { bus, rec, finished };
  }

  it("records a turn's tool calls from the chat loop's tool_call events and their results", () => {
    const { bus, finished } = recorder();
    bus.emit('turn.started', { turnId: 't1', kind: 'chat', text: 'Weather?', playout: new TurnPlayout() });
    bus.publish('tool_call', { turn_id: 't1', call_id: 'c1', name: 'get_weather', arguments: { city: 'Oslo' } });
    bus.publish('tool_call', { turn_id: 't1', call_id: 'c2', name: 'get_time', arguments: {} });
    bus.emit('tool.result', { turnId: 't1', callId: 'c1', name: 'get_weather', ok: true });
    bus.emit('tool.result', { turnId: 't1', callId: 'c2', name: 'get_time', ok: false });
    bus.publish('llm', { delta: 'Sunny.' });
    bus.emit('turn.finished', { turnId: 't1', kind: 'chat', outcome: 'completed' });
    expect(finished).toHaveLength(1);
    expect(finished[0]).toMatchObject({
      user_text: 'Weather?',
      assistant_text: 'Sunny.',
      heard_text: 'Sunny.',
      tool_calls: [
        { call_id: 'c1', name: 'get_weather', arguments: { city: 'Oslo' }, ok: true },
        { call_id: 'c2', name: 'get_time', arguments: {}, ok: false },
      ],
    });
  });

  it('a voice turn takes its user text from the final transcript; a turn cut by termination is interrupted', () => {
    const { bus, finished } = recorder();
    bus.emit('turn.started', { turnId: 'v1', kind: 'voice', playout: new TurnPlayout() });
    bus.publish('transcript', { text: 'hel', is_final: false });
    bus.publish('transcript', { text: 'hello avatar', is_final: true });
    bus.publish('llm', { delta: 'Hi!' });
    bus.emit('turn.finished', { turnId: 'v1', kind: 'voice', outcome: 'terminated' });
    expect(finished[0]).toMatchObject({
      kind: 'voice',
      user_text: 'hello avatar',
      assistant_text: 'Hi!',
      heard_text: '',
      outcome: 'interrupted',
    });
  });
});
