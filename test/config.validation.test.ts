import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../src/config.ts';

describe('configuration from SERVICE_* variables', () => {
  it('uses the documented defaults on an empty environment', () => {
    const config = loadConfig({}, '/srv/app');
    expect(config.host).toBe('127.0.0.1');
    expect(config.port).toBe(8000);
    expect(config.dataDir).toBe('/srv/app/data');
    expect(config.avatarsDir).toBe('/srv/app/avatars');
    expect(config.ttsDefaultProvider).toBe('builtin');
    expect(config.corsOrigins).toEqual([]);
    expect(config.publicBaseUrl).toBe('http://127.0.0.1:8000');
    expect(config.sampleRate).toBe(16000);
    expect(config.llm.baseUrl).toBeNull();
  });

  it('reports one clear message per bad value, all at once', () => {
    let error: unknown;
    try {
      loadConfig({
        SERVICE_PORT: 'eighty',
        SERVICE_TTS_DEFAULT_PROVIDER: 'nope',
        SERVICE_LOG_LEVEL: 'loud',
        SERVICE_MAX_SESSIONS: '0',
        SERVICE_LLM_BASE_URL: 'ftp://x',
        SERVICE_CORS_ORIGINS: 'not a url',
        SERVICE_ICE_SERVERS: '{bad json',
      });
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(ConfigError);
    const problems = (error as ConfigError).problems;
    expect(problems).toHaveLength(7);
    for (const name of [
      'SERVICE_PORT',
      'SERVICE_TTS_DEFAULT_PROVIDER',
      'SERVICE_LOG_LEVEL',
      'SERVICE_MAX_SESSIONS',
      'SERVICE_LLM_BASE_URL',
      'SERVICE_CORS_ORIGINS',
      'SERVICE_ICE_SERVERS',
    ]) {
      expect(problems.some((p) => p.startsWith(name))).toBe(true);
    }
  });

  it('validates provider settings with the rest: a TTS base URL that is not http(s) is a start-up error naming its variable', () => {
    let error: unknown;
    try {
      loadConfig({
        SERVICE_TTS_COMPAT_HTTP_BASE_URL: 'tts.lan:8880',
        SERVICE_TTS_CLOUD_E_BASE_URL: 'ftp://speech.example.com',
      });
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(ConfigError);
    expect((error as ConfigError).problems).toEqual([
      expect.stringMatching(/^SERVICE_TTS_CLOUD_E_BASE_URL must be an http\(s\) URL/),
      expect.stringMatching(/^SERVICE_TTS_COMPAT_HTTP_BASE_URL must be an http\(s\) URL/),
    ]);
    const config = loadConfig(
      { SERVICE_TTS_COMPAT_HTTP_BASE_URL: 'http://127.0.0.1:8880/', SERVICE_TTS_COMPAT_HTTP_API_KEY: ' k ' },
      '/srv/app',
    );
    expect(config.tts.providers.compat_http).toEqual({ baseUrl: 'http://127.0.0.1:8880', apiKey: 'k' });
    expect(config.tts.voiceDir).toBe('/srv/app/data/voices');
    // Nothing downstream reads the raw environment any more.
    expect(config).not.toHaveProperty('env');
  });

  it('accepts valid overrides', () => {
    const config = loadConfig({
      SERVICE_HOST: '0.0.0.0',
      SERVICE_PORT: '9000',
      SERVICE_CORS_ORIGINS: 'https://a.example, https://b.example',
      SERVICE_TTS_DEFAULT_PROVIDER: 'compat_http',
      SERVICE_MAX_SESSIONS: '3',
      SERVICE_PUBLIC_BASE_URL: 'https://avatars.example.com/',
      SERVICE_ICE_SERVERS: '[{"urls":"stun:stun.example.com:3478"}]',
    });
    expect(config.corsOrigins).toEqual(['https://a.example', 'https://b.example']);
    expect(config.ttsDefaultProvider).toBe('compat_http');
    expect(config.maxSessions).toBe(3);
    expect(config.publicBaseUrl).toBe('https://avatars.example.com');
    expect(config.iceServers).toEqual([{ urls: 'stun:stun.example.com:3478' }]);
  });
});

describe('tool calling settings', () => {
  it('default to no callback hosts, no signing and no filler', () => {
    const config = loadConfig({}, '/srv/app');
    expect(config.webhooks.allowedHosts).toEqual([]);
    expect(config.webhooks.secret).toBeNull();
    expect(config.toolFillerText).toBeNull();
  });

  it('take hosts, a whsec_ secret and a short filler; refuse `*`, URLs, a malformed secret (never echoed) and a long filler', () => {
    const secret = `whsec_${Buffer.alloc(24, 7).toString('base64')}`;
    const config = loadConfig({
      SERVICE_WEBHOOK_ALLOWED_HOSTS: 'Hooks.Example.com, .example.net,10.0.0.5',
      SERVICE_WEBHOOK_SECRET: secret,
      SERVICE_TOOL_FILLER_TEXT: 'One moment.',
    });
    expect(config.webhooks.allowedHosts).toEqual(['hooks.example.com', '.example.net', '10.0.0.5']);
    expect(config.webhooks.secret).toBe(secret);
    expect(config.toolFillerText).toBe('One moment.');

    let error: unknown;
    try {
      loadConfig({
        SERVICE_WEBHOOK_ALLOWED_HOSTS: '*,https://hooks.example.com',
        SERVICE_WEBHOOK_SECRET: 'hunter2-not-a-secret',
        SERVICE_TOOL_FILLER_TEXT: 'x'.repeat(201),
      });
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(ConfigError);
    const problems = (error as ConfigError).problems;
    expect(problems.filter((p) => p.startsWith('SERVICE_WEBHOOK_ALLOWED_HOSTS'))).toHaveLength(2);
    expect(problems.some((p) => p.startsWith('SERVICE_WEBHOOK_SECRET'))).toBe(true);
    expect(problems.some((p) => p.startsWith('SERVICE_TOOL_FILLER_TEXT'))).toBe(true);
    expect(problems.join('\n')).not.toContain('hunter2');
  });
});
