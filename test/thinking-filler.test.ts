/**
 * The thinking filler phrase (issue 46, point 2): `SERVICE_THINKING_FILLER_TEXT`, off by default, said once in a chat
 * turn whose reply has not started to be spoken `THINKING_FILLER_DELAY_MS` after the answer began to be awaited. End to
 * end with a real loopback OpenAI-compatible upstream that holds back its first token, the built-in TTS, the session's
 * SSE and a wrtc receiver; the timing rule on the real media clock.
 */
import { randomBytes } from 'node:crypto';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { json, post, startTestApp } from './helpers/app.ts';
import { openSession } from './helpers/conversation.ts';
import { startOpenAiUpstream, type OpenAiUpstream } from './fakes/openai-upstream.ts';
import { startToolReceiver, type ToolReceiver } from './fakes/tool-receiver.ts';
import { THINKING_FILLER_DELAY_MS, TurnFiller } from '../actors/llm/filler.ts';
import { TOOL_FILLER_DELAY_MS } from '../actors/llm/tool-round.ts';
import { PlayoutClock } from '../actors/media/playout.ts';
import { newPlayoutTurn } from '../actors/media/turn-playout.ts';
import type { TtsProvider, TtsProviderId } from '../actors/tts/types.ts';
import { ConfigError, loadConfig } from '../src/config.ts';
import { sessionParts } from '../src/sessions/session.ts';
import { TimecodeTestRenderer } from './helpers/timecode-renderer.ts';

const FILLER = 'Let me think.';
/** A model slower than the filler's delay by far more than a loaded host's timer lateness. */
const SLOW_FIRST_TOKEN_MS = THINKING_FILLER_DELAY_MS + 1_500;
/** A whole chat turn: the model's wait, builtin synthesis and real-time playout of two short sentences. */
const TURN_MS = 20_000;
/** After an interrupt or a turn, long enough for a leaked filler timer to have fired and been spoken. */
const QUIET_MS = THINKING_FILLER_DELAY_MS + 800;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

interface TranscriptEntry {
  turn_id: string;
  assistant_text: string | null;
  heard_text: string | null;
  outcome: string;
}

/** An app whose chat turns go to `upstream`; records the sentences its TTS is asked to speak. */
async function chatApp(upstream: OpenAiUpstream, env: Record<string, string>) {
  const t = await startTestApp({ env: { SERVICE_LLM_BASE_URL: upstream.baseUrl, ...env } });
  const s = await openSession(t);
  const spoken: string[] = [];
  const stage = sessionParts(t.services.supervisor.liveSession(s.sessionId)!).stage;
  const realTts = stage.tts;
  stage.tts = (id: TtsProviderId): TtsProvider => {
    const provider = realTts(id);
    return { ...provider, synthesize: (request) => (spoken.push(request.text), provider.synthesize(request)) };
  };
  const chat = async (prompt: string) => {
    const res = await post(t.baseUrl, `/sessions/${s.sessionId}/chat`, { prompt });
    expect(res.status).toBe(200);
    return res.headers.get('x-turn-id')!;
  };
  const idleAfter = (from: number) =>
    s.sse.waitFor((e) => e.type === 'status' && e.data.stage === 'idle', TURN_MS, 'status idle', from);
  const transcriptTurn = async (turnId: string): Promise<TranscriptEntry> => {
    const body = await json(await fetch(`${t.baseUrl}/sessions/${s.sessionId}/transcript`));
    return (body.turns as TranscriptEntry[]).find((turn) => turn.turn_id === turnId)!;
  };
  const captionsSince = (from: number) =>
    s.sse.events
      .slice(from)
      .filter((e) => e.type === 'caption')
      .map((e) => e.data.text as string);
  const llmTextSince = (from: number) =>
    s.sse.events
      .slice(from)
      .filter((e) => e.type === 'llm')
      .map((e) => e.data.delta as string)
      .join('');
  return { t, s, spoken, chat, idleAfter, transcriptTurn, captionsSince, llmTextSince };
}

describe('SERVICE_THINKING_FILLER_TEXT: the setting', () => {
  it('is off by default, trimmed when set, and refused at start-up when too long or without a word', () => {
    expect(loadConfig({}, '/srv/app').thinkingFillerText).toBeNull();
    expect(loadConfig({ SERVICE_THINKING_FILLER_TEXT: '   ' }, '/srv/app').thinkingFillerText).toBeNull();
    expect(loadConfig({ SERVICE_THINKING_FILLER_TEXT: '  Hmm, let me see. ' }, '/srv/app').thinkingFillerText).toBe(
      'Hmm, let me see.',
    );
    const problemsOf = (value: string): string[] => {
      try {
        loadConfig({ SERVICE_THINKING_FILLER_TEXT: value }, '/srv/app');
      } catch (error) {
        expect(error).toBeInstanceOf(ConfigError);
        return (error as ConfigError).problems;
      }
      return [];
    };
    expect(problemsOf('x'.repeat(201))).toEqual(['SERVICE_THINKING_FILLER_TEXT must be at most 200 characters']);
    expect(problemsOf('... ?!')).toEqual(['SERVICE_THINKING_FILLER_TEXT must contain a word (a letter or digit)']);
  });
});

describe('the turn filler: once per turn, thinking or tools, never after the reply started', () => {
  afterEach(() => vi.useRealTimers());

  it(`says the thinking filler ${THINKING_FILLER_DELAY_MS} ms after the answer began to be awaited, counting what already passed`, () => {
    vi.useFakeTimers();
    const said: string[] = [];
    const filler = new TurnFiller((text) => said.push(text));
    filler.whileThinking(FILLER, 600);
    vi.advanceTimersByTime(THINKING_FILLER_DELAY_MS - 600 - 1);
    expect(said).toEqual([]);
    vi.advanceTimersByTime(1);
    expect(said).toEqual([FILLER]);
    // Once per turn: tools slow afterwards say nothing more.
    filler.toolsSlow('One moment.');
    expect(said).toEqual([FILLER]);
  });

  it('a reply sentence spoken first, a cancelled turn or no text: no thinking filler; the tool filler first: no second', () => {
    vi.useFakeTimers();
    const said: string[] = [];
    const replied = new TurnFiller((text) => said.push(`replied:${text}`));
    replied.whileThinking(FILLER, 0);
    replied.replyStarted();
    const cancelled = new TurnFiller((text) => said.push(`cancelled:${text}`));
    cancelled.whileThinking(FILLER, 0);
    cancelled.cancel();
    const off = new TurnFiller((text) => said.push(`off:${text}`));
    off.whileThinking(null, 0);
    const tools = new TurnFiller((text) => said.push(`tools:${text}`));
    tools.whileThinking(FILLER, 0);
    tools.toolsSlow('One moment.');
    vi.advanceTimersByTime(THINKING_FILLER_DELAY_MS * 3);
    expect(said).toEqual(['tools:One moment.']);
  });

  it('the media clock says how long the answer has been awaited: from the think cue until its first audio', async () => {
    const clock = new PlayoutClock(new TimecodeTestRenderer(64, 48, 25), 16_000);
    clock.start();
    try {
      expect(clock.answerAwaitedMs()).toBeNull();
      clock.attend('think');
      const thoughtAt = clock.mediaMs;
      // On the media clock, not the wall: a loaded host only makes this take longer.
      while (clock.mediaMs < thoughtAt + 300) await sleep(10);
      const awaited = clock.answerAwaitedMs()!;
      expect(awaited).toBeGreaterThanOrEqual(300);
      expect(awaited).toBeLessThanOrEqual(clock.mediaMs - thoughtAt + 10);
      const pcm = new Int16Array(1_600).fill(3000);
      clock.enqueue(newPlayoutTurn('turn-1'), pcm, {
        durationMs: 100,
        poseAt: () => ({ open: 0.4, wide: 0, round: 0 }),
        levelAt: () => 0.5,
      });
      expect(clock.answerAwaitedMs()).toBeNull();
    } finally {
      clock.close();
    }
  });
});

describe('a chat turn with SERVICE_THINKING_FILLER_TEXT set', () => {
  let upstream: OpenAiUpstream;
  let receiver: ToolReceiver;
  let app: Awaited<ReturnType<typeof chatApp>>;

  beforeAll(async () => {
    upstream = await startOpenAiUpstream();
    receiver = await startToolReceiver();
    app = await chatApp(upstream, {
      SERVICE_THINKING_FILLER_TEXT: FILLER,
      SERVICE_TOOL_FILLER_TEXT: 'One moment please.',
      SERVICE_WEBHOOK_ALLOWED_HOSTS: '127.0.0.1',
      SERVICE_WEBHOOK_SECRET: `whsec_${randomBytes(24).toString('base64')}`,
    });
  });

  afterAll(async () => {
    app?.s.close();
    await app?.t.close();
    await receiver?.close();
    await upstream?.close();
  });

  it('a slow model: the filler is said and captioned first, then the reply; the transcript and history keep the reply only', async () => {
    upstream.setScenario({
      chat: { replyTokens: ['Paris is ', 'the capital.'], firstTokenDelayMs: SLOW_FIRST_TOKEN_MS, tokenDelayMs: 0 },
    });
    const { s, spoken, chat, idleAfter, transcriptTurn, captionsSince, llmTextSince } = app;
    const from = s.sse.events.length;
    const spokenBefore = spoken.length;
    const turnId = await chat('What is the capital of France?');
    await idleAfter(from);
    expect(spoken.slice(spokenBefore)).toEqual([FILLER, 'Paris is the capital.']);
    expect(captionsSince(from)).toEqual([FILLER, 'Paris is the capital.']);
    expect(llmTextSince(from)).toBe('Paris is the capital.');
    const turn = await transcriptTurn(turnId);
    expect(turn).toMatchObject({
      outcome: 'completed',
      assistant_text: 'Paris is the capital.',
      heard_text: 'Paris is the capital.',
    });
    // The next request's history: the model's own words only.
    const requestsBefore = upstream.requests.length;
    upstream.setScenario({ chat: { replyTokens: ['Yes.'], firstTokenDelayMs: 0, tokenDelayMs: 0 } });
    const next = s.sse.events.length;
    await chat('Sure?');
    await idleAfter(next);
    const messages = upstream.requests.slice(requestsBefore).find((r) => r.chat)!.chat!.messages;
    expect(messages.filter((m) => m.role === 'assistant').map((m) => m.content)).toEqual(['Paris is the capital.']);
  });

  it('the wait counts from the end of the user’s turn: recognition that took longer than the delay gets the filler at once', async () => {
    upstream.setScenario({ chat: { replyTokens: ['Sure.'], firstTokenDelayMs: SLOW_FIRST_TOKEN_MS, tokenDelayMs: 0 } });
    const { t, s, spoken, chat, idleAfter } = app;
    const parts = sessionParts(t.services.supervisor.liveSession(s.sessionId)!);
    // The end of a voice turn as the voice input reports it; its words reach the model one delay and more later.
    parts.bus.emit('voice.turn', { turnId: 'voice-1', source: 'listen', speechMs: 1_200 });
    const thinkingSince = parts.media.answerAwaitedMs();
    expect(thinkingSince).not.toBeNull();
    while (parts.media.answerAwaitedMs()! < THINKING_FILLER_DELAY_MS + 200) await sleep(20);
    const from = s.sse.events.length;
    const spokenBefore = spoken.length;
    await chat('What was that?');
    await idleAfter(from);
    expect(spoken.slice(spokenBefore)).toEqual([FILLER, 'Sure.']);
    const turnStart = s.sse.events.slice(from).find((e) => e.type === 'status' && e.data.stage === 'thinking')!;
    const fillerStart = s.sse.events.slice(from).find((e) => e.type === 'tts' && e.data.stage === 'start')!;
    // Said as the chat began, not a whole delay after it (a loaded host's event-loop lag aside).
    expect(fillerStart.at - turnStart.at).toBeLessThan(THINKING_FILLER_DELAY_MS / 2);
  });

  it('a quick model: no filler', async () => {
    upstream.setScenario({ chat: { replyTokens: ['Quick answer.'], firstTokenDelayMs: 0, tokenDelayMs: 0 } });
    const { s, spoken, chat, idleAfter, captionsSince } = app;
    const from = s.sse.events.length;
    const spokenBefore = spoken.length;
    await chat('Quick?');
    await idleAfter(from);
    await sleep(QUIET_MS);
    expect(spoken.slice(spokenBefore)).toEqual(['Quick answer.']);
    expect(captionsSince(from)).toEqual(['Quick answer.']);
  });

  it('interrupted while the model thinks, before the filler is due: nothing is said, then or later', async () => {
    upstream.setScenario({ chat: { replyTokens: ['Never said.'], firstTokenDelayMs: 4_000, tokenDelayMs: 0 } });
    const { t, s, spoken, idleAfter, captionsSince } = app;
    const from = s.sse.events.length;
    const spokenBefore = spoken.length;
    // The chat request is answered once the model accepted it (its first token): interrupted before, it is a 409.
    const asked = post(t.baseUrl, `/sessions/${s.sessionId}/chat`, { prompt: 'Think hard.' });
    await s.sse.waitFor((e) => e.type === 'status' && e.data.stage === 'thinking', TURN_MS, 'thinking', from);
    expect(await json(await post(t.baseUrl, `/sessions/${s.sessionId}/interrupt`))).toEqual({ interrupted: true });
    expect((await asked).status).toBe(409);
    await idleAfter(from);
    await sleep(QUIET_MS);
    expect(spoken.slice(spokenBefore)).toEqual([]);
    expect(captionsSince(from)).toEqual([]);
  });

  it('interrupted while the filler plays: it stops, the model is cut off and nothing of the turn is the model’s words', async () => {
    upstream.setScenario({ chat: { replyTokens: ['Never said either.'], firstTokenDelayMs: 6_000, tokenDelayMs: 0 } });
    const { t, s, spoken, idleAfter, transcriptTurn } = app;
    const from = s.sse.events.length;
    const spokenBefore = spoken.length;
    const asked = post(t.baseUrl, `/sessions/${s.sessionId}/chat`, { prompt: 'Think even harder.' });
    const caption = await s.sse.waitFor((e) => e.type === 'caption', TURN_MS, 'the filler’s caption', from);
    expect(caption.data.text).toBe(FILLER);
    await post(t.baseUrl, `/sessions/${s.sessionId}/interrupt`);
    expect((await asked).status).toBe(409);
    await idleAfter(from);
    await sleep(QUIET_MS);
    expect(spoken.slice(spokenBefore)).toEqual([FILLER]);
    const turn = await transcriptTurn(String(caption.data.turn_id));
    expect(turn).toMatchObject({ outcome: 'interrupted', assistant_text: null, heard_text: null });
  });

  it('interrupted once the reply is heard: what was heard is the reply’s part, without the filler', async () => {
    upstream.setScenario({
      chat: {
        replyTokens: ['The first part of a long answer. ', 'A second part that must never be heard at all.'],
        firstTokenDelayMs: SLOW_FIRST_TOKEN_MS,
        tokenDelayMs: 0,
      },
    });
    const { t, s, spoken, chat, idleAfter, transcriptTurn } = app;
    const from = s.sse.events.length;
    const spokenBefore = spoken.length;
    const turnId = await chat('Tell me a long story.');
    await s.sse.waitFor(
      (e) => e.type === 'caption' && String(e.data.text).startsWith('The first part'),
      TURN_MS,
      'the reply’s first caption',
      from,
    );
    await post(t.baseUrl, `/sessions/${s.sessionId}/interrupt`);
    await idleAfter(from);
    expect(spoken[spokenBefore]).toBe(FILLER);
    const turn = await transcriptTurn(turnId);
    expect(turn.outcome).toBe('interrupted');
    expect(turn.heard_text).toBe('The first part of a long answer.');
    expect(turn.assistant_text).not.toContain(FILLER);
  });

  it('a slow model calling a slow tool: the thinking filler is said, the tool filler not (one filler per turn)', async () => {
    const { t, s, spoken, chat, idleAfter, captionsSince } = app;
    const lookUp = {
      type: 'function',
      function: { name: 'look_up', description: 'Looks something up', parameters: { type: 'object' } },
      webhook: receiver.url('/look-up'),
    };
    expect((await post(t.baseUrl, `/sessions/${s.sessionId}/customize`, { tools: [lookUp] })).status).toBe(200);
    try {
      receiver.answerWith(() => ({ json: { found: true }, delayMs: TOOL_FILLER_DELAY_MS + 800 }));
      // Each streamed piece waits tokenDelayMs: the call comes after the thinking filler is due.
      upstream.setScenario({
        chat: {
          scripted: [{ toolCalls: [{ id: 'call_t1', name: 'look_up', arguments: '{}' }] }, { tokens: ['Found it.'] }],
          tokenDelayMs: THINKING_FILLER_DELAY_MS + 500,
        },
      });
      const from = s.sse.events.length;
      const spokenBefore = spoken.length;
      await chat('Look it up.');
      await idleAfter(from);
      expect(spoken.slice(spokenBefore)).toEqual([FILLER, 'Found it.']);
      expect(captionsSince(from)).toEqual([FILLER, 'Found it.']);
    } finally {
      upstream.setScenario({ chat: { scripted: [], tokenDelayMs: 0 } });
      await post(t.baseUrl, `/sessions/${s.sessionId}/customize`, { tools: [] });
    }
  });
});

describe('a chat turn without SERVICE_THINKING_FILLER_TEXT (the default)', () => {
  let upstream: OpenAiUpstream;
  let app: Awaited<ReturnType<typeof chatApp>>;

  beforeAll(async () => {
    upstream = await startOpenAiUpstream();
    app = await chatApp(upstream, {});
  });

  afterAll(async () => {
    app?.s.close();
    await app?.t.close();
    await upstream?.close();
  });

  it('a slow model: silence while it thinks, then the reply alone', async () => {
    upstream.setScenario({
      chat: { replyTokens: ['Paris is ', 'the capital.'], firstTokenDelayMs: SLOW_FIRST_TOKEN_MS, tokenDelayMs: 0 },
    });
    const { s, spoken, chat, idleAfter, captionsSince } = app;
    const from = s.sse.events.length;
    await chat('What is the capital of France?');
    await idleAfter(from);
    expect(spoken).toEqual(['Paris is the capital.']);
    expect(captionsSince(from)).toEqual(['Paris is the capital.']);
  });
});
