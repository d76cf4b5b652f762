import { existsSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { encodeWav } from '../actors/audio/wav.ts';
import { json, makeAvatarBundle, post, startTestApp, tempDir, type TestApp } from './helpers/app.ts';
import { startCosyVoiceServerFake, startXttsFake, tone, type FakeUpstream } from './fakes/tts-upstreams.ts';

const SAMPLE = encodeWav(tone(16000, 1, 240), 16000);

function referenceForm(fields: Record<string, string>, audio: Buffer | null = SAMPLE): FormData {
  const form = new FormData();
  for (const [name, value] of Object.entries(fields)) form.append(name, value);
  if (audio) form.append('audio', new Blob([new Uint8Array(audio)], { type: 'audio/wav' }), 'reference.wav');
  return form;
}

describe('persona reference audio: /sessions/{id}/customize/reference and /customize/reference', () => {
  let t: TestApp;
  let xtts: FakeUpstream;
  let cosy: FakeUpstream;

  const sendReference = (pathname: string, fields: Record<string, string>, audio?: Buffer | null) =>
    fetch(`${t.baseUrl}${pathname}`, { method: 'POST', body: referenceForm(fields, audio) });
  const createSession = async (body: Record<string, unknown> = {}) => {
    const res = await post(t.baseUrl, '/sessions', { avatar_id: 'card', model: 'mock', ...body });
    expect(res.status).toBe(200);
    return (await json(res)).session_id as string;
  };
  const describeSession = async (id: string) => json(await fetch(`${t.baseUrl}/sessions/${id}`));

  beforeAll(async () => {
    [xtts, cosy] = await Promise.all([startXttsFake(), startCosyVoiceServerFake()]);
    const avatarsDir = await tempDir('reference-avatars-');
    await makeAvatarBundle(avatarsDir, 'card');
    t = await startTestApp({
      avatarsDir,
      env: { SERVICE_TTS_LOCAL_CLONE_A_BASE_URL: xtts.url, SERVICE_TTS_LOCAL_CLONE_B_BASE_URL: cosy.url },
    });
  });
  afterAll(async () => {
    await t?.close();
    await Promise.all([xtts?.close(), cosy?.close()]);
  });

  it('clones the reference for a session and switches its provider and voice to the clone', async () => {
    const id = await createSession();
    const res = await sendReference(`/sessions/${id}/customize/reference`, { tts_provider: 'local_clone_a' });
    const body = await json(res);
    expect(res.status, JSON.stringify(body)).toBe(200);
    expect(body).toMatchObject({ tts_provider: 'local_clone_a', tts_model: 'en' });
    expect(body.tts_voice).toMatch(/^clone-[0-9a-f]+$/);
    expect(typeof body.system_prompt).toBe('string');
    expect(Number.isInteger(body.entry_id)).toBe(true);
    expect(existsSync(path.join(t.services.voiceDir, 'local_clone_a', `${body.tts_voice}.wav`))).toBe(true);

    expect(await describeSession(id)).toMatchObject({ tts_provider: 'local_clone_a', tts_voice: body.tts_voice });
    const { items } = await json(await fetch(`${t.baseUrl}/voices`));
    expect(items).toContainEqual(
      expect.objectContaining({
        id: body.entry_id,
        voice_id: body.tts_voice,
        display_label: `reference ${id}`,
        provider: 'local_clone_a',
      }),
    );

    // The next turn speaks with the reference voice.
    expect((await post(t.baseUrl, `/sessions/${id}/start`)).status).toBe(200);
    const reference = path.join(t.services.voiceDir, 'local_clone_a', `${body.tts_voice}.wav`);
    expect((await post(t.baseUrl, `/sessions/${id}/speak`, { text: 'Continuity check.' })).status).toBe(200);
    const deadline = Date.now() + 10_000;
    const matching = () =>
      xtts.requests.filter((r) => r.path === '/tts_to_audio/' && r.json?.speaker_wav === reference);
    while (matching().length === 0 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 25));
    expect(matching().map((r) => r.json.text)).toContain('Continuity check.');
    await fetch(`${t.baseUrl}/sessions/${id}`, { method: 'DELETE' });
    expect(xtts.complaints).toEqual([]);
  }, 20_000);

  it('keeps the session provider when it can clone and no tts_provider is given', async () => {
    const id = await createSession({ tts_provider: 'local_clone_b' });
    const body = await json(await sendReference(`/sessions/${id}/customize/reference`, {}));
    expect(body).toMatchObject({ tts_provider: 'local_clone_b', tts_model: 'CosyVoice2-0.5B' });
    expect(await describeSession(id)).toMatchObject({ tts_provider: 'local_clone_b', tts_voice: body.tts_voice });
    await fetch(`${t.baseUrl}/sessions/${id}`, { method: 'DELETE' });
  });

  it.each([
    ['a session provider that cannot clone', {}, SAMPLE, /cannot clone/],
    ['a tts_provider that cannot clone', { tts_provider: 'cloud_c' }, SAMPLE, /cannot clone/],
    ['an unknown tts_provider', { tts_provider: 'acme' }, SAMPLE, /cannot clone/],
    ['cloud_a without target_model', { tts_provider: 'cloud_a' }, SAMPLE, /target_model/],
    ['an unconfigured provider', { tts_provider: 'cloud_d' }, SAMPLE, /not configured/],
    ['missing audio', { tts_provider: 'local_clone_a' }, null, /audio/],
    ['too short audio', { tts_provider: 'local_clone_a' }, SAMPLE.subarray(0, 100), /too short/],
  ])('answers 400 for %s and leaves the session as it was', async (_name, fields, audio, pattern) => {
    const id = await createSession();
    const res = await sendReference(
      `/sessions/${id}/customize/reference`,
      fields as Record<string, string>,
      audio as Buffer | null,
    );
    expect(res.status).toBe(400);
    expect((await json(res)).detail).toMatch(pattern);
    expect(await describeSession(id)).toMatchObject({ tts_provider: 'builtin' });
    await fetch(`${t.baseUrl}/sessions/${id}`, { method: 'DELETE' });
  });

  it('answers 404 for an unknown session and 502 with the upstream text when the provider fails', async () => {
    const missing = await sendReference('/sessions/00000000-0000-4000-8000-000000000000/customize/reference', {
      tts_provider: 'local_clone_a',
    });
    expect(missing.status).toBe(404);

    const id = await createSession();
    const entriesBefore = (await json(await fetch(`${t.baseUrl}/voices`))).items.length;
    xtts.scenario = 'server_error';
    try {
      const res = await sendReference(`/sessions/${id}/customize/reference`, { tts_provider: 'local_clone_a' });
      expect(res.status).toBe(502);
      expect((await json(res)).detail).toMatch(/Internal Server Error/);
    } finally {
      xtts.scenario = 'ok';
    }
    expect(await describeSession(id)).toMatchObject({ tts_provider: 'builtin' });
    expect((await json(await fetch(`${t.baseUrl}/voices`))).items.length).toBe(entriesBefore);
    await fetch(`${t.baseUrl}/sessions/${id}`, { method: 'DELETE' });
  });

  it('sets the service-wide default voice: new sessions and previews use the clone', async () => {
    const res = await sendReference('/customize/reference', {
      tts_provider: 'local_clone_b',
      target_model: 'CosyVoice2-0.5B',
    });
    const body = await json(res);
    expect(res.status, JSON.stringify(body)).toBe(200);
    expect(body).toMatchObject({ tts_provider: 'local_clone_b', tts_model: 'CosyVoice2-0.5B' });
    const { items } = await json(await fetch(`${t.baseUrl}/voices`));
    expect(items).toContainEqual(
      expect.objectContaining({
        id: body.entry_id,
        voice_id: body.tts_voice,
        display_label: expect.stringMatching(/^reference default/),
      }),
    );

    try {
      const id = await createSession();
      expect(await describeSession(id)).toMatchObject({ tts_provider: 'local_clone_b', tts_voice: body.tts_voice });
      await fetch(`${t.baseUrl}/sessions/${id}`, { method: 'DELETE' });

      const before = cosy.requests.length;
      const preview = await post(t.baseUrl, '/tts/preview', { text: 'Default voice.' });
      expect(preview.status).toBe(200);
      const sent = cosy.requests.slice(before);
      // A clone goes to the cross-lingual (prompt WAV) endpoint, not a stock speaker.
      expect(sent.map((r) => r.path)).toEqual(['/inference_cross_lingual']);
      expect(cosy.complaints).toEqual([]);
    } finally {
      await post(t.baseUrl, '/customize', { tts_provider: 'builtin', tts_voice: null, tts_model: null });
    }
  });

  it('refuses a default reference for a provider that cannot clone', async () => {
    const res = await sendReference('/customize/reference', { tts_provider: 'builtin' });
    expect(res.status).toBe(400);
    expect((await json(res)).detail).toMatch(/cannot clone/);
  });
});
