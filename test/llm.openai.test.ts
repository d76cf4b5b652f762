import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { ConversationHistory, INTERRUPTED_MARKER } from '../actors/llm/history.ts';
import { createOpenAiLlm } from '../actors/llm/providers/openai.ts';
import { SseDataDecoder } from '../actors/upstream/sse.ts';
import type { ChatMessage } from '../actors/llm/types.ts';
import { ProviderNotConfiguredError, UpstreamError } from '../actors/upstream/errors.ts';
import { startOpenAiUpstream, type OpenAiUpstream } from './fakes/openai-upstream.ts';
import { caught } from './helpers/caught.ts';

/** How long a closed client may take to be seen as closed by the server (socket teardown is async). */
const UPSTREAM_CLOSE_WAIT_MS = 1_000;
/** "Promptly" for an abort: far below the 4 s the scripted stream would still run, with slack for a loaded CI box. */
const ABORT_REACTION_MAX_MS = 250;
const MESSAGES: ChatMessage[] = [{ role: 'user', content: 'Say hello' }];

async function collect(iterable: AsyncIterable<string>): Promise<string[]> {
  const deltas: string[] = [];
  for await (const delta of iterable) deltas.push(delta);
  return deltas;
}

async function waitFor(condition: () => boolean, timeoutMs: number): Promise<number> {
  const started = performance.now();
  while (!condition()) {
    if (performance.now() - started > timeoutMs) throw new Error(`condition not met within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  return performance.now() - started;
}

let upstream: OpenAiUpstream;

beforeAll(async () => {
  upstream = await startOpenAiUpstream();
});
afterAll(async () => {
  await upstream.close();
});
beforeEach(() => {
  upstream.requests.length = 0;
  upstream.setScenario({
    chat: {
      replyTokens: ['Hello', ' there', '!'],
      firstTokenDelayMs: 0,
      tokenDelayMs: 0,
      failStatus: undefined,
      disconnectAfterTokens: undefined,
    },
    requiredApiKey: null,
  });
});

describe('OpenAI-compatible LLM provider', () => {
  it('streams the deltas in order and sends the chat-completions request shape', async () => {
    const tokens = ['Once', ' upon', ' a', ' time', ',', ' ünïcödé 🙂', '.'];
    upstream.setScenario({ chat: { replyTokens: tokens, tokenDelayMs: 2 } });
    const llm = createOpenAiLlm({ baseUrl: upstream.baseUrl, model: 'llama3.2:1b' });

    const deltas = await collect(llm.stream({ messages: MESSAGES, signal: new AbortController().signal }));

    expect(deltas).toEqual(tokens);
    const [request] = upstream.requests;
    expect(request.path).toBe('/v1/chat/completions');
    expect(request.chat?.model).toBe('llama3.2:1b');
    expect(request.chat?.stream).toBe(true);
    expect(request.chat?.messages).toEqual(MESSAGES);
    expect(request.headers.authorization).toBeUndefined();
  });

  it('sends the bearer key only when one is configured, and the per-request model wins', async () => {
    upstream.setScenario({ requiredApiKey: 'sk-test-123' });
    const llm = createOpenAiLlm({ baseUrl: `${upstream.baseUrl}/`, apiKey: 'sk-test-123', model: 'configured' });
    const deltas = await collect(
      llm.stream({ messages: MESSAGES, model: 'override', signal: new AbortController().signal }),
    );
    expect(deltas.join('')).toBe('Hello there!');
    expect(upstream.requests[0].headers.authorization).toBe('Bearer sk-test-123');
    expect(upstream.requests[0].chat?.model).toBe('override');
  });

  it('waits for a slow first token (time-to-first-token is honoured, not timed out)', async () => {
    upstream.setScenario({ chat: { firstTokenDelayMs: 400 } });
    const llm = createOpenAiLlm({ baseUrl: upstream.baseUrl, firstTokenTimeoutMs: 2_000 });
    const started = performance.now();
    let firstDeltaAtMs = -1;
    const deltas: string[] = [];
    for await (const delta of llm.stream({ messages: MESSAGES, signal: new AbortController().signal })) {
      if (firstDeltaAtMs < 0) firstDeltaAtMs = performance.now() - started;
      deltas.push(delta);
    }
    expect(deltas.join('')).toBe('Hello there!');
    expect(firstDeltaAtMs).toBeGreaterThanOrEqual(380);
  });

  it('gives up with UpstreamError when the first token misses its deadline, and closes the stream', async () => {
    upstream.setScenario({ chat: { firstTokenDelayMs: 5_000 } });
    const llm = createOpenAiLlm({ baseUrl: upstream.baseUrl, firstTokenTimeoutMs: 150 });
    const started = performance.now();
    const error = await caught(collect(llm.stream({ messages: MESSAGES, signal: new AbortController().signal })));
    expect(error).toBeInstanceOf(UpstreamError);
    expect((error as Error).message).toMatch(/timed out: no first token within 150 ms/);
    expect(performance.now() - started).toBeLessThan(1_000);
    await waitFor(() => upstream.openStreams() === 0, UPSTREAM_CLOSE_WAIT_MS);
  });

  it('gives up with UpstreamError when the stream goes idle between tokens', async () => {
    upstream.setScenario({ chat: { tokenDelayMs: 5_000 } });
    const llm = createOpenAiLlm({ baseUrl: upstream.baseUrl, idleTimeoutMs: 150 });
    const deltas: string[] = [];
    const error = await caught(
      (async () => {
        for await (const delta of llm.stream({ messages: MESSAGES, signal: new AbortController().signal }))
          deltas.push(delta);
      })(),
    );
    expect(deltas).toEqual(['Hello']);
    expect(error).toBeInstanceOf(UpstreamError);
    expect((error as Error).message).toMatch(/no stream data within 150 ms/);
  });

  it('does not count time the consumer spends on a delta as upstream idleness', async () => {
    upstream.setScenario({ chat: { tokenDelayMs: 0 } });
    const llm = createOpenAiLlm({ baseUrl: upstream.baseUrl, idleTimeoutMs: 100 });
    const deltas: string[] = [];
    for await (const delta of llm.stream({ messages: MESSAGES, signal: new AbortController().signal })) {
      deltas.push(delta);
      await new Promise((resolve) => setTimeout(resolve, 250));
    }
    expect(deltas.join('')).toBe('Hello there!');
  });

  it('turns a 401 into UpstreamError carrying the upstream status and text', async () => {
    upstream.setScenario({ requiredApiKey: 'sk-right' });
    const llm = createOpenAiLlm({ baseUrl: upstream.baseUrl, apiKey: 'sk-wrong' });
    const error = await caught(collect(llm.stream({ messages: MESSAGES, signal: new AbortController().signal })));
    expect(error).toBeInstanceOf(UpstreamError);
    expect((error as UpstreamError).upstreamStatus).toBe(401);
    expect((error as Error).message).toContain('Incorrect API key provided.');
    expect((error as Error).message).toContain('401');
  });

  it('turns a 500 into UpstreamError with status 500', async () => {
    upstream.setScenario({ chat: { failStatus: 500, failMessage: 'model crashed: out of memory' } });
    const llm = createOpenAiLlm({ baseUrl: upstream.baseUrl });
    const error = await caught(collect(llm.stream({ messages: MESSAGES, signal: new AbortController().signal })));
    expect(error).toBeInstanceOf(UpstreamError);
    expect((error as UpstreamError).upstreamStatus).toBe(500);
    expect((error as Error).message).toContain('model crashed: out of memory');
  });

  it('turns a mid-stream disconnect into UpstreamError after the deltas already received', async () => {
    upstream.setScenario({ chat: { replyTokens: ['a', 'b', 'c', 'd'], disconnectAfterTokens: 2, tokenDelayMs: 5 } });
    const llm = createOpenAiLlm({ baseUrl: upstream.baseUrl });
    const deltas: string[] = [];
    const error = await caught(
      (async () => {
        for await (const delta of llm.stream({ messages: MESSAGES, signal: new AbortController().signal }))
          deltas.push(delta);
      })(),
    );
    expect(deltas).toEqual(['a', 'b']);
    expect(error).toBeInstanceOf(UpstreamError);
    expect((error as Error).message).toMatch(/connection lost mid-stream|closed the stream/);
  });

  it('rethrows AbortError promptly on abort and closes the upstream stream', async () => {
    upstream.setScenario({ chat: { replyTokens: Array.from({ length: 200 }, (_, i) => `t${i} `), tokenDelayMs: 20 } });
    const llm = createOpenAiLlm({ baseUrl: upstream.baseUrl });
    const controller = new AbortController();
    const deltas: string[] = [];
    let abortedAt = 0;
    const error = await caught(
      (async () => {
        for await (const delta of llm.stream({ messages: MESSAGES, signal: controller.signal })) {
          deltas.push(delta);
          if (deltas.length === 3) {
            // Abort while the next read is pending, as an interrupt would.
            setTimeout(() => {
              abortedAt = performance.now();
              controller.abort();
            }, 5);
          }
        }
      })(),
    );
    const rejectedAfterMs = performance.now() - abortedAt;
    expect((error as Error).name).toBe('AbortError');
    expect(rejectedAfterMs).toBeLessThan(ABORT_REACTION_MAX_MS);
    expect(deltas.length).toBeGreaterThanOrEqual(3);
    expect(deltas.length).toBeLessThan(10);
    await waitFor(() => upstream.openStreams() === 0, UPSTREAM_CLOSE_WAIT_MS);
  });

  it('closes the upstream stream when the consumer stops iterating early', async () => {
    upstream.setScenario({ chat: { replyTokens: Array.from({ length: 200 }, (_, i) => `t${i} `), tokenDelayMs: 20 } });
    const llm = createOpenAiLlm({ baseUrl: upstream.baseUrl });
    for await (const delta of llm.stream({ messages: MESSAGES, signal: new AbortController().signal })) {
      expect(delta).toBe('t0 ');
      break;
    }
    await waitFor(() => upstream.openStreams() === 0, UPSTREAM_CLOSE_WAIT_MS);
  });

  it('throws AbortError without contacting the upstream when already aborted', async () => {
    const llm = createOpenAiLlm({ baseUrl: upstream.baseUrl });
    const controller = new AbortController();
    controller.abort();
    const error = await caught(collect(llm.stream({ messages: MESSAGES, signal: controller.signal })));
    expect((error as Error).name).toBe('AbortError');
    expect(upstream.requests).toHaveLength(0);
  });

  it('reports a refused connection as UpstreamError', async () => {
    const closed = await startOpenAiUpstream();
    const baseUrl = closed.baseUrl;
    await closed.close();
    const llm = createOpenAiLlm({ baseUrl });
    const error = await caught(collect(llm.stream({ messages: MESSAGES, signal: new AbortController().signal })));
    expect(error).toBeInstanceOf(UpstreamError);
    expect((error as Error).message).toMatch(/ECONNREFUSED/);
  });

  it('is not configured without a base URL and says which variable to set', async () => {
    const llm = createOpenAiLlm({});
    expect(llm.status()).toEqual({ configured: false, reason: 'set SERVICE_LLM_BASE_URL' });
    const error = await caught(collect(llm.stream({ messages: MESSAGES, signal: new AbortController().signal })));
    expect(error).toBeInstanceOf(ProviderNotConfiguredError);
    expect(createOpenAiLlm({ baseUrl: upstream.baseUrl }).status()).toEqual({ configured: true });
  });
});

describe('SSE decoding', () => {
  it('yields the same payloads however the byte stream is split', () => {
    const payloads = ['{"a":1}', '{"b":"x: y"}', '[DONE]'];
    const wire = `: keep-alive\r\n\r\n${payloads.map((p) => `data: ${p}\r\n\r\n`).join('')}`;
    fc.assert(
      fc.property(fc.array(fc.integer({ min: 0, max: wire.length }), { maxLength: 8 }), (cuts) => {
        const points = [...new Set(cuts)].sort((a, b) => a - b);
        const decoder = new SseDataDecoder();
        const out: string[] = [];
        let previous = 0;
        for (const point of [...points, wire.length]) {
          out.push(...decoder.push(wire.slice(previous, point)));
          previous = point;
        }
        out.push(...decoder.flush());
        expect(out).toEqual(payloads);
      }),
    );
  });
});

describe('ConversationHistory', () => {
  it('builds system + past turns + new prompt, oldest first', () => {
    const history = new ConversationHistory({ maxTurns: 10, maxChars: 10_000, systemPrompt: 'Be brief.' });
    history.commit('hi', 'hello!', { interrupted: false });
    expect(history.messagesFor('how are you?')).toEqual([
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'hi' },
      { role: 'assistant', content: 'hello!' },
      { role: 'user', content: 'how are you?' },
    ]);
  });

  it('keeps an interrupted partial reply, marked, and keeps roles alternating when it is empty', () => {
    const history = new ConversationHistory({ maxTurns: 10, maxChars: 10_000 });
    history.commit('tell me a story', 'Once upon a', { interrupted: true });
    history.commit('stop', '', { interrupted: true });
    const messages = history.messagesFor('next');
    expect(messages[1]).toEqual({ role: 'assistant', content: `Once upon a${INTERRUPTED_MARKER}` });
    expect(messages[3]).toEqual({ role: 'assistant', content: INTERRUPTED_MARKER.trim() });
    expect(history.turns()[0].interrupted).toBe(true);
  });

  it('never exceeds its turn and character bounds, dropping the oldest turns first', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 6 }),
        fc.integer({ min: 0, max: 400 }),
        fc.array(fc.tuple(fc.string({ maxLength: 60 }), fc.string({ maxLength: 60 }), fc.boolean()), { maxLength: 30 }),
        (maxTurns, maxChars, turns) => {
          const history = new ConversationHistory({ maxTurns, maxChars });
          turns.forEach(([user, assistant, interrupted]) => history.commit(user, assistant, { interrupted }));
          const messages = history.messagesFor('now');
          const past = messages.slice(0, -1);
          expect(past.length / 2).toBeLessThanOrEqual(maxTurns);
          expect(past.reduce((sum, m) => sum + m.content.length, 0)).toBeLessThanOrEqual(maxChars);
          // What is kept is a suffix of what was said.
          const kept = history.turns();
          const tail = turns.slice(turns.length - kept.length);
          expect(kept.map((t) => t.user)).toEqual(tail.map(([user]) => user));
          expect(messages.at(-1)).toEqual({ role: 'user', content: 'now' });
        },
      ),
    );
  });
});
