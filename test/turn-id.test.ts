import { Writable } from 'node:stream';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { json, post, startTestApp, type TestApp } from './helpers/app.ts';
import { openSession, tone, wavBytes, type LiveSession } from './helpers/conversation.ts';
import { startOpenAiUpstream, type OpenAiUpstream } from './fakes/openai-upstream.ts';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

describe('every turn has one id: the response, its SSE events, the logs and the session metrics', () => {
  let t: TestApp;
  let s: LiveSession;
  let upstream: OpenAiUpstream;
  const lines: Array<Record<string, unknown>> = [];

  beforeAll(async () => {
    upstream = await startOpenAiUpstream();
    const capture = new Writable({
      write(chunk, _encoding, done) {
        for (const line of String(chunk).split('\n')) if (line.trim()) lines.push(JSON.parse(line));
        done();
      },
    });
    t = await startTestApp({
      logger: pino({ level: 'info' }, capture),
      env: { SERVICE_LLM_BASE_URL: upstream.baseUrl, SERVICE_ASR_BASE_URL: upstream.baseUrl },
    });
    s = await openSession(t);
  }, 60_000);
  afterAll(async () => {
    s?.close();
    await t?.close();
    await upstream?.close();
  });

  /** The events from `from` on up to and including the turn's closing `status idle`. */
  async function turnEvents(from: number) {
    await s.sse.waitFor((e) => e.type === 'status' && e.data.stage === 'idle', 20_000, 'idle', from);
    const events = s.sse.events.slice(from);
    return events.slice(0, events.findIndex((e) => e.type === 'status' && e.data.stage === 'idle') + 1);
  }

  it('speak: X-Turn-Id header (empty body), every event of the turn carries it as turn_id, logs and metrics name it', async () => {
    const from = s.sse.events.length;
    const res = await post(t.baseUrl, `/sessions/${s.sessionId}/speak`, { text: 'Which turn is this?' });
    expect(res.status).toBe(200);
    expect(await res.text()).toBe('');
    const turnId = res.headers.get('x-turn-id');
    expect(turnId).toMatch(UUID);

    const events = await turnEvents(from);
    expect(events.map((e) => e.type)).toEqual(expect.arrayContaining(['status', 'tts', 'frame']));
    const untagged = events.filter((e) => e.data.turn_id !== turnId).map((e) => `${e.type} ${JSON.stringify(e.data)}`);
    expect(untagged).toEqual([]);

    const metrics = await json(await fetch(`${t.baseUrl}/sessions/${s.sessionId}/metrics`));
    expect(metrics.turns.at(-1)).toMatchObject({ turn_id: turnId, mode: 'speak', outcome: 'completed' });
    const logged = lines.filter((l) => l.turnId === turnId).map((l) => l.msg);
    expect(logged).toEqual(expect.arrayContaining(['turn started', 'turn finished']));
    expect(lines.find((l) => l.turnId === turnId && l.msg === 'turn finished')).toMatchObject({
      sessionId: s.sessionId,
      kind: 'speak',
      outcome: 'completed',
    });
  }, 40_000);

  it('an interrupted turn: the interrupted and idle statuses still name it; the next turn gets a new id', async () => {
    const from = s.sse.events.length;
    const res = await post(t.baseUrl, `/sessions/${s.sessionId}/speak`, {
      text: 'This long sentence will be cut off before it can finish, on purpose, by an interrupt.',
    });
    const turnId = res.headers.get('x-turn-id');
    await s.sse.waitFor((e) => e.type === 'status' && e.data.stage === 'speaking', 20_000, 'speaking', from);
    await post(t.baseUrl, `/sessions/${s.sessionId}/interrupt`);
    const events = await turnEvents(from);
    const closing = events.filter(
      (e) => e.type === 'status' && ['interrupted', 'idle'].includes(e.data.stage as string),
    );
    expect(closing.map((e) => [e.data.stage, e.data.turn_id])).toEqual([
      ['interrupted', turnId],
      ['idle', turnId],
    ]);
    const nextFrom = s.sse.events.length;
    const next = await post(t.baseUrl, `/sessions/${s.sessionId}/speak`, { text: 'Next.' });
    const nextTurn = next.headers.get('x-turn-id');
    expect(nextTurn).toMatch(UUID);
    expect(nextTurn).not.toBe(turnId);
    expect((await turnEvents(nextFrom)).filter((e) => e.data.turn_id !== nextTurn)).toEqual([]);
  }, 40_000);

  it('chat answers with X-Turn-Id; transcribe answers with turn_id in its body; their events carry it', async () => {
    let from = s.sse.events.length;
    const chat = await post(t.baseUrl, `/sessions/${s.sessionId}/chat`, { prompt: 'Say hello.' });
    expect(chat.status).toBe(200);
    const chatTurn = chat.headers.get('x-turn-id');
    expect(chatTurn).toMatch(UUID);
    const chatEvents = await turnEvents(from);
    expect(chatEvents.some((e) => e.type === 'llm')).toBe(true);
    expect(chatEvents.filter((e) => e.data.turn_id !== chatTurn).map((e) => e.type)).toEqual([]);

    from = s.sse.events.length;
    const form = new FormData();
    form.set('audio', new Blob([new Uint8Array(wavBytes(tone(16000, 600), 16000))], { type: 'audio/wav' }), 'a.wav');
    const transcribed = await fetch(`${t.baseUrl}/sessions/${s.sessionId}/transcribe`, { method: 'POST', body: form });
    expect(transcribed.status).toBe(200);
    const body = await json(transcribed);
    expect(body.turn_id).toMatch(UUID);
    await s.sse.waitFor((e) => e.type === 'transcript', 10_000, 'transcript', from);
    expect(s.sse.events.slice(from).find((e) => e.type === 'transcript')!.data.turn_id).toBe(body.turn_id);
  }, 40_000);
});
