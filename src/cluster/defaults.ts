import type { Redis } from 'ioredis';
import type { PersonaDefaults } from '../store/defaults.ts';
import { DEFAULTS_KEY } from './scripts.ts';

/**
 * Service-wide persona defaults in cluster mode: one Redis string every node reads, so a customize call
 * on any node applies to sessions created on all of them. Read on every use (one GET), never cached:
 * another node may have changed it.
 */
export class RedisDefaultsStore {
  constructor(private readonly redis: Redis) {}

  async get(): Promise<PersonaDefaults> {
    const raw = await this.redis.get(DEFAULTS_KEY);
    return raw ? (JSON.parse(raw) as PersonaDefaults) : {};
  }

  async update(patch: PersonaDefaults): Promise<PersonaDefaults> {
    // Last writer wins per field set, as two customize calls on one node do.
    const next = { ...(await this.get()), ...patch };
    await this.redis.set(DEFAULTS_KEY, JSON.stringify(next));
    return next;
  }
}
