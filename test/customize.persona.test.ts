import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { json, post, startTestApp, tempDir, type TestApp } from './helpers/app.ts';
import { openSession, type LiveSession } from './helpers/conversation.ts';
import { startOpenAiUpstream, type OpenAiUpstream } from './fakes/openai-upstream.ts';

describe('persona customisation', () => {
  let upstream: OpenAiUpstream;
  let t: TestApp;
  let s: LiveSession;
  const dataDir = { value: '' };

  beforeAll(async () => {
    upstream = await startOpenAiUpstream({ chat: { replyTokens: ['Fine', '.'] } });
    dataDir.value = await tempDir('persona-');
    t = await startTestApp({ dataDir: dataDir.value, env: { SERVICE_LLM_BASE_URL: upstream.baseUrl } });
    s = await openSession(t);
  });
  afterAll(async () => {
    s?.close();
    await t?.close();
    await upstream?.close();
  });

  const lastSystemPrompt = () =>
    upstream.requests
      .filter((r) => r.chat)
      .at(-1)!
      .chat!.messages.find((m) => m.role === 'system')?.content;
  const chatOnce = async () => {
    const from = s.sse.events.length;
    expect((await post(t.baseUrl, `/sessions/${s.sessionId}/chat`, { prompt: 'How are you?' })).status).toBe(200);
    await s.sse.waitFor((e) => e.type === 'status' && e.data.stage === 'idle', 20_000, 'idle', from);
  };

  it('customize/prompt replaces the system prompt from the next chat turn', async () => {
    const res = await post(t.baseUrl, `/sessions/${s.sessionId}/customize/prompt`, {
      system_prompt: 'You are a pirate.',
    });
    expect(res.status).toBe(200);
    expect(await json(res)).toMatchObject({ system_prompt: 'You are a pirate.', tts_provider: 'builtin' });
    await chatOnce();
    expect(lastSystemPrompt()).toBe('You are a pirate.');
    expect((await json(await fetch(`${t.baseUrl}/sessions/${s.sessionId}`))).llm_system_prompt).toBe(
      'You are a pirate.',
    );
  });

  it('customize sets several attributes at once and validates them like session creation', async () => {
    const res = await post(t.baseUrl, `/sessions/${s.sessionId}/customize`, {
      system_prompt: 'Be brief.',
      tts_voice: 'en-US-GuyNeural',
    });
    expect(await json(res)).toEqual({
      system_prompt: 'Be brief.',
      tts_provider: 'builtin',
      tts_voice: 'en-US-GuyNeural',
      tts_model: null,
    });
    const info = await json(await fetch(`${t.baseUrl}/sessions/${s.sessionId}`));
    expect(info).toMatchObject({ tts_voice: 'en-US-GuyNeural', llm_system_prompt: 'Be brief.' });
    await chatOnce();
    expect(lastSystemPrompt()).toBe('Be brief.');
    // null restores the service default prompt.
    expect(
      (await json(await post(t.baseUrl, `/sessions/${s.sessionId}/customize`, { system_prompt: null }))).system_prompt,
    ).toBe(t.config.llmSystemPrompt);

    for (const [body, pattern] of [
      [{ tts_provider: 'acme' }, /unknown/],
      [{ tts_voice: 'xx-XX-NobodyNeural' }, /voice/i],
      [{ tts_provider: 'cloud_c' }, /not configured/],
      [{}, /must NOT have fewer than 1 properties|properties/],
      [{ colour: 'red' }, /additional/i],
    ] as const) {
      const bad = await post(t.baseUrl, `/sessions/${s.sessionId}/customize`, body);
      expect(bad.status).toBe(400);
      expect((await json(bad)).detail).toMatch(pattern);
    }
    expect(
      (await post(t.baseUrl, '/sessions/00000000-0000-4000-8000-000000000000/customize/prompt', { system_prompt: 'x' }))
        .status,
    ).toBe(404);
    expect((await post(t.baseUrl, `/sessions/${s.sessionId}/customize/prompt`, { system_prompt: '' })).status).toBe(
      400,
    );
  });

  it('session-less customize sets defaults for new sessions, persisted across a restart', async () => {
    const res = await post(t.baseUrl, '/customize', {
      system_prompt: 'Default persona.',
      tts_voice: 'en-GB-RyanNeural',
    });
    expect(res.status).toBe(200);
    expect(await json(res)).toMatchObject({
      system_prompt: 'Default persona.',
      tts_provider: 'builtin',
      tts_voice: 'en-GB-RyanNeural',
    });
    expect((await post(t.baseUrl, '/customize/prompt', { system_prompt: 'Default persona, v2.' })).status).toBe(200);
    expect((await post(t.baseUrl, '/customize', { tts_voice: 'xx-XX-NobodyNeural' })).status).toBe(400);

    const fresh = await json(await post(t.baseUrl, '/sessions', { avatar_id: 'demo-rt', model: 'rt' }));
    const info = await json(await fetch(`${t.baseUrl}/sessions/${fresh.session_id}`));
    expect(info).toMatchObject({ llm_system_prompt: 'Default persona, v2.', tts_voice: 'en-GB-RyanNeural' });
    // A request that names its own prompt still wins.
    const own = await json(
      await post(t.baseUrl, '/sessions', { avatar_id: 'demo-rt', model: 'rt', llm_system_prompt: 'Mine.' }),
    );
    expect((await json(await fetch(`${t.baseUrl}/sessions/${own.session_id}`))).llm_system_prompt).toBe('Mine.');

    s.close();
    await t.close();
    t = await startTestApp({ dataDir: dataDir.value, env: { SERVICE_LLM_BASE_URL: upstream.baseUrl } });
    const after = await json(await post(t.baseUrl, '/sessions', { avatar_id: 'demo-rt', model: 'rt' }));
    expect(await json(await fetch(`${t.baseUrl}/sessions/${after.session_id}`))).toMatchObject({
      llm_system_prompt: 'Default persona, v2.',
      tts_voice: 'en-GB-RyanNeural',
    });
    s = await openSession(t);
  });
});
