import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../src/config.ts';

describe('cluster mode configuration', () => {
  it('is off without SERVICE_REDIS_URL, whatever else is set', () => {
    expect(loadConfig({ SERVICE_NODE_URL: 'http://10.0.0.1:8000', SERVICE_NODE_TTL_S: '7' }).cluster).toBeNull();
  });

  it('is on with a redis URL; the node URL defaults to host and port, the TTL to 10 s', () => {
    const config = loadConfig({
      SERVICE_REDIS_URL: 'redis://127.0.0.1:6379',
      SERVICE_HOST: '127.0.0.1',
      SERVICE_PORT: '8123',
    });
    expect(config.cluster).toEqual({
      redisUrl: 'redis://127.0.0.1:6379',
      nodeUrl: 'http://127.0.0.1:8123',
      nodeTtlMs: 10_000,
      nodeSlot: null,
      secret: null,
    });
  });

  it('takes a routing slot (0–4095) and a cluster secret of at least 16 characters, never echoing the secret', () => {
    const config = loadConfig({
      SERVICE_REDIS_URL: 'redis://127.0.0.1:6379',
      SERVICE_NODE_SLOT: '7',
      SERVICE_CLUSTER_SECRET: 'a-long-enough-secret',
    });
    expect(config.cluster).toMatchObject({ nodeSlot: 7, secret: 'a-long-enough-secret' });
    let caught: unknown;
    try {
      loadConfig({
        SERVICE_REDIS_URL: 'redis://127.0.0.1:6379',
        SERVICE_NODE_SLOT: '4096',
        SERVICE_CLUSTER_SECRET: 'shortpw',
      });
    } catch (error) {
      caught = error;
    }
    expect(caught).toBeInstanceOf(ConfigError);
    const message = (caught as Error).message;
    expect(message).toContain('SERVICE_NODE_SLOT');
    expect(message).toContain('SERVICE_CLUSTER_SECRET must be at least 16 characters');
    expect(message).not.toContain('shortpw');
  });

  it('refuses a non-redis URL without echoing it (it may carry a password), and a TTL out of range', () => {
    let caught: unknown;
    try {
      loadConfig({ SERVICE_REDIS_URL: 'http://user:secret@host', SERVICE_NODE_TTL_S: '1' });
    } catch (error) {
      caught = error;
    }
    expect(caught).toBeInstanceOf(ConfigError);
    const message = (caught as Error).message;
    expect(message).toContain('SERVICE_REDIS_URL must be a redis:// or rediss:// URL');
    expect(message).toContain('SERVICE_NODE_TTL_S');
    expect(message).not.toContain('secret');
  });
});
