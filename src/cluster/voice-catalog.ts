import type { Redis } from 'ioredis';
import {
  freeVoiceLabel,
  type NewVoiceEntry,
  type StoredVoiceEntry,
  type VoiceCatalogStore,
} from '../voices/catalog.ts';
import { VOICES_KEY, VOICE_COUNTER_KEY } from './scripts.ts';

type VoiceRedis = Redis & { avsVoiceCreate(entryJson: string): Promise<number> };

/**
 * The cloned-voice catalog of cluster mode: one Redis hash (`avs:voices`, id → entry JSON) and a counter.
 * An id is allocated and its entry stored by one script (INCR + HSET), so a crash of any node at any
 * moment leaves both or neither, and two nodes can never allocate the same id. Reference WAVs stay files
 * under SERVICE_TTS_VOICE_DIR on the shared data directory, written before the entry as in one-node mode.
 */
export class RedisVoiceCatalog implements VoiceCatalogStore {
  constructor(
    private readonly redis: VoiceRedis,
    private readonly now: () => Date = () => new Date(),
  ) {}

  async list(filter: { provider?: string } = {}): Promise<StoredVoiceEntry[]> {
    const all = Object.values(await this.redis.hgetall(VOICES_KEY)).map((raw) => JSON.parse(raw) as StoredVoiceEntry);
    all.sort((a, b) => a.id - b.id);
    return filter.provider ? all.filter((entry) => entry.provider === filter.provider) : all;
  }

  async get(id: number): Promise<StoredVoiceEntry | null> {
    if (!Number.isSafeInteger(id) || id < 1) return null;
    const raw = await this.redis.hget(VOICES_KEY, String(id));
    return raw ? (JSON.parse(raw) as StoredVoiceEntry) : null;
  }

  async findByVoiceId(provider: string, voiceId: string): Promise<StoredVoiceEntry | null> {
    return (await this.list({ provider })).find((entry) => entry.voice_id === voiceId) ?? null;
  }

  async resolveLabel(label: string): Promise<string> {
    const taken = new Set((await this.list()).map((entry) => entry.display_label));
    return freeVoiceLabel(label, taken, () => this.now());
  }

  async create(entry: NewVoiceEntry): Promise<StoredVoiceEntry> {
    const stored: Omit<StoredVoiceEntry, 'id'> = {
      ...entry,
      user_id: entry.user_id ?? null,
      display_label: await this.resolveLabel(entry.display_label),
      created_at: entry.created_at ?? this.now().toISOString(),
    };
    const id = Number(await this.redis.avsVoiceCreate(JSON.stringify(stored)));
    // The entry as the script stored it (JSON.parse of what it wrote would equal this).
    return { ...stored, id } as StoredVoiceEntry;
  }

  async delete(id: number): Promise<boolean> {
    if (!Number.isSafeInteger(id) || id < 1) return false;
    return (await this.redis.hdel(VOICES_KEY, String(id))) === 1;
  }

  async lastAllocatedId(): Promise<number> {
    return Number((await this.redis.get(VOICE_COUNTER_KEY)) ?? 0);
  }
}
