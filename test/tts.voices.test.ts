import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { encodeWav } from '../actors/audio/wav.ts';
import { BUILTIN_VOICE_TABLE } from '../actors/tts/builtin/voices.ts';
import { TTS_PROVIDER_IDS } from '../actors/tts/types.ts';
import { VOICE_LIST_ERROR_CACHE_MS, VOICE_LIST_TIMEOUT_MS } from '../src/voices/directory.ts';
import { json, makeAvatarBundle, post, startTestApp, tempDir, type TestApp } from './helpers/app.ts';
import {
  startAzureSpeechFake,
  startElevenLabsFake,
  startGoogleTtsFake,
  startOpenAiSpeechFake,
  startXttsFake,
  tone,
  type FakeUpstream,
} from './fakes/tts-upstreams.ts';

const KEYS = { cloud_c: 'eleven-voices-key', cloud_e: 'azure-voices-key', cloud_f: 'google-voices-key' };

interface Fakes {
  eleven: FakeUpstream;
  azure: FakeUpstream;
  google: FakeUpstream;
  xtts: FakeUpstream;
  openai: FakeUpstream;
}

async function startFakes(): Promise<Fakes> {
  const [eleven, azure, google, xtts, openai] = await Promise.all([
    startElevenLabsFake({ apiKey: KEYS.cloud_c }),
    startAzureSpeechFake({ apiKey: KEYS.cloud_e }),
    startGoogleTtsFake({ apiKey: KEYS.cloud_f }),
    startXttsFake(),
    startOpenAiSpeechFake(),
  ]);
  return { eleven, azure, google, xtts, openai };
}

async function startApp(fakes: Fakes): Promise<TestApp> {
  const avatarsDir = await tempDir('tts-voices-avatars-');
  await makeAvatarBundle(avatarsDir, 'card');
  return startTestApp({
    avatarsDir,
    env: {
      SERVICE_TTS_CLOUD_C_API_KEY: KEYS.cloud_c,
      SERVICE_TTS_CLOUD_C_BASE_URL: fakes.eleven.url,
      SERVICE_TTS_CLOUD_E_API_KEY: KEYS.cloud_e,
      SERVICE_TTS_CLOUD_E_BASE_URL: fakes.azure.url,
      SERVICE_TTS_CLOUD_F_API_KEY: KEYS.cloud_f,
      SERVICE_TTS_CLOUD_F_BASE_URL: fakes.google.url,
      SERVICE_TTS_LOCAL_CLONE_A_BASE_URL: fakes.xtts.url,
      SERVICE_TTS_COMPAT_HTTP_BASE_URL: fakes.openai.url,
    },
  });
}

async function voices(t: TestApp, query = '') {
  const res = await t.app.inject({ method: 'GET', url: `/tts/voices${query}` });
  return { status: res.statusCode, body: res.json(), text: res.body };
}

const providerOf = (body: { providers: Array<{ id: string }> }, id: string) =>
  body.providers.find((p) => p.id === id) as any;
const voiceListRequests = (fake: FakeUpstream) => fake.requests.filter((r) => r.method === 'GET').length;

describe('GET /tts/voices with every listing provider answering', () => {
  let fakes: Fakes;
  let t: TestApp;
  beforeAll(async () => {
    fakes = await startFakes();
    t = await startApp(fakes);
  });
  afterAll(async () => {
    await t?.close();
    await Promise.all(Object.values(fakes ?? {}).map((fake) => fake.close()));
  });

  it('lists all ten providers in spec order; built-in voices carry language and gender; unconfigured ones say what to set', async () => {
    const { status, body } = await voices(t);
    expect(status).toBe(200);
    expect(body.providers.map((p: { id: string }) => p.id)).toEqual([...TTS_PROVIDER_IDS]);
    const builtin = providerOf(body, 'builtin');
    expect(builtin).toMatchObject({
      configured: true,
      status: 'ok',
      is_default: true,
      default_voice: 'en-US-JennyNeural',
      lists_voices: true,
      can_clone: false,
    });
    expect(builtin.voices).toHaveLength(BUILTIN_VOICE_TABLE.length);
    expect(builtin.voices).toContainEqual({
      id: 'de-DE-ConradNeural',
      name: 'Conrad',
      description: 'Conrad: eSpeak NG “de+m3”, German (Germany), male',
      language: 'de-DE',
      gender: 'male',
      source: 'builtin',
    });
    expect(builtin.voices.every((v: { source: string }) => v.source === 'builtin')).toBe(true);
    expect(providerOf(body, 'cloud_a')).toEqual({
      id: 'cloud_a',
      service: 'Alibaba Cloud DashScope Qwen-TTS',
      configured: false,
      status: 'not_configured',
      reason: 'set SERVICE_TTS_CLOUD_A_API_KEY',
      is_default: false,
      default_voice: 'Cherry',
      lists_voices: false,
      can_clone: true,
      truncated: false,
      voices: [],
    });
    expect(providerOf(body, 'cloud_d')).toMatchObject({ status: 'not_configured', default_voice: null });
  });

  it("lists each provider's own voices from its list endpoint, sorted by language, dropping names its adapter would refuse", async () => {
    const { body, text } = await voices(t);
    expect(providerOf(body, 'cloud_c')).toMatchObject({
      configured: true,
      status: 'ok',
      default_voice: '21m00Tcm4TlvDq8ikWAM',
      lists_voices: true,
    });
    expect(providerOf(body, 'cloud_c').voices).toEqual([
      { id: 'TxGEqnHWrfWFTfGW9XjX', name: 'Josh', language: 'en-US', gender: 'male', source: 'provider' },
      { id: '21m00Tcm4TlvDq8ikWAM', name: 'Rachel', language: null, gender: 'female', source: 'provider' },
    ]);
    expect(providerOf(body, 'cloud_e').voices).toEqual([
      { id: 'de-DE-ConradNeural', name: 'Conrad', language: 'de-DE', gender: 'male', source: 'provider' },
      { id: 'en-US-JennyNeural', name: 'Jenny', language: 'en-US', gender: 'female', source: 'provider' },
    ]);
    expect(providerOf(body, 'cloud_f').voices.map((v: { id: string }) => v.id)).toEqual([
      'cmn-CN-Wavenet-A',
      'en-GB-Standard-B',
      'en-US-Neural2-F',
    ]);
    expect(providerOf(body, 'cloud_f').voices[2]).toEqual({
      id: 'en-US-Neural2-F',
      name: 'en-US-Neural2-F',
      language: 'en-US',
      gender: 'female',
      source: 'provider',
    });
    expect(providerOf(body, 'local_clone_a').voices.map((v: { id: string }) => v.id)).toEqual([
      'calm_female',
      'female',
      'male',
    ]);
    // The OpenAI speech protocol has no voice list: the provider is usable, with its default voice and no enumeration.
    expect(providerOf(body, 'compat_http')).toMatchObject({
      status: 'ok',
      lists_voices: false,
      default_voice: 'alloy',
      voices: [],
    });
    // Each upstream got its own key in its own header; no key ever comes back to the client.
    expect(fakes.eleven.requests.find((r) => r.path === '/v1/voices')?.headers['xi-api-key']).toBe(KEYS.cloud_c);
    expect(
      fakes.azure.requests.find((r) => r.path === '/cognitiveservices/voices/list')?.headers[
        'ocp-apim-subscription-key'
      ],
    ).toBe(KEYS.cloud_e);
    expect(fakes.google.requests.find((r) => r.path === '/v1/voices')?.headers['x-goog-api-key']).toBe(KEYS.cloud_f);
    for (const key of Object.values(KEYS)) expect(text).not.toContain(key);
  });

  it('asks each upstream once while its list is cached', async () => {
    const before = [fakes.eleven, fakes.azure, fakes.google, fakes.xtts].map(voiceListRequests);
    await Promise.all([voices(t), voices(t), voices(t, '?provider=cloud_c')]);
    expect([fakes.eleven, fakes.azure, fakes.google, fakes.xtts].map(voiceListRequests)).toEqual(before);
  });

  it('filters to one provider; an unknown provider is a 400 with detail', async () => {
    const { status, body } = await voices(t, '?provider=cloud_e');
    expect(status).toBe(200);
    expect(body.providers.map((p: { id: string }) => p.id)).toEqual(['cloud_e']);
    const bad = await voices(t, '?provider=acme');
    expect(bad.status).toBe(400);
    expect(bad.body.detail).toMatch(/acme/);
  });

  it('lists cloned voices under their provider with entry id and target model; the default voice follows the persona default', async () => {
    const form = new FormData();
    for (const [name, value] of Object.entries({
      provider: 'local_clone_a',
      target_model: 'en',
      display_label: 'My voice',
    }))
      form.append(name, value);
    form.append(
      'audio',
      new Blob([new Uint8Array(encodeWav(tone(16000, 1, 220), 16000))], { type: 'audio/wav' }),
      'sample.wav',
    );
    const cloned = await json(await fetch(`${t.baseUrl}/voices/clone`, { method: 'POST', body: form }));
    expect(cloned.ok).toBe(true);

    const { body, text } = await voices(t, '?provider=local_clone_a');
    const local = providerOf(body, 'local_clone_a');
    expect(local.can_clone).toBe(true);
    expect(local.voices.at(-1)).toEqual({
      id: cloned.voice_id,
      name: 'My voice',
      language: null,
      gender: null,
      source: 'clone',
      entry_id: cloned.entry_id,
      target_model: 'en',
    });
    expect(text).not.toContain(t.services.voiceDir);

    expect(
      (await post(t.baseUrl, '/customize', { tts_provider: 'local_clone_a', tts_voice: cloned.voice_id })).status,
    ).toBe(200);
    const after = (await voices(t)).body;
    expect(providerOf(after, 'local_clone_a')).toMatchObject({ is_default: true, default_voice: cloned.voice_id });
    expect(providerOf(after, 'builtin')).toMatchObject({ is_default: false, default_voice: 'en-US-JennyNeural' });
  });

  it('is documented in OpenAPI with its schema and an example', async () => {
    const doc = (await t.app.inject({ method: 'GET', url: '/openapi.json' })).json();
    const get = doc.paths['/tts/voices'].get;
    expect(Object.keys(get.responses)).toEqual(expect.arrayContaining(['200', '400']));
    const content = get.responses['200'].content['application/json'];
    expect(content.example.providers.map((p: { id: string }) => p.id)).toContain('builtin');
    expect(JSON.stringify(content.schema)).toContain('default_voice');
  });
});

/**
 * Each test waits out a bound of seconds (the error cache, the list timeout): they run side by side, each on its
 * own upstream fakes and app, so neither sees the other's failures in its cache.
 */
describe.concurrent('GET /tts/voices with failing upstreams', () => {
  const running: Array<{ fakes: Fakes; t: TestApp }> = [];
  async function scene(): Promise<{ fakes: Fakes; t: TestApp }> {
    const fakes = await startFakes();
    const made = { fakes, t: await startApp(fakes) };
    running.push(made);
    return made;
  }
  afterAll(async () => {
    await Promise.all(
      running.map(async ({ fakes, t }) => {
        await t.close();
        await Promise.all(Object.values(fakes).map((fake) => fake.close()));
      }),
    );
  });

  it('serves a failed list from a short error cache, then asks the upstream again', async ({ expect }) => {
    const { fakes, t } = await scene();
    fakes.eleven.scenario = 'server_error';
    const failed = providerOf((await voices(t, '?provider=cloud_c')).body, 'cloud_c');
    expect(failed).toMatchObject({ configured: true, status: 'error', voices: [] });
    expect(failed.reason).toMatch(/cloud_c: upstream returned 500: .*internal error/i);
    const asked = voiceListRequests(fakes.eleven);
    fakes.eleven.scenario = 'ok';
    expect(providerOf((await voices(t, '?provider=cloud_c')).body, 'cloud_c').status).toBe('error');
    expect(voiceListRequests(fakes.eleven)).toBe(asked);
    await new Promise((resolve) => setTimeout(resolve, VOICE_LIST_ERROR_CACHE_MS + 100));
    const recovered = providerOf((await voices(t, '?provider=cloud_c')).body, 'cloud_c');
    expect(recovered.status).toBe('ok');
    expect(recovered.voices).toHaveLength(2);
    expect(voiceListRequests(fakes.eleven)).toBe(asked + 1);
  });

  it('marks only the failing providers as error with the upstream reason, answers 200, and gives up on a slow one at the bound', async ({
    expect,
  }) => {
    const { fakes, t } = await scene();
    fakes.azure.scenario = 'unauthorized';
    fakes.xtts.scenario = 'server_error';
    fakes.google.scenario = 'slow';
    fakes.google.slowMs = VOICE_LIST_TIMEOUT_MS + 3000;
    const started = Date.now();
    const { status, body, text } = await voices(t);
    const elapsed = Date.now() - started;
    expect(status).toBe(200);
    expect(elapsed).toBeGreaterThanOrEqual(VOICE_LIST_TIMEOUT_MS - 100);
    expect(elapsed).toBeLessThan(VOICE_LIST_TIMEOUT_MS + 2500);
    expect(providerOf(body, 'cloud_e')).toMatchObject({ configured: true, status: 'error', voices: [] });
    expect(providerOf(body, 'cloud_e').reason).toMatch(/cloud_e: upstream returned 401: .*Access denied/);
    expect(providerOf(body, 'local_clone_a').reason).toMatch(/local_clone_a: upstream returned 500/);
    expect(providerOf(body, 'cloud_f').reason).toBe(
      `cloud_f: the voice list did not arrive within ${VOICE_LIST_TIMEOUT_MS / 1000} s`,
    );
    expect(providerOf(body, 'cloud_c')).toMatchObject({ status: 'ok' });
    expect(providerOf(body, 'builtin').voices).toHaveLength(BUILTIN_VOICE_TABLE.length);
    for (const key of Object.values(KEYS)) expect(text).not.toContain(key);
  });
});
