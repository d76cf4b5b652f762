import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { refusalDetail, type RequestEventType } from '../machines/session.machine.ts';
import { makeAvatarBundle, startTestApp, tempDir, type TestApp } from './helpers/app.ts';
import { tone, wavBytes } from './helpers/conversation.ts';
import { sessionParts } from '../src/sessions/session.ts';

/**
 * Every 409 a session route gives is the machine's answer: the request is refused exactly when the
 * machine's snapshot cannot take its event, and the detail is `refusalDetail` of that snapshot. Driven with
 * `fastify.inject` (no socket needed); the audio WebSocket's refusals are covered in audio-stream.websocket.
 */

/** A speak of this text keeps the builtin voice talking for several seconds: long enough to be busy. */
const LONG_TEXT =
  'This sentence is long enough to keep the avatar talking for several seconds, so every other request must wait for it.';

/** A multipart body as fetch would send it, for inject. */
async function multipart(
  fields: Record<string, string>,
  audio: Buffer,
): Promise<{ payload: Buffer; headers: Record<string, string> }> {
  const form = new FormData();
  form.append('audio', new Blob([new Uint8Array(audio)]), 'audio.wav');
  for (const [name, value] of Object.entries(fields)) form.append(name, value);
  const request = new Request('http://localhost/', { method: 'POST', body: form });
  return {
    payload: Buffer.from(await request.arrayBuffer()),
    headers: { 'content-type': request.headers.get('content-type')! },
  };
}

describe('409s answered from the machine (fastify.inject)', () => {
  let t: TestApp;
  let clip: Buffer;

  beforeAll(async () => {
    const avatarsDir = await tempDir('admission-409-');
    await makeAvatarBundle(avatarsDir, 'card');
    t = await startTestApp({
      avatarsDir,
      withRepoAvatars: false,
      // Configured but never reached: every chat here is refused before the language model is asked.
      env: { SERVICE_LLM_BASE_URL: 'http://127.0.0.1:9/v1', SERVICE_ASR_BASE_URL: 'http://127.0.0.1:9/v1' },
    });
    clip = wavBytes(tone(16_000, 300), 16_000);
  });
  afterAll(async () => t?.close());

  async function request(method: 'GET' | 'POST', url: string, body?: object | 'clip') {
    const options = body === 'clip' ? await multipart({ trigger_chat: 'false' }, clip) : body ? { payload: body } : {};
    const res = await t.app.inject({ method, url, ...options });
    return { status: res.statusCode, body: res.body ? JSON.parse(res.body) : null };
  }

  /** Each client call of a session, with the machine event it becomes. */
  const CALLS: Array<[string, RequestEventType, object | 'clip' | undefined]> = [
    ['start', 'START', undefined],
    ['pause', 'PAUSE', undefined],
    ['resume', 'RESUME', undefined],
    ['speak', 'SPEAK', { text: 'Hello.' }],
    ['chat', 'CHAT', { prompt: 'Hello?' }],
    ['speak_audio', 'SPEAK_AUDIO', 'clip'],
    ['speak_rt_audio', 'SPEAK_AUDIO', 'clip'],
    ['transcribe', 'TRANSCRIBE', 'clip'],
  ];

  /** Calls every route the machine refuses in the session's current state; each must be its 409 and change nothing. */
  async function expectRefusals(id: string, refused: string[]): Promise<void> {
    const session = t.services.supervisor.liveSession(id)!;
    for (const [path, type, body] of CALLS.filter(([path]) => refused.includes(path))) {
      const before = sessionParts(session).actor.getSnapshot();
      const res = await request('POST', `/sessions/${id}/${path}`, body);
      expect(res.status, path).toBe(409);
      expect(res.body.detail, path).toBe(refusalDetail(before, type));
      expect(sessionParts(session).actor.getSnapshot().value, path).toEqual(before.value);
    }
  }

  async function created(): Promise<string> {
    const res = await request('POST', '/sessions', { avatar_id: 'card', model: 'mock' });
    expect(res.status).toBe(200);
    return res.body.session_id;
  }

  it('created: everything but start is refused as not started', async () => {
    const id = await created();
    await expectRefusals(id, ['pause', 'resume', 'speak', 'chat', 'speak_audio', 'speak_rt_audio', 'transcribe']);
    expect((await request('POST', `/sessions/${id}/speak`, { text: 'x' })).body.detail).toMatch(/not started/);
    expect((await request('POST', `/sessions/${id}/start`)).status).toBe(200);
  });

  it('running and idle: start and resume are refused; work and pause are taken', async () => {
    const id = await created();
    await request('POST', `/sessions/${id}/start`);
    await expectRefusals(id, ['start', 'resume']);
    expect((await request('POST', `/sessions/${id}/pause`)).status).toBe(200);
  });

  it('paused: start, pause and all work are refused as paused; resume is taken', async () => {
    const id = await created();
    await request('POST', `/sessions/${id}/start`);
    await request('POST', `/sessions/${id}/pause`);
    await expectRefusals(id, ['start', 'pause', 'speak', 'chat', 'speak_audio', 'speak_rt_audio', 'transcribe']);
    expect((await request('POST', `/sessions/${id}/speak`, { text: 'x' })).body.detail).toMatch(/paused/);
    expect((await request('POST', `/sessions/${id}/resume`)).status).toBe(200);
  });

  it('busy with a speak: every other piece of work is refused naming the speak; pause still works', async () => {
    const id = await created();
    await request('POST', `/sessions/${id}/start`);
    expect((await request('POST', `/sessions/${id}/speak`, { text: LONG_TEXT })).status).toBe(200);
    await expectRefusals(id, ['start', 'resume', 'speak', 'chat', 'speak_audio', 'speak_rt_audio', 'transcribe']);
    expect((await request('POST', `/sessions/${id}/chat`, { prompt: 'x' })).body.detail).toBe(
      'a previous speak is in flight (call interrupt first)',
    );
    // After an interrupt the session is not busy any more: new work is taken at once.
    expect((await request('POST', `/sessions/${id}/interrupt`)).body).toEqual({ interrupted: true });
    expect((await request('POST', `/sessions/${id}/speak`, { text: 'Next.' })).status).toBe(200);
    expect((await request('POST', `/sessions/${id}/pause`)).status).toBe(200);
  });

  it('a request refused for its body is a 400 whatever the state; the machine is asked only about valid requests', async () => {
    const id = await created();
    const res = await request('POST', `/sessions/${id}/speak`, { text: 'x', tts_provider: 'nope' });
    expect(res.status).toBe(400);
  });

  it('a deleted session answers 409 terminated (its tombstone), an unknown one 404', async () => {
    const id = await created();
    expect((await t.app.inject({ method: 'DELETE', url: `/sessions/${id}` })).statusCode).toBe(200);
    const res = await request('POST', `/sessions/${id}/speak`, { text: 'x' });
    expect(res).toMatchObject({ status: 409, body: { detail: 'session is terminated' } });
    expect((await request('POST', '/sessions/00000000-0000-4000-8000-000000000000/speak', { text: 'x' })).status).toBe(
      404,
    );
  });
});
