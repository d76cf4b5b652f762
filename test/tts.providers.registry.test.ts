/** The provider registry: every id present, status and cloning flags, config read from `SERVICE_TTS_*` by `src/config.ts`. */
import { describe, expect, it } from 'vitest';
import { createTtsRegistry } from '../actors/tts/registry.ts';
import { loadConfig } from '../src/config.ts';
import { TTS_PROVIDER_IDS, type TtsProvider } from '../actors/tts/types.ts';
import { ProviderNotConfiguredError } from '../actors/upstream/errors.ts';

const builtinStub: TtsProvider = {
  id: 'builtin',
  status: () => ({ configured: true }),
  synthesize: async function* () {},
};

/** Provider settings as the service reads them: with every other SERVICE_* variable, in loadConfig. */
const ttsConfigOf = (env: Record<string, string>) => loadConfig(env, '/ignored').tts;

describe('provider settings in loadConfig', () => {
  it('reads base URL and key per provider id, the voice dir and the public base URL', () => {
    const config = ttsConfigOf({
      SERVICE_TTS_CLOUD_A_API_KEY: 'a-key',
      SERVICE_TTS_CLOUD_C_API_KEY: ' c-key ',
      SERVICE_TTS_LOCAL_CLONE_A_BASE_URL: 'http://127.0.0.1:8020',
      SERVICE_TTS_COMPAT_HTTP_BASE_URL: 'http://tts.lan/v1',
      SERVICE_TTS_COMPAT_HTTP_API_KEY: '',
      SERVICE_DATA_DIR: '/srv/data',
      SERVICE_PUBLIC_BASE_URL: 'https://avatar.example.com/',
    });
    expect(config.providers.cloud_a).toEqual({ apiKey: 'a-key' });
    // cloud_b is on cloud_a's platform: same account key unless set separately.
    expect(config.providers.cloud_b).toEqual({ apiKey: 'a-key' });
    expect(config.providers.cloud_c).toEqual({ apiKey: 'c-key' });
    expect(config.providers.local_clone_a).toEqual({ baseUrl: 'http://127.0.0.1:8020' });
    expect(config.providers.compat_http).toEqual({ baseUrl: 'http://tts.lan/v1' });
    expect(config.voiceDir).toBe('/srv/data/voices');
    expect(config.publicBaseUrl).toBe('https://avatar.example.com');
  });
});

describe('createTtsRegistry', () => {
  it('lists every provider id with configured/reason/cloning, and never falls back', async () => {
    const registry = createTtsRegistry(ttsConfigOf({ SERVICE_TTS_CLOUD_C_API_KEY: 'k' }), { builtin: builtinStub });
    const listing = registry.list();
    expect(listing.map((entry) => entry.id)).toEqual([...TTS_PROVIDER_IDS]);
    const byId = Object.fromEntries(listing.map((entry) => [entry.id, entry]));
    expect(byId.builtin).toMatchObject({ configured: true, cloning: false });
    expect(byId.cloud_c).toMatchObject({ configured: true, cloning: false });
    expect(byId.cloud_a).toMatchObject({ configured: false, cloning: true });
    expect(byId.cloud_a.reason).toContain('SERVICE_TTS_CLOUD_A_API_KEY');
    expect(byId.cloud_e.reason).toContain('SERVICE_TTS_CLOUD_E_BASE_URL');
    expect(
      listing
        .filter((entry) => entry.cloning)
        .map((entry) => entry.id)
        .sort(),
    ).toEqual(['cloud_a', 'cloud_b', 'cloud_d', 'local_clone_a', 'local_clone_b']);
    for (const id of TTS_PROVIDER_IDS) expect(registry.get(id).id).toBe(id);
    const iterator = registry
      .get('local_clone_b')
      .synthesize({ text: 'Hi there.', sampleRate: 16000, signal: AbortSignal.timeout(1000) })
      [Symbol.asyncIterator]();
    await expect(iterator.next()).rejects.toBeInstanceOf(ProviderNotConfiguredError);
  });
});
