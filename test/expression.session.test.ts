import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { json, post, startTestApp, type TestApp } from './helpers/app.ts';
import { openSession, type LiveSession } from './helpers/conversation.ts';
import { startOpenAiUpstream, type OpenAiUpstream } from './fakes/openai-upstream.ts';
import { sessionParts } from '../src/sessions/session.ts';

/** A whole chat turn: LLM stream + builtin synthesis + real-time playout of two short sentences. */
const TURN_MS = 20_000;
/** The reply streams its tags split across tokens, as a model's tokenizer cuts them. */
const REPLY = ['[sm', 'ile] Hello', ' there. [surp', 'rise 0.', '5]Really', '?'];
const SPOKEN = 'Hello there. Really?';

describe('expressions in a live session', () => {
  let upstream: OpenAiUpstream;
  let t: TestApp;
  let s: LiveSession;
  const express = (sessionId: string, body: unknown) =>
    t.app.inject({ method: 'POST', url: `/sessions/${sessionId}/expression`, payload: body as object });

  beforeAll(async () => {
    upstream = await startOpenAiUpstream({ chat: { replyTokens: REPLY } });
    t = await startTestApp({ env: { SERVICE_LLM_BASE_URL: upstream.baseUrl, SERVICE_LLM_MODEL: 'fake-model' } });
    s = await openSession(t);
  });

  afterAll(async () => {
    s?.close();
    await t?.close();
    await upstream?.close();
  });

  it('POST /expression shows it from now on the media clock and publishes SSE expression', async () => {
    const from = s.sse.events.length;
    const res = await express(s.sessionId, { name: 'surprise', intensity: 0.7, duration_ms: 800 });
    expect(res.statusCode).toBe(200);
    const cue = res.json();
    expect(cue).toMatchObject({ name: 'surprise', intensity: 0.7, duration_ms: 800 });
    expect(cue.start_ms).toBeGreaterThan(0);
    const event = await s.sse.waitFor((e) => e.type === 'expression', 5_000, 'expression event', from);
    expect(event.data).toMatchObject({
      name: 'surprise',
      intensity: 0.7,
      duration_ms: 800,
      source: 'api',
      start_ms: cue.start_ms,
    });
    expect((await express(s.sessionId, { name: 'smile' })).json()).toMatchObject({ intensity: 1, duration_ms: null });
  });

  it.each([
    ['an unknown name', { name: 'wink' }],
    ['no name', { intensity: 0.5 }],
    ['intensity above 1', { name: 'smile', intensity: 1.01 }],
    ['intensity below 0', { name: 'smile', intensity: -0.1 }],
    ['intensity not a number', { name: 'smile', intensity: 'high' }],
    ['a duration of 0', { name: 'smile', duration_ms: 0 }],
    ['an unknown field', { name: 'smile', mood: 'sunny' }],
  ])('400 {detail} for %s', async (_, body) => {
    const res = await express(s.sessionId, body);
    expect(res.statusCode).toBe(400);
    expect(typeof res.json().detail).toBe('string');
  });

  it('404 for an unknown session, 409 on a terminated one', async () => {
    expect((await express('00000000-0000-4000-8000-000000000000', { name: 'smile' })).statusCode).toBe(404);
    const created = await json(await post(t.baseUrl, '/sessions', { avatar_id: 'demo-rt', model: 'rt' }));
    expect((await express(created.session_id, { name: 'smile' })).statusCode).toBe(200);
    expect((await fetch(`${t.baseUrl}/sessions/${created.session_id}`, { method: 'DELETE' })).status).toBeLessThan(300);
    const refused = await express(created.session_id, { name: 'smile' });
    expect(refused.statusCode).toBe(409);
    expect(refused.json().detail).toMatch(/terminated/);
  });

  it('motion: 0–1 on create and customize (kept in the record); outside it, or not a number, is a 400', async () => {
    for (const motion of [1.5, -0.01, 'still']) {
      const res = await t.app.inject({
        method: 'POST',
        url: '/sessions',
        payload: { avatar_id: 'demo-rt', model: 'rt', motion },
      });
      expect(res.statusCode).toBe(400);
      expect(typeof res.json().detail).toBe('string');
      const patch = await t.app.inject({
        method: 'POST',
        url: `/sessions/${s.sessionId}/customize`,
        payload: { motion },
      });
      expect(patch.statusCode).toBe(400);
    }
    const created = await t.app.inject({
      method: 'POST',
      url: '/sessions',
      payload: { avatar_id: 'demo-rt', model: 'rt', motion: 0 },
    });
    expect(created.statusCode).toBe(200);
    const id = created.json().session_id;
    expect((await t.services.supervisor.requireSession(id)).record.motion).toBe(0);
    expect(
      (await t.app.inject({ method: 'POST', url: `/sessions/${id}/customize`, payload: { motion: 0.5 } })).statusCode,
    ).toBe(200);
    expect((await t.services.supervisor.requireSession(id)).record.motion).toBe(0.5);
    await t.app.inject({ method: 'DELETE', url: `/sessions/${id}` });
  });

  it('a reply with tags split across tokens speaks without them; SSE, captions, transcript and history keep no tag; each tag starts with its sentence', async () => {
    const session = await t.services.supervisor.requireSession(s.sessionId);
    const spoken: string[] = [];
    const durations: number[] = [];
    const off = sessionParts(session).bus.on('tts.queued', ({ text, durationMs }) => {
      spoken.push(text);
      durations.push(durationMs);
    });
    const from = s.sse.events.length;
    try {
      expect((await post(t.baseUrl, `/sessions/${s.sessionId}/chat`, { prompt: 'Greet me.' })).status).toBe(200);
      await s.sse.waitFor((e) => e.type === 'status' && e.data.stage === 'idle', TURN_MS, 'status idle', from);
    } finally {
      off();
    }
    const turn = s.sse.events.slice(from);
    const replyText = turn
      .filter((e) => e.type === 'llm')
      .map((e) => e.data.delta)
      .join('');
    expect(replyText).toBe(SPOKEN);
    expect(spoken.join(' ')).toBe(SPOKEN);
    const expressions = turn.filter((e) => e.type === 'expression').map((e) => e.data);
    expect(expressions).toMatchObject([
      { name: 'smile', intensity: 1, source: 'llm' },
      { name: 'surprise', intensity: 0.5, source: 'llm' },
    ]);
    // Each tag starts as the sentence it was written in starts to play, not when the model wrote it (the stream is
    // done long before "Really?" plays): the second cue lies one first sentence's audio after the first.
    expect(durations[0]).toBeGreaterThan(300);
    expect(Math.abs(expressions[1].start_ms - expressions[0].start_ms - durations[0])).toBeLessThanOrEqual(2);
    const captions = turn.filter((e) => e.type === 'caption').map((e) => e.data);
    expect(captions.map((c) => c.text)).toEqual(['Hello there.', 'Really?']);

    const transcript = await json(await fetch(`${t.baseUrl}/sessions/${s.sessionId}/transcript`));
    const last = transcript.turns.at(-1);
    expect(last.assistant_text).toBe(SPOKEN);
    expect(last.heard_text).toBe(SPOKEN);
    expect(last.expressions).toMatchObject([
      { name: 'smile', source: 'llm' },
      { name: 'surprise', intensity: 0.5, source: 'llm' },
    ]);

    // The next request's history holds the reply as spoken.
    expect((await post(t.baseUrl, `/sessions/${s.sessionId}/chat`, { prompt: 'Again.' })).status).toBe(200);
    await s.sse.waitFor(
      (e) => e.type === 'status' && e.data.stage === 'idle',
      TURN_MS,
      'status idle',
      s.sse.events.length,
    );
    const history = upstream.requests.filter((r) => r.chat).at(-1)!.chat!.messages;
    expect(history.find((m) => m.role === 'assistant')?.content).toBe(SPOKEN);
  });
});
