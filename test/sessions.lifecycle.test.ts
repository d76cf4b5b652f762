import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { json, makeAvatarBundle, post, startTestApp, tempDir, type TestApp } from './helpers/app.ts';

const MINIMAL_OFFER =
  'v=0\r\no=- 1 2 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\nm=video 9 UDP/TLS/RTP/SAVPF 96\r\nc=IN IP4 0.0.0.0\r\na=mid:0\r\na=recvonly\r\na=rtpmap:96 VP8/90000\r\n';

describe('session lifecycle over REST (spec 3.1, 4.3, 7)', () => {
  let t: TestApp;
  const create = async (body: Record<string, unknown>) => post(t.baseUrl, '/sessions', body);

  beforeAll(async () => {
    const avatarsDir = await tempDir('sessions-');
    await makeAvatarBundle(avatarsDir, 'card', { model_type: 'rt' });
    await makeAvatarBundle(avatarsDir, 'photo', { model_type: 'lipsync' });
    t = await startTestApp({ avatarsDir, env: { SERVICE_MAX_SESSIONS: '2' } });
  });
  afterAll(async () => t?.close());

  it('creates a session with status created and reports its metadata', async () => {
    const res = await create({ avatar_id: 'card', model: 'mock', tts_voice: 'en-US-GuyNeural' });
    expect(res.status).toBe(200);
    const body = await json(res);
    expect(body.status).toBe('created');
    expect(body.session_id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    const info = await json(await fetch(`${t.baseUrl}/sessions/${body.session_id}`));
    expect(info).toMatchObject({
      session_id: body.session_id,
      state: 'created',
      avatar_id: 'card',
      model: 'mock',
      tts_provider: 'builtin',
      tts_voice: 'en-US-GuyNeural',
      pipeline: 'idle',
    });
    await fetch(`${t.baseUrl}/sessions/${body.session_id}`, { method: 'DELETE' });
  });

  it.each([
    [{ avatar_id: 'nope', model: 'mock' }, /avatar_id/],
    [{ avatar_id: 'card', model: 'lipsync_b' }, /not connected/],
    [{ avatar_id: 'card', model: 'no-such-model' }, /model/],
    [{ avatar_id: 'card', model: 'mock', tts_provider: 'acme' }, /tts_provider/],
    [{ avatar_id: 'card', model: 'mock', tts_voice: 'xx-XX-NobodyNeural' }, /voice/i],
    [{ avatar_id: 'card', model: 'lipsync' }, /cannot render/],
    [{ avatar_id: 'card', model: 'mock', tts_provider: 'cloud_c' }, /not configured/],
    [{ model: 'mock' }, /avatar_id/],
    [{ avatar_id: 'card', model: 'mock', extra: 1 }, /additional/i],
  ])('answers 400 with {detail} for %j', async (body, pattern) => {
    const res = await create(body);
    expect(res.status).toBe(400);
    const error = await json(res);
    expect(error.detail).toMatch(pattern);
  });

  it('answers 400 for a non-JSON body, never 500', async () => {
    const res = await fetch(`${t.baseUrl}/sessions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{oops',
    });
    expect(res.status).toBe(400);
    expect(await json(res)).toHaveProperty('detail');
  });

  it('starts once: 200 then 409; 409 after terminate; 404 for unknown ids', async () => {
    const { session_id } = await json(await create({ avatar_id: 'card', model: 'mock' }));
    const first = await post(t.baseUrl, `/sessions/${session_id}/start`);
    expect(first.status).toBe(200);
    expect(await json(first)).toEqual({ status: 'running' });
    const again = await post(t.baseUrl, `/sessions/${session_id}/start`);
    expect(again.status).toBe(409);
    expect((await json(again)).detail).toMatch(/running/);

    const del = await fetch(`${t.baseUrl}/sessions/${session_id}`, { method: 'DELETE' });
    expect(del.status).toBe(200);
    expect(await json(del)).toEqual({ status: 'terminated' });
    expect((await post(t.baseUrl, `/sessions/${session_id}/start`)).status).toBe(409);
    const offer = await post(t.baseUrl, `/sessions/${session_id}/webrtc/offer`, { sdp: MINIMAL_OFFER, type: 'offer' });
    expect(offer.status).toBe(409);
    const info = await json(await fetch(`${t.baseUrl}/sessions/${session_id}`));
    expect(info.state).toBe('terminated');
    expect(info.llm_system_prompt).toBeNull();
    expect((await fetch(`${t.baseUrl}/sessions/${session_id}`, { method: 'DELETE' })).status).toBe(200);

    const unknown = '00000000-0000-4000-8000-000000000000';
    expect((await fetch(`${t.baseUrl}/sessions/${unknown}`)).status).toBe(404);
    expect((await post(t.baseUrl, `/sessions/${unknown}/start`)).status).toBe(404);
    expect((await fetch(`${t.baseUrl}/sessions/${unknown}`, { method: 'DELETE' })).status).toBe(404);
    expect(
      (await post(t.baseUrl, `/sessions/${unknown}/webrtc/offer`, { sdp: MINIMAL_OFFER, type: 'offer' })).status,
    ).toBe(404);
    expect((await fetch(`${t.baseUrl}/sessions/not-a-uuid`)).status).toBe(400);
  });

  it('rejects malformed SDP with 400', async () => {
    const { session_id } = await json(await create({ avatar_id: 'card', model: 'mock' }));
    for (const body of [
      { sdp: 'hello', type: 'offer' },
      { sdp: 'v=0\r\nnothing', type: 'offer' },
      { sdp: MINIMAL_OFFER, type: 'answer' },
      { type: 'offer' },
    ]) {
      const res = await post(t.baseUrl, `/sessions/${session_id}/webrtc/offer`, body);
      expect(res.status).toBe(400);
      expect(await json(res)).toHaveProperty('detail');
    }
    await fetch(`${t.baseUrl}/sessions/${session_id}`, { method: 'DELETE' });
  });

  it('pauses and resumes; speak answers 409 before start and while paused', async () => {
    const { session_id } = await json(await create({ avatar_id: 'card', model: 'mock' }));
    expect((await post(t.baseUrl, `/sessions/${session_id}/speak`, { text: 'hi' })).status).toBe(409);
    expect((await post(t.baseUrl, `/sessions/${session_id}/pause`)).status).toBe(409);
    await post(t.baseUrl, `/sessions/${session_id}/start`);
    expect(await json(await post(t.baseUrl, `/sessions/${session_id}/pause`))).toEqual({ status: 'paused' });
    expect((await json(await fetch(`${t.baseUrl}/sessions/${session_id}`))).state).toBe('paused');
    const speak = await post(t.baseUrl, `/sessions/${session_id}/speak`, { text: 'hi' });
    expect(speak.status).toBe(409);
    expect((await json(speak)).detail).toMatch(/paused/);
    expect((await post(t.baseUrl, `/sessions/${session_id}/start`)).status).toBe(409);
    expect(await json(await post(t.baseUrl, `/sessions/${session_id}/resume`))).toEqual({ status: 'running' });
    expect((await post(t.baseUrl, `/sessions/${session_id}/resume`)).status).toBe(409);
    await fetch(`${t.baseUrl}/sessions/${session_id}`, { method: 'DELETE' });
  });

  it('enforces SERVICE_MAX_SESSIONS on start with 503 and Retry-After', async () => {
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) ids.push((await json(await create({ avatar_id: 'card', model: 'mock' }))).session_id);
    expect((await post(t.baseUrl, `/sessions/${ids[0]}/start`)).status).toBe(200);
    expect((await post(t.baseUrl, `/sessions/${ids[1]}/start`)).status).toBe(200);
    const queue = await json(await fetch(`${t.baseUrl}/queue/status`));
    expect(queue).toMatchObject({ capacity: 2, active: 2, available: 0 });
    const full = await post(t.baseUrl, `/sessions/${ids[2]}/start`);
    expect(full.status).toBe(503);
    expect(full.headers.get('retry-after')).toMatch(/^\d+$/);
    expect((await json(full)).detail).toMatch(/capacity/);
    await fetch(`${t.baseUrl}/sessions/${ids[0]}`, { method: 'DELETE' });
    expect((await post(t.baseUrl, `/sessions/${ids[2]}/start`)).status).toBe(200);
    for (const id of ids) await fetch(`${t.baseUrl}/sessions/${id}`, { method: 'DELETE' });
  });
});
