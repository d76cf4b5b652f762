/**
 * Issue 45's server side, through the real app: honest names (built-in voices by engine and character, provider
 * ids with their service and whether configured, in /tts/voices, /voices and /health) and the rename route's
 * refusals. The page and the widget are driven in Chromium by test/browser.first-minutes.test.ts.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from './helpers/app.ts';
import { TTS_PROVIDER_IDS } from '../actors/tts/types.ts';

describe('honest names and the rename route', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp();
  }, 60_000);
  afterAll(async () => t?.close());

  it('GET /tts/voices: each built-in voice says its engine, engine voice, language and gender, and which ids sound the same', async () => {
    const { providers } = (await t.app.inject({ url: '/tts/voices?provider=builtin' })).json() as {
      providers: Array<{ id: string; service: string; voices: Array<{ id: string; description?: string }> }>;
    };
    const builtin = providers[0]!;
    expect(builtin.service).toBe('Built-in offline voices (flite and eSpeak NG)');
    const byId = new Map(builtin.voices.map((v) => [v.id, v.description]));
    // The spec's names stay the ids; Jenny and Aria are one flite voice, and say so.
    expect(byId.get('en-US-JennyNeural')).toBe('Jenny: flite “slt”, American English, female (same voice as Aria)');
    expect(byId.get('en-US-AriaNeural')).toBe('Aria: flite “slt”, American English, female (same voice as Jenny)');
    expect(byId.get('de-DE-ConradNeural')).toBe('Conrad: eSpeak NG “de+m3”, German (Germany), male');
    expect(builtin.voices.every((v) => v.description)).toBe(true);
  });

  it('every provider id carries its service and whether it is configured: /tts/voices, /voices and /health', async () => {
    const voices = (await t.app.inject({ url: '/tts/voices' })).json() as {
      providers: Array<{ id: string; service: string; configured: boolean }>;
    };
    expect(voices.providers.map((p) => p.id).sort()).toEqual([...TTS_PROVIDER_IDS].sort());
    expect(voices.providers.find((p) => p.id === 'cloud_c')).toMatchObject({
      service: 'ElevenLabs',
      configured: false,
    });
    expect(voices.providers.find((p) => p.id === 'cloud_e')).toMatchObject({
      service: 'Azure AI Speech',
      configured: false,
    });

    const clones = (await t.app.inject({ url: '/voices' })).json() as {
      items: unknown[];
      providers: Array<{ id: string; service: string; configured: boolean; can_clone: boolean }>;
    };
    expect(clones.providers).toHaveLength(TTS_PROVIDER_IDS.length);
    expect(clones.providers.find((p) => p.id === 'cloud_a')).toEqual({
      id: 'cloud_a',
      service: 'Alibaba Cloud DashScope Qwen-TTS',
      configured: false,
      can_clone: true,
    });
    expect(clones.providers.find((p) => p.id === 'builtin')).toMatchObject({ configured: true, can_clone: false });
    const filtered = (await t.app.inject({ url: '/voices?provider=cloud_f' })).json() as {
      providers: Array<{ id: string }>;
    };
    expect(filtered.providers.map((p) => p.id)).toEqual(['cloud_f']);

    const health = (await t.app.inject({ url: '/health' })).json() as {
      components: Record<string, { status: string; service?: string }>;
    };
    expect(health.components['tts.cloud_c']).toMatchObject({ status: 'not_configured', service: 'ElevenLabs' });
    expect(health.components['tts.builtin']!.service).toBe('Built-in offline voices (flite and eSpeak NG)');
    expect(health.components.llm!.service).toBeUndefined();
  });

  it('PATCH /avatars/{id}: 403 for a built-in avatar, 404 for an unknown one, 400 for an empty or over-long name', async () => {
    const rename = (id: string, name: unknown) =>
      t.app.inject({ method: 'PATCH', url: `/avatars/${id}`, payload: { name } });
    expect((await rename('astronaut', 'Nope')).statusCode).toBe(403);
    expect((await rename('no-such-avatar', 'Nope')).statusCode).toBe(404);
    expect((await rename('astronaut', '')).statusCode).toBe(400);
    expect((await rename('astronaut', 'x'.repeat(101))).statusCode).toBe(400);
    expect((await rename('astronaut', 7)).statusCode).toBe(400);
    expect((await t.app.inject({ url: '/avatars/astronaut' })).json().name).toBe('Astronaut');
  });

  it('GET /avatars: photo avatars say whether their mouth moves', async () => {
    const avatars = (await t.app.inject({ url: '/avatars' })).json() as Array<{ id: string; animated?: boolean }>;
    expect(avatars.find((a) => a.id === 'astronaut')!.animated).toBe(true);
    expect(avatars.find((a) => a.id === 'demo-rt')!.animated).toBeUndefined();
  });
});
