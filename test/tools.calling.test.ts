import { randomBytes } from 'node:crypto';
import { Webhook } from 'standardwebhooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { json, post, startTestApp, type TestApp } from './helpers/app.ts';
import { AUDIBLE_RMS, eventually, labels, openSession, type LiveSession } from './helpers/conversation.ts';
import {
  startOpenAiUpstream,
  type OpenAiUpstream,
  type RecordedChatMessage,
  type RecordedRequest,
} from './fakes/openai-upstream.ts';
import { startToolReceiver, type ToolReceiver } from './fakes/tool-receiver.ts';
import { MAX_JSON_DEPTH } from '../actors/json-depth.ts';
import { MAX_TOOL_ROUNDS_PER_TURN } from '../actors/stage/llm.actor.ts';
import type { TtsProvider, TtsProviderId } from '../actors/tts/types.ts';
import { sessionParts } from '../src/sessions/session.ts';
import {
  MAX_TOOL_DEFINITION_BYTES,
  MAX_TOOLS_PER_SESSION,
  SessionTools,
  checkToolDefinitions,
  type SessionToolDefinition,
} from '../src/sessions/tools.ts';

/**
 * Tool calling end to end: a real loopback OpenAI-compatible server streaming tool_calls deltas, a real loopback
 * webhook receiver verifying Standard Webhooks signatures with the library, the session's SSE and WebRTC receiver.
 */

/** A whole chat turn with a tool round: two LLM requests, a webhook, builtin synthesis and real-time playout. */
const TURN_MS = 20_000;
/** The spec promises idle within ~200 ms of an interrupt; allow scheduling slack on 2 shared cores. */
const INTERRUPT_SETTLE_MS = 1_500;
/** After an interrupt, long enough for anything a leaked tool or round would still say to show on SSE. */
const QUIET_AFTER_INTERRUPT_MS = 700;

const SECRET = `whsec_${randomBytes(24).toString('base64')}`;
const WEATHER_PARAMETERS = { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] };

const weatherTool = (webhook: string): SessionToolDefinition => ({
  type: 'function',
  function: { name: 'get_weather', description: 'Current weather for a city', parameters: WEATHER_PARAMETERS },
  webhook,
});
const mapTool: SessionToolDefinition = {
  type: 'function',
  function: {
    name: 'show_map',
    description: 'Shows a place on the user’s screen',
    parameters: { type: 'object', properties: { place: { type: 'string' } } },
  },
};

/** JSON text of objects nested `depth` deep (`{"a":{"a":...{}}}`), written as text: JSON.stringify itself cannot go this deep. */
const nestedJsonText = (depth: number) => `${'{"a":'.repeat(depth - 1)}{}${'}'.repeat(depth - 1)}`;
/** A POST whose JSON body is given as text. */
const postText = (baseUrl: string, path: string, body: string) =>
  fetch(`${baseUrl}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });

/** The last tool message's output, parsed (what the fake model builds its answer from). */
const lastToolOutput = (messages: RecordedChatMessage[]) =>
  JSON.parse(messages.at(-1)!.content!) as Record<string, unknown>;

describe('tool calling in chat turns', () => {
  let upstream: OpenAiUpstream;
  let receiver: ToolReceiver;
  let t: TestApp;
  let s: LiveSession;
  let rtAvatar: string;
  /** The sentences the session's TTS was asked to speak, in order. */
  const spoken: string[] = [];
  /** The bus's `tool.result` events (what the transcript follows), by call id. */
  const settled = new Map<string, { turnId: string; name: string; ok: boolean }>();

  const chat = (prompt: string) => post(t.baseUrl, `/sessions/${s.sessionId}/chat`, { prompt });
  const setTools = (tools: unknown) => post(t.baseUrl, `/sessions/${s.sessionId}/customize`, { tools });
  const toolResult = (body: unknown, sessionId = s.sessionId) =>
    post(t.baseUrl, `/sessions/${sessionId}/tool_results`, body);
  const idleAfter = (from: number, timeout = TURN_MS) =>
    s.sse.waitFor((e) => e.type === 'status' && e.data.stage === 'idle', timeout, 'status idle', from);
  const chatRequestsSince = (before: number): RecordedRequest[] =>
    upstream.requests.slice(before).filter((r) => r.chat);
  const live = () => t.services.supervisor.liveSession(s.sessionId)!;
  /** A chat turn whose model calls the client tool show_map once, then says `after`; resolves once its tool_call is on SSE. */
  const chatUntilClientCall = async (callId: string, place: string, after: string) => {
    upstream.setScenario({
      chat: {
        scripted: [
          { toolCalls: [{ id: callId, name: 'show_map', arguments: JSON.stringify({ place }) }] },
          { tokens: [after] },
        ],
      },
    });
    const from = s.sse.events.length;
    const requestsBefore = upstream.requests.length;
    expect((await chat(`Show me ${place}.`)).status).toBe(200);
    await s.sse.waitFor((e) => e.type === 'tool_call', TURN_MS, 'tool_call', from);
    return { from, requestsBefore };
  };
  /** A chat turn whose model makes one call, then says `after`, run to idle; `output` is the tool message the model got. */
  const chatOneCallToIdle = async (
    call: { id: string; name: string; arguments: string },
    after: string,
    prompt: string,
  ) => {
    upstream.setScenario({ chat: { scripted: [{ toolCalls: [call] }, { tokens: [after] }] } });
    const from = s.sse.events.length;
    const requestsBefore = upstream.requests.length;
    expect((await chat(prompt)).status).toBe(200);
    await idleAfter(from);
    return { from, output: chatRequestsSince(requestsBefore)[1].chat!.messages.at(-1)! };
  };
  /** Each test sets the session's tools itself, so it runs alone (`-t`) as well as after the others. */
  const useBothTools = async () =>
    expect((await setTools([weatherTool(receiver.url('/weather')), mapTool])).status).toBe(200);

  beforeAll(async () => {
    upstream = await startOpenAiUpstream();
    receiver = await startToolReceiver();
    t = await startTestApp({
      env: {
        SERVICE_LLM_BASE_URL: upstream.baseUrl,
        SERVICE_WEBHOOK_ALLOWED_HOSTS: '127.0.0.1',
        SERVICE_WEBHOOK_SECRET: SECRET,
      },
    });
    s = await openSession(t);
    rtAvatar = live().record.avatar_id;
    sessionParts(live()).bus.on('tool.result', ({ callId, ...rest }) => settled.set(callId, rest));
    const stage = sessionParts(live()).stage;
    const realTts = stage.tts;
    stage.tts = (id: TtsProviderId): TtsProvider => {
      const provider = realTts(id);
      return { ...provider, synthesize: (request) => (spoken.push(request.text), provider.synthesize(request)) };
    };
  });

  afterAll(async () => {
    s?.close();
    await t?.close();
    await receiver?.close();
    await upstream?.close();
  });

  it('a webhook tool: signed POST verified by the library, SSE tool_call, a tool message to the model, the answer spoken', async () => {
    expect((await setTools([weatherTool(receiver.url('/weather'))])).status).toBe(200);
    receiver.answerWith(() => ({ json: { forecast: 'sunny', temperature_c: 21 } }));
    upstream.setScenario({
      chat: {
        scripted: [
          {
            tokens: ['Let me check.'],
            toolCalls: [{ id: 'call_w1', name: 'get_weather', arguments: '{"city": "Paris"}' }],
          },
          { tokens: (messages) => [`It is ${String(lastToolOutput(messages).forecast)} in Paris`, '.'] },
        ],
      },
    });
    const from = s.sse.events.length;
    const requestsBefore = upstream.requests.length;
    const receivedBefore = receiver.requests.length;
    const spokenBefore = spoken.length;
    const sentAt = performance.now();
    const res = await chat('What is the weather in Paris?');
    expect(res.status).toBe(200);
    const turnId = res.headers.get('x-turn-id');
    await idleAfter(from);

    const turn = s.sse.events.slice(from);
    expect(labels(turn)).not.toContain('error');
    const toolCalls = turn.filter((e) => e.type === 'tool_call');
    expect(toolCalls.map((e) => e.data)).toEqual([
      { turn_id: turnId, call_id: 'call_w1', name: 'get_weather', arguments: { city: 'Paris' } },
    ]);

    const received = receiver.requests.slice(receivedBefore);
    expect(received).toHaveLength(1);
    expect(received[0].body).toEqual({
      session_id: s.sessionId,
      turn_id: turnId,
      call_id: 'call_w1',
      name: 'get_weather',
      arguments: { city: 'Paris' },
    });
    const signature = {
      'webhook-id': String(received[0].headers['webhook-id']),
      'webhook-timestamp': String(received[0].headers['webhook-timestamp']),
      'webhook-signature': String(received[0].headers['webhook-signature']),
    };
    expect(new Webhook(SECRET).verify(received[0].rawBody, signature)).toEqual(received[0].body);
    expect(settled.get('call_w1')).toEqual({ turnId, name: 'get_weather', ok: true });

    const sent = chatRequestsSince(requestsBefore);
    expect(sent).toHaveLength(2);
    // The model sees the function, never where it runs.
    expect(sent[0].chat!.body.tools).toEqual([{ type: 'function', function: weatherTool('').function }]);
    expect(sent[1].chat!.messages.slice(-3)).toEqual([
      { role: 'user', content: 'What is the weather in Paris?' },
      {
        role: 'assistant',
        content: 'Let me check.',
        tool_calls: [
          { id: 'call_w1', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Paris"}' } },
        ],
      },
      { role: 'tool', tool_call_id: 'call_w1', content: JSON.stringify({ forecast: 'sunny', temperature_c: 21 }) },
    ]);

    // Text before the call and the answer after it are both spoken, the answer carrying the tool's output.
    expect(
      turn
        .filter((e) => e.type === 'llm')
        .map((e) => e.data.delta)
        .join(''),
    ).toBe('Let me check.It is sunny in Paris.');
    expect(spoken.slice(spokenBefore)).toEqual(['Let me check.', 'It is sunny in Paris.']);
    const kinds = labels(turn);
    expect(kinds.indexOf('tool_call')).toBeLessThan(kinds.lastIndexOf('tts:complete'));
    expect(s.peer.firstAudible(sentAt, AUDIBLE_RMS)).toBeDefined();
  });

  it('parallel calls in one answer: every call runs, each output answers its call in order', async () => {
    await useBothTools();
    receiver.answerWith((request) => ({
      json: { city: (request.body.arguments as { city: string }).city, forecast: 'rain' },
    }));
    upstream.setScenario({
      chat: {
        scripted: [
          {
            toolCalls: [
              { id: 'call_p1', name: 'get_weather', arguments: '{"city":"Oslo"}' },
              { id: 'call_p2', name: 'get_weather', arguments: '{"city":"Bergen"}' },
            ],
          },
          { tokens: ['Rain in both.'] },
        ],
      },
    });
    const from = s.sse.events.length;
    const requestsBefore = upstream.requests.length;
    const receivedBefore = receiver.requests.length;
    expect((await chat('Weather in Oslo and Bergen?')).status).toBe(200);
    await idleAfter(from);

    expect(
      s.sse.events
        .slice(from)
        .filter((e) => e.type === 'tool_call')
        .map((e) => [e.data.call_id, e.data.arguments]),
    ).toEqual([
      ['call_p1', { city: 'Oslo' }],
      ['call_p2', { city: 'Bergen' }],
    ]);
    expect(
      receiver.requests
        .slice(receivedBefore)
        .map((r) => r.body.call_id)
        .sort(),
    ).toEqual(['call_p1', 'call_p2']);
    const second = chatRequestsSince(requestsBefore)[1].chat!.messages;
    expect(second.at(-3)!.tool_calls!.map((call) => call.id)).toEqual(['call_p1', 'call_p2']);
    expect(second.slice(-2)).toEqual([
      { role: 'tool', tool_call_id: 'call_p1', content: JSON.stringify({ city: 'Oslo', forecast: 'rain' }) },
      { role: 'tool', tool_call_id: 'call_p2', content: JSON.stringify({ city: 'Bergen', forecast: 'rain' }) },
    ]);
  });

  it('arguments that are not JSON never reach the tool, a failing webhook is reported to the model as failed', async () => {
    await useBothTools();
    receiver.answerWith(() => ({ status: 500, json: { message: 'database down' } }));
    upstream.setScenario({
      chat: {
        scripted: [
          {
            toolCalls: [
              { id: 'call_bad', name: 'get_weather', arguments: '{"city": ' },
              { id: 'call_500', name: 'get_weather', arguments: '{"city":"Rome"}' },
            ],
          },
          { tokens: ['Sorry, I could not look that up.'] },
        ],
      },
    });
    const from = s.sse.events.length;
    const requestsBefore = upstream.requests.length;
    const receivedBefore = receiver.requests.length;
    expect((await chat('Weather in Rome?')).status).toBe(200);
    await idleAfter(from);

    expect(receiver.requests.slice(receivedBefore).map((r) => r.body.call_id)).toEqual(['call_500']);
    expect(
      s.sse.events
        .slice(from)
        .filter((e) => e.type === 'tool_call')
        .map((e) => e.data.call_id),
    ).toEqual(['call_500']);
    const [bad, failed] = chatRequestsSince(requestsBefore)[1].chat!.messages.slice(-2);
    expect(bad.tool_call_id).toBe('call_bad');
    expect(JSON.parse(bad.content!).error).toMatch(/not a JSON object/);
    expect(failed).toEqual({
      role: 'tool',
      tool_call_id: 'call_500',
      content: JSON.stringify({ error: 'the tool failed (HTTP 500)' }),
    });
    expect(settled.get('call_500')?.ok).toBe(false);
    expect(settled.has('call_bad')).toBe(false);
    expect(labels(s.sse.events.slice(from))).not.toContain('error');
  });

  it('a client tool: SSE tool_call, answered on tool_results (200), then 409 for a second answer and 404 for an unknown call', async () => {
    await useBothTools();
    upstream.setScenario({
      chat: {
        scripted: [
          { toolCalls: [{ id: 'call_c1', name: 'show_map', arguments: '{"place":"Louvre"}' }] },
          { tokens: (messages) => [`The map is ${lastToolOutput(messages).shown ? 'on your screen' : 'missing'}.`] },
        ],
      },
    });
    const from = s.sse.events.length;
    const requestsBefore = upstream.requests.length;
    const receivedBefore = receiver.requests.length;
    const res = await chat('Show me the Louvre.');
    expect(res.status).toBe(200);
    const call = await s.sse.waitFor((e) => e.type === 'tool_call', TURN_MS, 'tool_call', from);
    expect(call.data).toEqual({
      turn_id: res.headers.get('x-turn-id'),
      call_id: 'call_c1',
      name: 'show_map',
      arguments: { place: 'Louvre' },
    });

    const answered = await toolResult({ call_id: 'call_c1', output: { shown: true } });
    expect(answered.status).toBe(200);
    expect(await json(answered)).toEqual({ accepted: true });
    await idleAfter(from);

    expect(settled.get('call_c1')?.ok).toBe(true);
    expect(chatRequestsSince(requestsBefore)[1].chat!.messages.at(-1)).toEqual({
      role: 'tool',
      tool_call_id: 'call_c1',
      content: '{"shown":true}',
    });
    expect(
      s.sse.events
        .slice(from)
        .filter((e) => e.type === 'llm')
        .map((e) => e.data.delta)
        .join(''),
    ).toBe('The map is on your screen.');
    // A client tool is not a webhook.
    expect(receiver.requests.length).toBe(receivedBefore);

    const again = await toolResult({ call_id: 'call_c1', output: { shown: false } });
    expect(again.status).toBe(409);
    expect((await json(again)).detail).toMatch(/answered already/);
    const unknown = await toolResult({ call_id: 'call_never_made', output: 1 });
    expect(unknown.status).toBe(404);
    expect((await json(unknown)).detail).toMatch(/no tool call/);
    expect((await toolResult({ call_id: 'call_c1', output: 1 }, '00000000-0000-4000-8000-000000000000')).status).toBe(
      404,
    );
    expect((await toolResult({ output: 1 })).status).toBe(400);
  });

  it('model arguments nested 5,000 deep: the model gets a tool error, the SSE goes on (the parallel call is announced and answered), the transcript reads', async () => {
    await useBothTools();
    upstream.setScenario({
      chat: {
        scripted: [
          {
            toolCalls: [
              { id: 'call_deep', name: 'show_map', arguments: nestedJsonText(5_000) },
              { id: 'call_flat', name: 'show_map', arguments: '{"place":"Orsay"}' },
            ],
          },
          { tokens: ['One map is shown.'] },
        ],
      },
    });
    const from = s.sse.events.length;
    const requestsBefore = upstream.requests.length;
    const res = await chat('Show me two museums.');
    expect(res.status).toBe(200);
    const turnId = res.headers.get('x-turn-id');
    const call = await s.sse.waitFor((e) => e.type === 'tool_call', TURN_MS, 'tool_call', from);
    expect(call.data.call_id).toBe('call_flat');
    expect((await toolResult({ call_id: 'call_flat', output: { shown: true } })).status).toBe(200);
    await idleAfter(from);

    expect(
      s.sse.events
        .slice(from)
        .filter((e) => e.type === 'tool_call')
        .map((e) => e.data.call_id),
    ).toEqual(['call_flat']);
    expect(labels(s.sse.events.slice(from))).not.toContain('error');
    const [deep, flat] = chatRequestsSince(requestsBefore)[1].chat!.messages.slice(-2);
    expect(deep.tool_call_id).toBe('call_deep');
    expect(JSON.parse(deep.content!).error).toMatch(
      new RegExp(`nest deeper than ${MAX_JSON_DEPTH} levels; the tool was not called`),
    );
    expect(flat).toEqual({ role: 'tool', tool_call_id: 'call_flat', content: '{"shown":true}' });
    expect(settled.has('call_deep')).toBe(false);

    const transcript = await fetch(`${t.baseUrl}/sessions/${s.sessionId}/transcript`);
    expect(transcript.status).toBe(200);
    const turn = (
      (await json(transcript)).turns as Array<{
        turn_id: string;
        tool_calls: Array<{ call_id: string; ok: boolean | null }>;
      }>
    ).find((entry) => entry.turn_id === turnId);
    expect(turn?.tool_calls.map((c) => [c.call_id, c.ok])).toEqual([['call_flat', true]]);
  });

  it('a tool_results output nested 20,000 deep is a 400 {detail}; the call still waits and takes a proper answer', async () => {
    await useBothTools();
    const { from, requestsBefore } = await chatUntilClientCall('call_nest', 'the Louvre', 'Shown.');

    for (const output of [
      nestedJsonText(20_000),
      `${'['.repeat(20_000)}${']'.repeat(20_000)}`,
      nestedJsonText(MAX_JSON_DEPTH + 1),
    ]) {
      const refused = await postText(
        t.baseUrl,
        `/sessions/${s.sessionId}/tool_results`,
        `{"call_id":"call_nest","output":${output}}`,
      );
      expect(refused.status).toBe(400);
      expect((await json(refused)).detail).toBe(`output nests deeper than ${MAX_JSON_DEPTH} levels`);
    }
    const answered = await postText(
      t.baseUrl,
      `/sessions/${s.sessionId}/tool_results`,
      `{"call_id":"call_nest","output":${nestedJsonText(MAX_JSON_DEPTH)}}`,
    );
    expect(answered.status).toBe(200);
    await idleAfter(from);
    expect(chatRequestsSince(requestsBefore)[1].chat!.messages.at(-1)!.content).toBe(nestedJsonText(MAX_JSON_DEPTH));
    expect(settled.get('call_nest')?.ok).toBe(true);
  });

  it('a webhook tool answering JSON nested 20,000 deep: the model gets a tool error', async () => {
    await useBothTools();
    receiver.answerWith(() => ({ text: `${'['.repeat(20_000)}${']'.repeat(20_000)}` }));
    const { from, output } = await chatOneCallToIdle(
      { id: 'call_deep_answer', name: 'get_weather', arguments: '{"city":"Oslo"}' },
      'Sorry.',
      'Weather in Oslo?',
    );
    expect(output.tool_call_id).toBe('call_deep_answer');
    expect(JSON.parse(output.content!).error).toBe(
      `the tool answered with JSON nested deeper than ${MAX_JSON_DEPTH} levels`,
    );
    expect(settled.get('call_deep_answer')?.ok).toBe(false);
    expect(labels(s.sse.events.slice(from))).not.toContain('error');
  });

  it('a client tool answered the moment its tool_call is published (an in-process listener) is taken', async () => {
    await useBothTools();
    const answers: string[] = [];
    const off = live().onEvent((event) => {
      if (event.type !== 'tool_call') return;
      try {
        live().answerToolCall(event.data.call_id, { instant: true });
        answers.push('accepted');
      } catch (error) {
        answers.push((error as Error).name);
      }
    });
    try {
      upstream.setScenario({
        chat: {
          scripted: [{ toolCalls: [{ id: 'call_now', name: 'show_map', arguments: '{}' }] }, { tokens: ['Done.'] }],
        },
      });
      const from = s.sse.events.length;
      const requestsBefore = upstream.requests.length;
      expect((await chat('Quick map.')).status).toBe(200);
      await idleAfter(from);
      expect(answers).toEqual(['accepted']);
      expect(chatRequestsSince(requestsBefore)[1].chat!.messages.at(-1)!.content).toBe('{"instant":true}');
    } finally {
      off();
    }
  });

  it('a client tool past its deadline gives the model a failure output; the late answer is 409', async () => {
    const parts = sessionParts(live());
    const original = parts.stage.tools;
    parts.stage.tools = new SessionTools({
      sessionId: s.sessionId,
      bus: parts.bus,
      logger: parts.logger,
      policy: { allowedHosts: [], signer: null },
      fillerText: null,
      definitions: [mapTool],
      clientDeadlineMs: 300,
    });
    try {
      const { output } = await chatOneCallToIdle(
        { id: 'call_late', name: 'show_map', arguments: '{}' },
        'The map did not open.',
        'Open the map.',
      );
      expect(output.tool_call_id).toBe('call_late');
      expect(JSON.parse(output.content!).error).toMatch(/did not answer within 300 ms/);
      expect(settled.get('call_late')?.ok).toBe(false);
      const late = await toolResult({ call_id: 'call_late', output: { shown: true } });
      expect(late.status).toBe(409);
      expect((await json(late)).detail).toMatch(/deadline/);
    } finally {
      parts.stage.tools = original;
    }
  });

  it('a hanging webhook tool interrupted: its request is aborted, idle follows at once and nothing more is said', async () => {
    await useBothTools();
    receiver.answerWith(() => 'hang');
    upstream.setScenario({
      chat: {
        scripted: [
          { toolCalls: [{ id: 'call_h1', name: 'get_weather', arguments: '{"city":"Atlantis"}' }] },
          { tokens: ['This must never be said.'] },
        ],
      },
    });
    const from = s.sse.events.length;
    const requestsBefore = upstream.requests.length;
    const receivedBefore = receiver.requests.length;
    const spokenBefore = spoken.length;
    expect((await chat('Weather in Atlantis?')).status).toBe(200);
    await s.sse.waitFor((e) => e.type === 'tool_call', TURN_MS, 'tool_call', from);
    expect(await eventually(() => receiver.requests.length > receivedBefore, 5_000)).toBe(true);

    const interruptAt = performance.now();
    expect(await json(await post(t.baseUrl, `/sessions/${s.sessionId}/interrupt`))).toEqual({ interrupted: true });
    const idle = await idleAfter(from, INTERRUPT_SETTLE_MS);
    expect(idle.at - interruptAt).toBeLessThan(INTERRUPT_SETTLE_MS);
    expect(await eventually(() => receiver.requests[receivedBefore].abandoned, 2_000)).toBe(true);
    expect(settled.get('call_h1')?.ok).toBe(false);

    await new Promise((resolve) => setTimeout(resolve, QUIET_AFTER_INTERRUPT_MS));
    const after = s.sse.events.slice(from).filter((e) => e.at > interruptAt);
    expect(after.filter((e) => e.type === 'llm' || e.type === 'tts' || e.type === 'error')).toEqual([]);
    expect(spoken.slice(spokenBefore)).toEqual([]);
    expect(chatRequestsSince(requestsBefore)).toHaveLength(1);
    upstream.setScenario({ chat: { scripted: [] } });
  });

  it('a client tool interrupted: cancelled, idle at once, and its late answer is 409', async () => {
    await useBothTools();
    const { from, requestsBefore } = await chatUntilClientCall('call_i1', 'Rome', 'Never said either.');
    const interruptAt = performance.now();
    await post(t.baseUrl, `/sessions/${s.sessionId}/interrupt`);
    const idle = await idleAfter(from, INTERRUPT_SETTLE_MS);
    expect(idle.at - interruptAt).toBeLessThan(INTERRUPT_SETTLE_MS);
    const late = await toolResult({ call_id: 'call_i1', output: { shown: true } });
    expect(late.status).toBe(409);
    expect((await json(late)).detail).toMatch(/interrupted/);
    await new Promise((resolve) => setTimeout(resolve, QUIET_AFTER_INTERRUPT_MS));
    expect(
      s.sse.events.slice(from).filter((e) => e.at > interruptAt && (e.type === 'llm' || e.type === 'tts')),
    ).toEqual([]);
    expect(chatRequestsSince(requestsBefore)).toHaveLength(1);
    upstream.setScenario({ chat: { scripted: [] } });
  });

  it(`stops offering tools after ${MAX_TOOL_ROUNDS_PER_TURN} rounds: the model is asked once more without tools and its words end the turn`, async () => {
    await useBothTools();
    receiver.answerWith(() => ({ json: { forecast: 'fog' } }));
    const looping = (round: number) => ({
      toolCalls: [{ id: `call_r${round}`, name: 'get_weather', arguments: '{"city":"London"}' }],
    });
    upstream.setScenario({
      chat: {
        scripted: [
          ...Array.from({ length: MAX_TOOL_ROUNDS_PER_TURN }, (_, round) => looping(round)),
          // Asked without tools, a misbehaving model still calls one: the call is ignored, its words are the answer.
          { tokens: ['Foggy, as usual.'], toolCalls: [{ id: 'call_extra', name: 'get_weather', arguments: '{}' }] },
        ],
      },
    });
    const from = s.sse.events.length;
    const requestsBefore = upstream.requests.length;
    const receivedBefore = receiver.requests.length;
    expect((await chat('Weather in London?')).status).toBe(200);
    await idleAfter(from);

    const sent = chatRequestsSince(requestsBefore);
    expect(sent).toHaveLength(MAX_TOOL_ROUNDS_PER_TURN + 1);
    expect(sent.slice(0, -1).every((r) => Array.isArray(r.chat!.body.tools))).toBe(true);
    expect(sent.at(-1)!.chat!.body.tools).toBeUndefined();
    expect(sent.at(-1)!.chat!.messages.filter((m) => m.role === 'tool')).toHaveLength(MAX_TOOL_ROUNDS_PER_TURN);
    expect(receiver.requests.length - receivedBefore).toBe(MAX_TOOL_ROUNDS_PER_TURN);
    expect(
      s.sse.events
        .slice(from)
        .filter((e) => e.type === 'llm')
        .map((e) => e.data.delta)
        .join(''),
    ).toBe('Foggy, as usual.');
    expect(labels(s.sse.events.slice(from))).not.toContain('error');
  });

  it('says the filler sentence once while a slow tool runs', async () => {
    const parts = sessionParts(live());
    const original = parts.stage.tools;
    parts.stage.tools = new SessionTools({
      sessionId: s.sessionId,
      bus: parts.bus,
      logger: parts.logger,
      policy: { allowedHosts: ['127.0.0.1'], signer: null },
      fillerText: 'One moment please.',
      definitions: [weatherTool(receiver.url('/slow'))],
    });
    try {
      receiver.answerWith(() => ({ json: { forecast: 'snow' }, delayMs: 1_800 }));
      upstream.setScenario({
        chat: {
          scripted: [
            { toolCalls: [{ id: 'call_s1', name: 'get_weather', arguments: '{"city":"Kiruna"}' }] },
            { toolCalls: [{ id: 'call_s2', name: 'get_weather', arguments: '{"city":"Tromso"}' }] },
            { tokens: ['Snow in both places.'] },
          ],
        },
      });
      const from = s.sse.events.length;
      const spokenBefore = spoken.length;
      expect((await chat('Weather up north?')).status).toBe(200);
      await idleAfter(from);
      expect(spoken.slice(spokenBefore)).toEqual(['One moment please.', 'Snow in both places.']);
    } finally {
      parts.stage.tools = original;
    }
  });

  describe('definitions: every invalid one is a 400 {detail}, on create and customize', () => {
    const valid = () => weatherTool(receiver.url('/weather'));
    const cases: Array<[string, () => unknown[], RegExp]> = [
      [
        'a name outside ^[a-zA-Z0-9_-]{1,64}$',
        () => [{ ...mapTool, function: { ...mapTool.function, name: 'show map!' } }],
        /name/,
      ],
      [
        'a name over 64 characters',
        () => [{ ...mapTool, function: { ...mapTool.function, name: 'x'.repeat(65) } }],
        /name/,
      ],
      ['the same name twice', () => [mapTool, { ...mapTool }], /defined twice/],
      [
        'parameters of type string',
        () => [{ ...mapTool, function: { ...mapTool.function, parameters: { type: 'string' } } }],
        /parameters/,
      ],
      ['parameters missing', () => [{ type: 'function', function: { name: 'no_params' } }], /parameters/],
      ['a type other than function', () => [{ ...mapTool, type: 'retrieval' }], /type/],
      [
        `more than ${MAX_TOOLS_PER_SESSION} tools`,
        () =>
          Array.from({ length: MAX_TOOLS_PER_SESSION + 1 }, (_, i) => ({
            ...mapTool,
            function: { ...mapTool.function, name: `tool_${i}` },
          })),
        /tools/,
      ],
      [
        `a definition over ${MAX_TOOL_DEFINITION_BYTES} bytes`,
        () => [
          {
            ...mapTool,
            function: {
              ...mapTool.function,
              parameters: { type: 'object', description: 'x'.repeat(MAX_TOOL_DEFINITION_BYTES) },
            },
          },
        ],
        /bytes/,
      ],
      ['a webhook that is not http(s)', () => [{ ...valid(), webhook: 'ftp://127.0.0.1/weather' }], /http or https/],
      [
        'a webhook carrying credentials',
        () => [{ ...valid(), webhook: valid().webhook!.replace('http://', 'http://user:pw@') }],
        /credentials/,
      ],
      [
        'a webhook on a host not allowed',
        () => [{ ...valid(), webhook: 'http://169.254.169.254/latest/meta-data' }],
        /SERVICE_WEBHOOK_ALLOWED_HOSTS/,
      ],
      ['a webhook that is not a URL', () => [{ ...valid(), webhook: 'not a url' }], /not a URL/],
    ];

    it.each(cases)('%s', async (_name, tools, detail) => {
      const created = await post(t.baseUrl, '/sessions', { avatar_id: rtAvatar, model: 'rt', tools: tools() });
      expect(created.status).toBe(400);
      expect((await json(created)).detail).toMatch(detail);
      const before = live().tools;
      const customized = await setTools(tools());
      expect(customized.status).toBe(400);
      expect((await json(customized)).detail).toMatch(detail);
      expect(live().tools).toBe(before);
    });

    it(`parameters nested 10,000 or 150,000 deep (or ${MAX_JSON_DEPTH + 1} in all): 400 {detail} on create and customize, the tools unchanged`, async () => {
      const bodyWith = (depth: number) =>
        `[{"type":"function","function":{"name":"deep","parameters":{"type":"object","properties":${nestedJsonText(depth)}}}}]`;
      // tools[0] → function → parameters → properties: the definition itself is 3 levels above `properties`.
      // 150,000 levels: near the 1 MiB body limit, far past where any recursive walk would overflow the stack.
      for (const depth of [10_000, 150_000, MAX_JSON_DEPTH - 2]) {
        const created = await postText(
          t.baseUrl,
          '/sessions',
          `{"avatar_id":"${rtAvatar}","model":"rt","tools":${bodyWith(depth)}}`,
        );
        expect(created.status).toBe(400);
        expect((await json(created)).detail).toBe(
          `tools[0]: the definition nests deeper than ${MAX_JSON_DEPTH} levels`,
        );
        const before = live().tools;
        const customized = await postText(
          t.baseUrl,
          `/sessions/${s.sessionId}/customize`,
          `{"tools":${bodyWith(depth)}}`,
        );
        expect(customized.status).toBe(400);
        expect((await json(customized)).detail).toBe(
          `tools[0]: the definition nests deeper than ${MAX_JSON_DEPTH} levels`,
        );
        expect(live().tools).toBe(before);
      }
      const deepest = await postText(
        t.baseUrl,
        `/sessions/${s.sessionId}/customize`,
        `{"tools":${bodyWith(MAX_JSON_DEPTH - 3)}}`,
      );
      expect(deepest.status).toBe(200);
      expect(live().tools.map((tool) => tool.function.name)).toEqual(['deep']);
    });

    it('valid tools are taken on create; service-wide defaults take none', async () => {
      const created = await post(t.baseUrl, '/sessions', {
        avatar_id: rtAvatar,
        model: 'rt',
        tools: [valid(), mapTool],
      });
      expect(created.status).toBe(200);
      const sessionId = (await json(created)).session_id as string;
      try {
        expect(t.services.supervisor.liveSession(sessionId)!.tools).toEqual([valid(), mapTool]);
      } finally {
        await fetch(`${t.baseUrl}/sessions/${sessionId}`, { method: 'DELETE' });
      }
      expect((await post(t.baseUrl, '/customize', { tools: [mapTool] })).status).toBe(400);
    });

    it('with SERVICE_WEBHOOK_ALLOWED_HOSTS empty, no webhook tool is accepted; client tools still are', () => {
      expect(() => checkToolDefinitions([valid()], { allowedHosts: [] })).toThrow(/no callback hosts are allowed/);
      expect(checkToolDefinitions([mapTool], { allowedHosts: [] })).toEqual([mapTool]);
      expect(() =>
        checkToolDefinitions([{ ...valid(), webhook: 'http://evil.example.com/' }], { allowedHosts: ['.example.com'] }),
      ).not.toThrow();
      expect(() =>
        checkToolDefinitions([{ ...valid(), webhook: 'http://example.com.evil.net/' }], {
          allowedHosts: ['.example.com'],
        }),
      ).toThrow(/not in/);
    });
  });
});
