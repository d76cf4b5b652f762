import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { resolveTtsSelection, selectTts, type TtsLookup } from '../src/sessions/persona.ts';
import { DomainError } from '../src/domain-errors.ts';
import { httpErrorOf } from '../src/plugins/app/errors.ts';
import { VoiceNotFoundError, type TtsProvider, type TtsProviderId } from '../actors/tts/types.ts';
import { makeAvatarBundle, startTestApp, tempDir, type TestApp } from './helpers/app.ts';
import { startElevenLabsFake, type FakeUpstream } from './fakes/tts-upstreams.ts';
import { sessionParts } from '../src/sessions/session.ts';

/**
 * The one persona/voice rule (`src/sessions/persona.ts`): on its own with stand-in providers, then through
 * the routes that use it, with the cloud_c adapter talking to a loopback ElevenLabs fake.
 */

/** A stand-in provider: `stock` is its default voice, or null when it has none (like cloud_d). */
function provider(
  id: TtsProviderId,
  options: { stock: string | null; configured?: boolean; voices?: RegExp },
): TtsProvider {
  return {
    id,
    status: () =>
      options.configured === false
        ? { configured: false, reason: `set SERVICE_TTS_${id.toUpperCase()}_API_KEY` }
        : { configured: true },
    validateVoice(voice) {
      if (!voice && options.stock === null) throw new VoiceNotFoundError(`${id} has no stock voices`);
      if (voice && options.voices && !options.voices.test(voice))
        throw new VoiceNotFoundError(`${id} voice "${voice}" is unknown`);
    },
    synthesize: async function* () {},
  };
}

const PROVIDERS: Partial<Record<TtsProviderId, TtsProvider>> = {
  builtin: provider('builtin', { stock: 'en-US-JennyNeural', voices: /Neural$/u }),
  cloud_c: provider('cloud_c', { stock: 'Rachel', voices: /^[A-Za-z0-9]{20}$/u }),
  cloud_d: provider('cloud_d', { stock: null }),
  cloud_a: provider('cloud_a', { stock: 'Cherry', configured: false }),
};
const lookup: TtsLookup = (id) => PROVIDERS[id] ?? provider(id, { stock: 'default' });
const SESSION = { provider: 'builtin', voice: 'en-US-GuyNeural', model: 'fast' };

function refusal(run: () => unknown): { status: number; detail: string } | null {
  try {
    run();
    return null;
  } catch (error) {
    if (!(error instanceof DomainError)) throw error;
    const answer = httpErrorOf(error);
    return { status: answer.statusCode, detail: answer.detail };
  }
}

describe('resolveTtsSelection: the rule', () => {
  it('no overrides: the base persona as it is', () => {
    expect(resolveTtsSelection(lookup, SESSION)).toEqual(SESSION);
  });

  it("another provider without a voice gets that provider's default voice and model, never the base's", () => {
    expect(resolveTtsSelection(lookup, SESSION, { provider: 'cloud_c' })).toEqual({
      provider: 'cloud_c',
      voice: null,
      model: null,
    });
  });

  it('naming the base provider again keeps the base voice and model', () => {
    expect(resolveTtsSelection(lookup, SESSION, { provider: 'builtin' })).toEqual(SESSION);
  });

  it("a voice without a provider uses the base's provider (and is checked against it)", () => {
    expect(resolveTtsSelection(lookup, SESSION, { voice: 'en-GB-RyanNeural' })).toEqual({
      ...SESSION,
      voice: 'en-GB-RyanNeural',
    });
    expect(refusal(() => resolveTtsSelection(lookup, SESSION, { voice: '21m00Tcm4TlvDq8ikWAM' }))).toMatchObject({
      status: 400,
      detail: expect.stringMatching(/builtin voice/),
    });
  });

  it("voice null asks for the provider's default", () => {
    expect(resolveTtsSelection(lookup, SESSION, { voice: null })).toEqual({ ...SESSION, voice: null });
  });

  it('a provider without a default voice is a 400 telling the client to pass one', () => {
    expect(refusal(() => resolveTtsSelection(lookup, SESSION, { provider: 'cloud_d' }))).toEqual({
      status: 400,
      detail: 'tts_provider "cloud_d" has no default voice; pass a voice (cloud_d has no stock voices)',
    });
    expect(resolveTtsSelection(lookup, SESSION, { provider: 'cloud_d', voice: 'cloud_d-abc' })).toEqual({
      provider: 'cloud_d',
      voice: 'cloud_d-abc',
      model: null,
    });
  });

  it('unknown or unconfigured providers and invalid voices are 400s; selectTts checks only the id', () => {
    expect(refusal(() => resolveTtsSelection(lookup, SESSION, { provider: 'nope' }))).toMatchObject({
      status: 400,
      detail: expect.stringMatching(/"nope" is unknown/),
    });
    expect(refusal(() => resolveTtsSelection(lookup, SESSION, { provider: 'cloud_a' }))).toMatchObject({
      status: 400,
      detail: expect.stringMatching(/not configured: set SERVICE_TTS_CLOUD_A_API_KEY/),
    });
    expect(
      refusal(() => resolveTtsSelection(lookup, SESSION, { provider: 'cloud_c', voice: 'Rachel!' })),
    ).toMatchObject({ status: 400 });
    expect(selectTts(SESSION, { provider: 'cloud_a' })).toEqual({ provider: 'cloud_a', voice: null, model: null });
    expect(refusal(() => selectTts(SESSION, { provider: 'nope' }))).toMatchObject({ status: 400 });
  });
});

describe('the persona rule through the routes', () => {
  const ELEVEN_KEY = 'eleven-persona-key';
  /** cloud_c's own default voice (ElevenLabs "Rachel"). */
  const CLOUD_C_DEFAULT_VOICE = '21m00Tcm4TlvDq8ikWAM';
  /** A builtin speak of a few words ends well within this, even on busy shared cores. */
  const TURN_MS = 20_000;
  let t: TestApp;
  let eleven: FakeUpstream;

  beforeAll(async () => {
    eleven = await startElevenLabsFake({ apiKey: ELEVEN_KEY });
    const avatarsDir = await tempDir('persona-avatars-');
    await makeAvatarBundle(avatarsDir, 'card');
    t = await startTestApp({
      avatarsDir,
      withRepoAvatars: false,
      env: {
        SERVICE_TTS_CLOUD_C_API_KEY: ELEVEN_KEY,
        SERVICE_TTS_CLOUD_C_BASE_URL: eleven.url,
        SERVICE_TTS_CLOUD_D_API_KEY: 'fal-key-never-used',
        SERVICE_TTS_DEFAULT_VOICE: 'en-GB-RyanNeural',
      },
    });
  });
  afterAll(async () => {
    await t?.close();
    await eleven?.close();
  });

  const inject = async (method: 'GET' | 'POST', url: string, payload?: object) => {
    const res = await t.app.inject({ method, url, ...(payload ? { payload } : {}) });
    return { status: res.statusCode, body: res.body ? JSON.parse(res.body) : null };
  };

  async function startedSession(body: object = {}): Promise<string> {
    const created = await inject('POST', '/sessions', { avatar_id: 'card', model: 'mock', ...body });
    expect(created.status).toBe(200);
    expect((await inject('POST', `/sessions/${created.body.session_id}/start`)).status).toBe(200);
    return created.body.session_id;
  }

  it("speak with tts_provider and no voice speaks with that provider's default voice (was SSE voice_not_found)", async () => {
    const id = await startedSession({ tts_voice: 'en-US-GuyNeural' });
    const session = t.services.supervisor.liveSession(id)!;
    const events: Array<{ type: string; data: Record<string, unknown> }> = [];
    sessionParts(session).events.listen((event) => events.push(event as never));
    const requestsBefore = eleven.requests.length;

    const res = await inject('POST', `/sessions/${id}/speak`, {
      text: 'Hello from another provider.',
      tts_provider: 'cloud_c',
    });
    expect(res.status).toBe(200);
    await expect
      .poll(() => events.some((e) => e.type === 'status' && e.data.stage === 'idle'), { timeout: TURN_MS })
      .toBe(true);

    expect(events.filter((e) => e.type === 'error')).toEqual([]);
    expect(events.some((e) => e.type === 'tts' && e.data.stage === 'first_audio')).toBe(true);
    const synthesis = eleven.requests.slice(requestsBefore).filter((r) => r.method === 'POST');
    expect(synthesis.length).toBeGreaterThan(0);
    for (const request of synthesis) expect(request.path).toContain(`/v1/text-to-speech/${CLOUD_C_DEFAULT_VOICE}`);
    expect(eleven.complaints).toEqual([]);
    // The override was for that request only.
    expect((await inject('GET', `/sessions/${id}`)).body).toMatchObject({
      tts_provider: 'builtin',
      tts_voice: 'en-US-GuyNeural',
    });
  });

  it('speak or chat with a provider that has no default voice and no voice: 400 {detail}, nothing started', async () => {
    const id = await startedSession();
    for (const [path, body] of [
      ['speak', { text: 'Hi.', tts_provider: 'cloud_d' }],
      ['chat', { prompt: 'Hi.', tts_provider: 'cloud_d' }],
    ] as const) {
      const res = await inject('POST', `/sessions/${id}/${path}`, body);
      expect(res.status).toBe(400);
      expect(res.body.detail).toMatch(/tts_provider "cloud_d" has no default voice; pass a voice/);
    }
    expect(t.services.supervisor.liveSession(id)!.busy).toBe(false);
  });

  it("session creation with another provider does not inherit the default provider's voice", async () => {
    const created = await inject('POST', '/sessions', { avatar_id: 'card', model: 'mock', tts_provider: 'cloud_c' });
    expect(created.status).toBe(200);
    expect((await inject('GET', `/sessions/${created.body.session_id}`)).body).toMatchObject({
      tts_provider: 'cloud_c',
      tts_voice: null,
    });
    const plain = await inject('POST', '/sessions', { avatar_id: 'card', model: 'mock' });
    expect((await inject('GET', `/sessions/${plain.body.session_id}`)).body).toMatchObject({
      tts_provider: 'builtin',
      tts_voice: 'en-GB-RyanNeural',
    });
    expect(
      (await inject('POST', '/sessions', { avatar_id: 'card', model: 'mock', tts_provider: 'cloud_d' })).status,
    ).toBe(400);
  });

  it('customize: switching provider resets the voice to its default; a provider without one needs a voice', async () => {
    const id = await startedSession({ tts_voice: 'en-US-GuyNeural' });
    const switched = await inject('POST', `/sessions/${id}/customize`, { tts_provider: 'cloud_c' });
    expect(switched).toMatchObject({
      status: 200,
      body: { tts_provider: 'cloud_c', tts_voice: null, tts_model: null },
    });
    const refused = await inject('POST', `/sessions/${id}/customize`, { tts_provider: 'cloud_d' });
    expect(refused.status).toBe(400);
    expect(refused.body.detail).toMatch(/has no default voice/);
    // The refused change left the persona as it was.
    expect((await inject('GET', `/sessions/${id}`)).body).toMatchObject({ tts_provider: 'cloud_c', tts_voice: null });
  });
});
