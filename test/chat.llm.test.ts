import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { json, post, startTestApp, type TestApp } from './helpers/app.ts';
import {
  AUDIBLE_RMS,
  eventually,
  expectCausalOrder,
  labels,
  openSession,
  waitForSilence,
  type LiveSession,
} from './helpers/conversation.ts';
import { startOpenAiUpstream, type OpenAiUpstream } from './fakes/openai-upstream.ts';
import type { TtsProvider, TtsProviderId } from '../actors/tts/types.ts';
import { sessionParts } from '../src/sessions/session.ts';

/** A whole chat turn: LLM stream + builtin synthesis + real-time playout of a sentence or two. */
const TURN_MS = 20_000;
/** The spec promises idle within ~200 ms of an interrupt; allow scheduling slack on 2 shared cores. */
const INTERRUPT_SETTLE_MS = 1_500;
/** After an abort the upstream must see its socket close promptly (no orphaned generation). */
const UPSTREAM_CLOSE_MS = 1_000;

const REPLY = ['Hello', ' there', '.', ' I', ' am', ' your', ' talking', ' avatar', '.'];

describe('POST /sessions/{id}/chat through an OpenAI-compatible language model', () => {
  let upstream: OpenAiUpstream;
  let t: TestApp;
  let s: LiveSession;
  const chat = (body: Record<string, unknown>) => post(t.baseUrl, `/sessions/${s.sessionId}/chat`, body);
  const idleAfter = (from: number, timeout = TURN_MS) =>
    s.sse.waitFor((e) => e.type === 'status' && e.data.stage === 'idle', timeout, 'status idle', from);

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

  it('answers 409 before start and 404 for an unknown session', async () => {
    const fresh = await openSession(t, { start: false });
    try {
      const res = await post(t.baseUrl, `/sessions/${fresh.sessionId}/chat`, { prompt: 'hi' });
      expect(res.status).toBe(409);
      expect((await json(res)).detail).toMatch(/not started/);
    } finally {
      fresh.close();
      await fetch(`${t.baseUrl}/sessions/${fresh.sessionId}`, { method: 'DELETE' });
    }
    const missing = await post(t.baseUrl, '/sessions/00000000-0000-4000-8000-000000000000/chat', { prompt: 'hi' });
    expect(missing.status).toBe(404);
  });

  it('streams a reply: thinking → llm → tts start → first_audio → frames → idle, audible at the receiver, 409 on overlap', async () => {
    const from = s.sse.events.length;
    const requestsBefore = upstream.requests.length;
    const sentAt = performance.now();
    const res = await chat({ prompt: 'Say hello.' });
    expect(res.status).toBe(200);
    expect(await res.text()).toBe('');

    // One chat or speak in flight per session (spec 8).
    const overlapChat = await chat({ prompt: 'again' });
    expect(overlapChat.status).toBe(409);
    expect((await json(overlapChat)).detail).toMatch(/interrupt/);
    expect((await post(t.baseUrl, `/sessions/${s.sessionId}/speak`, { text: 'overlap' })).status).toBe(409);

    await s.peer.until(() => s.peer.firstAudible(sentAt, AUDIBLE_RMS) !== undefined, TURN_MS, 'audible chat reply');
    await idleAfter(from);

    const turn = s.sse.events.slice(from);
    const kinds = labels(turn);
    expectCausalOrder(kinds, ['status:thinking', 'llm', 'tts:start', 'tts:first_audio', 'frame']);
    expect(kinds).not.toContain('error');
    // The full reply is the concatenation of the deltas.
    expect(
      turn
        .filter((e) => e.type === 'llm')
        .map((e) => e.data.delta)
        .join(''),
    ).toBe(REPLY.join(''));

    // What reached the upstream: a streaming request with the system prompt and the user's prompt.
    const sent = upstream.requests.slice(requestsBefore).filter((r) => r.chat);
    expect(sent).toHaveLength(1);
    expect(sent[0].chat!.stream).toBe(true);
    expect(sent[0].chat!.model).toBe('fake-model');
    expect(sent[0].chat!.messages[0].role).toBe('system');
    expect(sent[0].chat!.messages.at(-1)).toEqual({ role: 'user', content: 'Say hello.' });
  });

  it('rejects chat while a speak is in flight', async () => {
    const from = s.sse.events.length;
    expect(
      (await post(t.baseUrl, `/sessions/${s.sessionId}/speak`, { text: 'I am speaking now, please wait.' })).status,
    ).toBe(200);
    expect((await chat({ prompt: 'hi' })).status).toBe(409);
    await idleAfter(from);
  });

  it('interrupt during a slow stream aborts the upstream request; the history keeps what was heard, marked interrupted', async () => {
    const spoken = 'Once upon a time there was a talking avatar.';
    upstream.setScenario({
      chat: {
        replyTokens: [spoken, ...Array.from({ length: 40 }, (_, i) => ` word${i}`)],
        firstTokenDelayMs: 0,
        tokenDelayMs: 150,
      },
    });
    const from = s.sse.events.length;
    const res = await chat({ prompt: 'Tell me a long story.' });
    expect(res.status).toBe(200);
    await s.sse.waitFor((e) => e.type === 'llm', 5_000, 'first delta', from);
    expect(upstream.openStreams()).toBe(1);
    // The first sentence is synthesised and starts playing; the words after it are streamed but never spoken.
    await s.sse.waitFor((e) => e.type === 'tts' && e.data.stage === 'first_audio', TURN_MS, 'first audio', from);
    await eventually(() => s.sse.events.slice(from).filter((e) => e.type === 'frame').length >= 5, 5_000);
    await eventually(() => s.sse.events.slice(from).filter((e) => e.type === 'llm').length >= 4, 5_000);

    const interruptAt = performance.now();
    expect(await json(await post(t.baseUrl, `/sessions/${s.sessionId}/interrupt`))).toEqual({ interrupted: true });
    await s.sse.waitFor(
      (e) => e.type === 'status' && e.data.stage === 'interrupted',
      INTERRUPT_SETTLE_MS,
      'interrupted',
      from,
    );
    const idle = await idleAfter(from, INTERRUPT_SETTLE_MS);
    expect(idle.at - interruptAt).toBeLessThan(INTERRUPT_SETTLE_MS);
    expect(await eventually(() => upstream.openStreams() === 0, UPSTREAM_CLOSE_MS)).toBe(true);

    // No more deltas once the turn was cut.
    const heard = s.sse.events.slice(from).filter((e) => e.type === 'llm' && e.at <= idle.at);
    const partial = heard.map((e) => e.data.delta).join('');
    await new Promise((r) => setTimeout(r, 400));
    expect(s.sse.events.slice(from).filter((e) => e.type === 'llm')).toHaveLength(heard.length);
    expect(partial.startsWith(`${spoken} word0`)).toBe(true);
    expect(partial.length).toBeLessThan(spoken.length + 40 * 7);

    // The next request carries what the listener heard of the interrupted reply: the sentence that played, not the streamed words.
    upstream.setScenario({ chat: { replyTokens: ['Okay.'], tokenDelayMs: 0 } });
    const next = s.sse.events.length;
    const requestsBefore = upstream.requests.length;
    expect((await chat({ prompt: 'Sorry, go on.' })).status).toBe(200);
    await idleAfter(next);
    const messages = upstream.requests.slice(requestsBefore).find((r) => r.chat)!.chat!.messages;
    expect(messages.at(-1)).toEqual({ role: 'user', content: 'Sorry, go on.' });
    expect(messages.at(-2)!.role).toBe('assistant');
    expect(messages.at(-2)!.content).toBe(`${spoken} [interrupted]`);
    expect(messages.at(-3)).toEqual({ role: 'user', content: 'Tell me a long story.' });
    await waitForSilence(s.peer, interruptAt, 3_000);
  });

  it('interrupt before the first token answers the waiting chat request without a 500', async () => {
    upstream.setScenario({ chat: { replyTokens: ['Late.'], firstTokenDelayMs: 3_000, tokenDelayMs: 0 } });
    const from = s.sse.events.length;
    const pending = chat({ prompt: 'Slow start?' });
    await s.sse.waitFor((e) => e.type === 'status' && e.data.stage === 'thinking', 5_000, 'thinking', from);
    await post(t.baseUrl, `/sessions/${s.sessionId}/interrupt`);
    const res = await pending;
    expect(res.status).toBe(409);
    expect((await json(res)).detail).toMatch(/interrupt/);
    await idleAfter(from, INTERRUPT_SETTLE_MS);
    expect(await eventually(() => upstream.openStreams() === 0, UPSTREAM_CLOSE_MS)).toBe(true);
    upstream.setScenario({ chat: { replyTokens: REPLY, firstTokenDelayMs: 0 } });
  });

  it('401 upstream → 502 with the upstream text; SSE error then idle', async () => {
    upstream.setScenario({ requiredApiKey: 'sk-the-right-key' });
    const from = s.sse.events.length;
    const res = await chat({ prompt: 'hi' });
    expect(res.status).toBe(502);
    expect((await json(res)).detail).toContain('Incorrect API key provided.');
    await idleAfter(from, 5_000);
    const kinds = labels(s.sse.events.slice(from));
    expect(kinds.indexOf('error')).toBeGreaterThanOrEqual(0);
    expect(kinds.indexOf('error')).toBeLessThan(kinds.lastIndexOf('status:idle'));
    expect(s.sse.events.slice(from).find((e) => e.type === 'error')!.data.code).toBe('llm_upstream_error');
    upstream.setScenario({ requiredApiKey: null });
  });

  it('mid-stream disconnect → SSE error then idle; the session stays usable', async () => {
    upstream.setScenario({ chat: { replyTokens: REPLY, disconnectAfterTokens: 2, tokenDelayMs: 20 } });
    const from = s.sse.events.length;
    expect((await chat({ prompt: 'hi' })).status).toBe(200);
    const error = await s.sse.waitFor((e) => e.type === 'error', 5_000, 'error', from);
    expect(error.data.code).toBe('llm_upstream_error');
    expect(error.data.message).toMatch(/mid-stream|before the reply was complete/);
    await idleAfter(from, 5_000);
    expect(labels(s.sse.events.slice(from)).at(-1)).toBe('status:idle');

    upstream.setScenario({ chat: { replyTokens: ['Fine again.'], disconnectAfterTokens: undefined, tokenDelayMs: 0 } });
    const again = s.sse.events.length;
    const sentAt = performance.now();
    expect((await chat({ prompt: 'still there?' })).status).toBe(200);
    await idleAfter(again);
    expect(labels(s.sse.events.slice(again))).not.toContain('error');
    expect(s.peer.firstAudible(sentAt, AUDIBLE_RMS)).toBeDefined();
  });

  it('per-request voice and tts_provider overrides apply to that request only; unknown values are 400', async () => {
    const live = t.services.supervisor.liveSession(s.sessionId)!;
    const realTts = sessionParts(live).stage.tts;
    const used: Array<{ provider: TtsProviderId; voice: string | null }> = [];
    sessionParts(live).stage.tts = (id: TtsProviderId): TtsProvider => {
      const provider = realTts(id);
      return {
        ...provider,
        synthesize: (request) => (
          used.push({ provider: id, voice: request.voice ?? null }),
          provider.synthesize(request)
        ),
      };
    };
    try {
      upstream.setScenario({ chat: { replyTokens: ['Hi.'] } });
      let from = s.sse.events.length;
      expect((await chat({ prompt: 'a', voice: 'en-US-GuyNeural', tts_provider: 'builtin' })).status).toBe(200);
      await idleAfter(from);
      expect(used.at(-1)).toEqual({ provider: 'builtin', voice: 'en-US-GuyNeural' });

      from = s.sse.events.length;
      expect((await chat({ prompt: 'b' })).status).toBe(200);
      await idleAfter(from);
      expect(used.at(-1)!.voice).toBe(live.record.tts_voice);
      expect(used.at(-1)!.voice).not.toBe('en-US-GuyNeural');
    } finally {
      sessionParts(live).stage.tts = realTts;
    }

    const unknownProvider = await chat({ prompt: 'c', tts_provider: 'no_such_provider' });
    expect(unknownProvider.status).toBe(400);
    expect((await json(unknownProvider)).detail).toMatch(/no_such_provider/);
    const unknownVoice = await chat({ prompt: 'c', voice: 'xx-XX-NobodyNeural' });
    expect(unknownVoice.status).toBe(400);
    expect(typeof (await json(unknownVoice)).detail).toBe('string');
  });
});

describe('chat without a language model', () => {
  it('answers 503 naming SERVICE_LLM_BASE_URL', async () => {
    const t = await startTestApp();
    const s = await openSession(t);
    try {
      const res = await post(t.baseUrl, `/sessions/${s.sessionId}/chat`, { prompt: 'hi' });
      expect(res.status).toBe(503);
      expect((await json(res)).detail).toContain('SERVICE_LLM_BASE_URL');
      // Still idle: a speak goes through.
      expect((await post(t.baseUrl, `/sessions/${s.sessionId}/speak`, { text: 'ok' })).status).toBe(200);
    } finally {
      s.close();
      await t.close();
    }
  });
});
