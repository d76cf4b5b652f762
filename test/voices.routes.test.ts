import { existsSync } from 'node:fs';
import { readdir } from 'node:fs/promises';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { encodeWav, parseWav } from '../actors/audio/wav.ts';
import { VoiceUploads } from '../src/voices/uploads.ts';
import { json, makeAvatarBundle, post, startTestApp, tempDir, type TestApp } from './helpers/app.ts';
import {
  isCloneSample,
  startCosyVoiceServerFake,
  startDashscopeFake,
  startXttsFake,
  tone,
  type DashscopeFake,
  type FakeUpstream,
} from './fakes/tts-upstreams.ts';

const DASHSCOPE_KEY = 'sk-dashscope-test';
const TWELVE_MB = 12 * 1024 * 1024;
/** One second of 16 kHz speech-like tone as WAV: well above the 256-byte minimum. */
const SAMPLE = encodeWav(tone(16000, 1, 220), 16000);

function cloneForm(fields: Record<string, string>, audio?: Buffer | null, filename = 'sample.wav'): FormData {
  const form = new FormData();
  for (const [name, value] of Object.entries(fields)) form.append(name, value);
  if (audio) form.append('audio', new Blob([new Uint8Array(audio)], { type: 'audio/wav' }), filename);
  return form;
}

describe('voice catalog routes (spec 2.4, 4.10, 5.5, 7, 8)', () => {
  let t: TestApp;
  let dashscope: DashscopeFake;
  let xtts: FakeUpstream;
  let cosy: FakeUpstream;

  const clone = (fields: Record<string, string>, audio: Buffer | null = SAMPLE) =>
    fetch(`${t.baseUrl}/voices/clone`, { method: 'POST', body: cloneForm(fields, audio) });
  const list = async (query = '') => json(await fetch(`${t.baseUrl}/voices${query}`));
  const entryCount = async () => (await list()).items.length;

  beforeAll(async () => {
    [dashscope, xtts, cosy] = await Promise.all([
      startDashscopeFake({ apiKey: DASHSCOPE_KEY }),
      startXttsFake(),
      startCosyVoiceServerFake(),
    ]);
    const avatarsDir = await tempDir('voices-avatars-');
    await makeAvatarBundle(avatarsDir, 'card');
    t = await startTestApp({
      avatarsDir,
      env: {
        SERVICE_TTS_CLOUD_A_API_KEY: DASHSCOPE_KEY,
        SERVICE_TTS_CLOUD_A_BASE_URL: dashscope.url,
        SERVICE_TTS_LOCAL_CLONE_A_BASE_URL: xtts.url,
        SERVICE_TTS_LOCAL_CLONE_B_BASE_URL: cosy.url,
      },
    });
    // cloud_b downloads the sample from the service itself; the port is only known after listen.
    (t.services.config as { publicBaseUrl: string }).publicBaseUrl = t.baseUrl;
  });
  afterAll(async () => {
    await t?.close();
    await Promise.all([dashscope?.close(), xtts?.close(), cosy?.close()]);
  });

  it('starts with an empty catalog; filters by provider; unknown filter → 400', async () => {
    expect((await list()).items).toEqual([]);
    expect(await list('?provider=builtin')).toEqual({
      items: [],
      providers: [
        { id: 'builtin', service: 'Built-in offline voices (flite and eSpeak NG)', configured: true, can_clone: false },
      ],
    });
    const bad = await fetch(`${t.baseUrl}/voices?provider=acme`);
    expect(bad.status).toBe(400);
    expect((await json(bad)).detail).toMatch(/acme/);
  });

  it('clones with every configured provider and lists only the public fields', async () => {
    const cases: Array<{
      provider: string;
      target_model: string;
      display_label: string;
      prefix?: string;
      preferred_name?: string;
      voice: RegExp;
    }> = [
      { provider: 'local_clone_a', target_model: 'en', display_label: 'Anna', voice: /^clone-[0-9a-f]+$/ },
      { provider: 'local_clone_b', target_model: 'CosyVoice2-0.5B', display_label: 'Bert', voice: /^clone-[0-9a-f]+$/ },
      {
        provider: 'cloud_a',
        target_model: 'qwen3-tts-vc-realtime',
        display_label: 'Cleo',
        preferred_name: 'cleo',
        voice: /cleo/,
      },
      {
        provider: 'cloud_b',
        target_model: 'cosyvoice-v2',
        display_label: 'Dora',
        prefix: 'dora',
        voice: /^cosyvoice-v2-dora-/,
      },
    ];
    const created: any[] = [];
    for (const { voice, ...fields } of cases) {
      const res = await clone(fields as Record<string, string>);
      const body = await json(res);
      expect(res.status, JSON.stringify(body)).toBe(200);
      expect(body).toMatchObject({
        ok: true,
        provider: fields.provider,
        target_model: fields.target_model,
        display_label: fields.display_label,
      });
      expect(body.voice_id).toMatch(voice);
      expect(Number.isInteger(body.entry_id)).toBe(true);
      expect(typeof body.message).toBe('string');
      created.push(body);
    }
    expect(dashscope.complaints).toEqual([]);
    expect(xtts.complaints).toEqual([]);
    expect(cosy.complaints).toEqual([]);

    const { items } = await list();
    const mine = items.filter((item: { id: number }) => created.some((c) => c.entry_id === item.id));
    expect(mine).toHaveLength(4);
    for (const item of mine) {
      expect(Object.keys(item).sort()).toEqual([
        'display_label',
        'id',
        'provider',
        'source',
        'target_model',
        'user_id',
        'voice_id',
      ]);
      expect(item).toMatchObject({ source: 'clone', user_id: null });
    }
    const onlyB = await list('?provider=local_clone_b');
    expect(onlyB.items.map((item: { voice_id: string }) => item.voice_id)).toEqual([created[1].voice_id]);

    // The same label again gets a timestamp suffix.
    const again = await json(await clone({ provider: 'local_clone_a', target_model: 'en', display_label: 'Anna' }));
    expect(again.display_label).toMatch(/^Anna \(\d{8}-\d{6}\)$/);
  });

  it('serves the cloud_b sample at /voice-uploads/{token} as the 24 kHz WAV the provider fetched', async () => {
    const enrol = dashscope.requests.filter((r) => r.json?.input?.action === 'create_voice').at(-1)!;
    const url = new URL(enrol.json.input.url);
    expect(`${url.origin}`).toBe(t.baseUrl);
    const token = url.pathname.split('/').at(-1)!;
    expect(token).toMatch(/^[0-9a-f]{32}$/);
    const res = await fetch(`${t.baseUrl}/voice-uploads/${token}`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^audio\/wav/);
    const bytes = Buffer.from(await res.arrayBuffer());
    expect(isCloneSample(bytes)).toBe(true);
    expect(parseWav(bytes).pcm.length).toBe(24000);
  });

  it.each([
    ['a malformed token', 'not-a-token'],
    ['an upper-case token', 'A'.repeat(32)],
    ['a 31-character token', 'a'.repeat(31)],
    ['an unknown well-formed token', '0'.repeat(32)],
  ])('answers 404 for %s', async (_name, token) => {
    const res = await fetch(`${t.baseUrl}/voice-uploads/${token}`);
    expect(res.status).toBe(404);
    expect(await json(res)).toHaveProperty('detail');
  });

  it('answers 404 once a sample expired and the file is gone from disk', async () => {
    let now = Date.now();
    const dir = await tempDir('uploads-clock-');
    const original = t.services.uploads;
    // Same class the app uses, on a clock the test moves.
    t.services.uploads = new VoiceUploads({ dir, now: () => now });
    try {
      const token = await t.services.uploads.store(encodeWav(tone(24000, 0.2), 24000));
      expect((await fetch(`${t.baseUrl}/voice-uploads/${token}`)).status).toBe(200);
      now += 299_000;
      expect((await fetch(`${t.baseUrl}/voice-uploads/${token}`)).status).toBe(200);
      now += 2_000;
      const expired = await fetch(`${t.baseUrl}/voice-uploads/${token}`);
      expect(expired.status).toBe(404);
      expect(await readdir(dir)).toEqual([]);
    } finally {
      t.services.uploads = original;
    }
  });

  it.each([
    [
      'an unsupported provider',
      { provider: 'builtin', target_model: 'x', display_label: 'L' },
      SAMPLE,
      /does not support cloning/,
    ],
    [
      'an unknown provider',
      { provider: 'acme', target_model: 'x', display_label: 'L' },
      SAMPLE,
      /does not support cloning/,
    ],
    [
      'an unconfigured provider',
      { provider: 'cloud_d', target_model: 'fal-ai/f5-tts', display_label: 'L' },
      SAMPLE,
      /not configured/,
    ],
    ['a missing provider', { target_model: 'x', display_label: 'L' }, SAMPLE, /provider/],
    ['a missing target_model', { provider: 'local_clone_a', display_label: 'L' }, SAMPLE, /target_model/],
    ['a missing display_label', { provider: 'local_clone_a', target_model: 'en' }, SAMPLE, /display_label/],
    ['missing audio', { provider: 'local_clone_a', target_model: 'en', display_label: 'L' }, null, /audio/],
    [
      '255 bytes of audio',
      { provider: 'local_clone_a', target_model: 'en', display_label: 'L' },
      SAMPLE.subarray(0, 255),
      /too short/,
    ],
    [
      'audio that is not audio',
      { provider: 'local_clone_a', target_model: 'en', display_label: 'L' },
      Buffer.alloc(4096, 7),
      /./,
    ],
    [
      'prefix for a provider other than cloud_b',
      { provider: 'local_clone_a', target_model: 'en', display_label: 'L', prefix: 'abc' },
      SAMPLE,
      /prefix/,
    ],
    [
      'a malformed cloud_b prefix',
      { provider: 'cloud_b', target_model: 'cosyvoice-v2', display_label: 'L', prefix: 'Bad-Prefix!' },
      SAMPLE,
      /prefix/,
    ],
    [
      'preferred_name for a provider other than cloud_a',
      { provider: 'local_clone_b', target_model: 'm', display_label: 'L', preferred_name: 'x' },
      SAMPLE,
      /preferred_name/,
    ],
  ])('answers 400 for %s and writes no entry', async (_name, fields, audio, pattern) => {
    const before = await entryCount();
    const res = await clone(fields as Record<string, string>, audio as Buffer | null);
    expect(res.status).toBe(400);
    expect((await json(res)).detail).toMatch(pattern);
    expect(await entryCount()).toBe(before);
  });

  it('refuses a sample of 12 MB + 1 byte with 400 and accepts one of exactly 12 MB', async () => {
    const before = await entryCount();
    // A valid WAV so that only the size decides: 24 kHz mono 16-bit, padded to the exact byte count.
    const samples = (TWELVE_MB - 44) / 2;
    const exact = encodeWav(tone(24000, samples / 24000, 180), 24000);
    expect(exact.length).toBe(TWELVE_MB);
    const over = Buffer.concat([exact, Buffer.alloc(1)]);
    const refused = await clone({ provider: 'local_clone_a', target_model: 'en', display_label: 'big' }, over);
    expect(refused.status).toBe(400);
    expect((await json(refused)).detail).toMatch(/12 MB/);
    expect(await entryCount()).toBe(before);

    const accepted = await clone({ provider: 'local_clone_a', target_model: 'en', display_label: 'big' }, exact);
    expect(accepted.status).toBe(200);
    expect(await entryCount()).toBe(before + 1);
    // The service still answers normally afterwards.
    expect((await fetch(`${t.baseUrl}/healthz`)).status).toBe(200);
  }, 20_000);

  it('answers 502 with the upstream text on provider rejection and leaves nothing behind', async () => {
    const before = await entryCount();
    const referenceDir = path.join(t.services.voiceDir, 'local_clone_a');
    const referencesBefore = existsSync(referenceDir) ? (await readdir(referenceDir)).length : 0;
    xtts.scenario = 'server_error';
    try {
      const res = await clone({ provider: 'local_clone_a', target_model: 'en', display_label: 'Down' });
      expect(res.status).toBe(502);
      expect((await json(res)).detail).toMatch(/Internal Server Error/);
    } finally {
      xtts.scenario = 'ok';
    }
    expect((await readdir(referenceDir)).length).toBe(referencesBefore);

    dashscope.scenario = 'unauthorized';
    try {
      const res = await clone({ provider: 'cloud_a', target_model: 'qwen3-tts-vc-realtime', display_label: 'Denied' });
      expect(res.status).toBe(502);
      expect((await json(res)).detail).toMatch(/Invalid API-key provided/);
    } finally {
      dashscope.scenario = 'ok';
    }
    expect(await entryCount()).toBe(before);
  });

  it('deletes entries: {deleted: true}, then 404; non-integer ids → 400; the local reference WAV is removed', async () => {
    const created = await json(await clone({ provider: 'local_clone_a', target_model: 'en', display_label: 'Temp' }));
    const reference = path.join(t.services.voiceDir, 'local_clone_a', `${created.voice_id}.wav`);
    expect(existsSync(reference)).toBe(true);
    for (const bad of ['abc', '1.5', '-1', '1e3']) {
      const res = await fetch(`${t.baseUrl}/voices/${bad}`, { method: 'DELETE' });
      expect(res.status, bad).toBe(400);
      expect(await json(res)).toHaveProperty('detail');
    }
    const missing = await fetch(`${t.baseUrl}/voices/999999`, { method: 'DELETE' });
    expect(missing.status).toBe(404);

    const deleted = await fetch(`${t.baseUrl}/voices/${created.entry_id}`, { method: 'DELETE' });
    expect(deleted.status).toBe(200);
    expect(await json(deleted)).toEqual({ deleted: true });
    expect(existsSync(reference)).toBe(false);
    expect((await list()).items.some((item: { id: number }) => item.id === created.entry_id)).toBe(false);
    expect((await fetch(`${t.baseUrl}/voices/${created.entry_id}`, { method: 'DELETE' })).status).toBe(404);
  });

  it('uses a cloned voice_id as session tts_voice, as voice of speak and as voice of preview', async () => {
    const created = await json(
      await clone({ provider: 'local_clone_a', target_model: 'en', display_label: 'Speaker' }),
    );
    const reference = path.join(t.services.voiceDir, 'local_clone_a', `${created.voice_id}.wav`);
    const synthesisFor = () =>
      xtts.requests.filter((r) => r.path === '/tts_to_audio/' && r.json?.speaker_wav === reference);

    const previewed = await post(t.baseUrl, '/tts/preview', {
      text: 'Preview me.',
      tts_provider: 'local_clone_a',
      voice: created.voice_id,
    });
    expect(previewed.status).toBe(200);
    expect(parseWav(Buffer.from(await previewed.arrayBuffer())).sampleRate).toBe(16000);
    expect(synthesisFor()).toHaveLength(1);

    const session = await post(t.baseUrl, '/sessions', {
      avatar_id: 'card',
      model: 'mock',
      tts_provider: 'local_clone_a',
      tts_voice: created.voice_id,
    });
    expect(session.status).toBe(200);
    const { session_id } = await json(session);
    expect(await json(await fetch(`${t.baseUrl}/sessions/${session_id}`))).toMatchObject({
      tts_provider: 'local_clone_a',
      tts_voice: created.voice_id,
    });
    expect((await post(t.baseUrl, `/sessions/${session_id}/start`)).status).toBe(200);

    // The session's own voice, then the same voice given per request.
    for (const body of [
      { text: 'From the session voice.' },
      { text: 'From the request voice.', tts_provider: 'local_clone_a', voice: created.voice_id },
    ]) {
      const before = synthesisFor().length;
      const spoken = await post(t.baseUrl, `/sessions/${session_id}/speak`, body);
      expect(spoken.status).toBe(200);
      const deadline = Date.now() + 10_000;
      while (synthesisFor().length === before && Date.now() < deadline)
        await new Promise((resolve) => setTimeout(resolve, 25));
      expect(synthesisFor().map((r) => r.json.text)).toContain(body.text);
      // Let the turn finish before the next one (one speak in flight per session).
      while (Date.now() < deadline) {
        const info = await json(await fetch(`${t.baseUrl}/sessions/${session_id}`));
        if (info.pipeline === 'idle') break;
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    }
    await fetch(`${t.baseUrl}/sessions/${session_id}`, { method: 'DELETE' });
    expect(xtts.complaints).toEqual([]);
  }, 25_000);

  it('documents the routes in the OpenAPI document', async () => {
    const doc = await json(await fetch(`${t.baseUrl}/openapi.json`));
    expect(Object.keys(doc.paths)).toEqual(
      expect.arrayContaining(['/voices', '/voices/clone', '/voices/{entry_id}', '/voice-uploads/{token}']),
    );
    expect(Object.keys(doc.paths['/voices/clone'].post.responses)).toEqual(
      expect.arrayContaining(['200', '400', '502']),
    );
    expect(Object.keys(doc.paths['/voices/{entry_id}'].delete.responses)).toEqual(
      expect.arrayContaining(['200', '404']),
    );
  });
});
