/**
 * The persistent catalog of cloned voices (spec 2.4), on a LevelDB (sub)level.
 *
 * Ids are integers from a stored counter. Each allocation writes the new counter and the entry in one
 * `batch`, which LevelDB commits atomically through its write-ahead log, so a `kill -9` at any moment
 * leaves either both or neither; allocations are serialised in-process by a promise-chain mutex so two
 * concurrent creates can never read the same counter.
 */
import type { AbstractLevel } from 'abstract-level';

export interface VoiceEntry {
  id: number;
  user_id: string | null;
  provider: string;
  voice_id: string;
  display_label: string;
  target_model: string;
  source: string;
}

/** What the catalog keeps besides the public fields; never sent to clients. */
export interface VoiceEntryInternals {
  created_at: string;
  /** Absolute path of the reference WAV of a locally cloned voice. */
  reference_path?: string;
  /** `data:audio/wav;base64,...` for providers that send the sample with every synthesis. */
  reference_data_uri?: string;
}

export type StoredVoiceEntry = VoiceEntry & VoiceEntryInternals;
export type NewVoiceEntry = Omit<VoiceEntry, 'id'> & Partial<VoiceEntryInternals>;

export type VoiceCatalogDb = AbstractLevel<any, string, any>;

const COUNTER_KEY = 'counter';
const ENTRY_PREFIX = 'entry:';
/** Zero padding keeps LevelDB's lexicographic key order equal to numeric id order. */
const ID_DIGITS = 15;
const JSON_ENCODING = { valueEncoding: 'json' } as const;

const entryKey = (id: number): string => `${ENTRY_PREFIX}${String(id).padStart(ID_DIGITS, '0')}`;

export function toPublicEntry(entry: VoiceEntry): VoiceEntry {
  return {
    id: entry.id,
    user_id: entry.user_id ?? null,
    provider: entry.provider,
    voice_id: entry.voice_id,
    display_label: entry.display_label,
    target_model: entry.target_model,
    source: entry.source,
  };
}

/** `20250101-120000`: the suffix a conflicting label gets. */
function timestampSuffix(now: Date): string {
  return now.toISOString().replace(/[-:]/g, '').replace('T', '-').slice(0, 15);
}

/**
 * The label as given, or with a timestamp suffix (and, within one second, a counter) when `taken` has it: the one
 * labelling rule of both catalog backends (LevelDB here, Redis in cluster mode).
 */
export function freeVoiceLabel(label: string, taken: ReadonlySet<string>, now: () => Date): string {
  if (!taken.has(label)) return label;
  const suffixed = `${label} (${timestampSuffix(now())})`;
  if (!taken.has(suffixed)) return suffixed;
  for (let attempt = 2; ; attempt++) {
    const candidate = `${label} (${timestampSuffix(now())}-${attempt})`;
    if (!taken.has(candidate)) return candidate;
  }
}

/** What the rest of the service uses of a voice catalog: LevelDB here, Redis in cluster mode (src/cluster/voice-catalog.ts). */
export type VoiceCatalogStore = Pick<
  VoiceCatalog,
  'list' | 'get' | 'findByVoiceId' | 'resolveLabel' | 'create' | 'delete' | 'lastAllocatedId'
>;

export class VoiceCatalog {
  private queue: Promise<unknown> = Promise.resolve();

  constructor(
    private readonly db: VoiceCatalogDb,
    private readonly now: () => Date = () => new Date(),
  ) {}

  /** Runs `task` after every previously queued one; a failure does not block later tasks. */
  private exclusive<T>(task: () => Promise<T>): Promise<T> {
    const result = this.queue.then(task, task);
    this.queue = result.catch(() => undefined);
    return result;
  }

  async list(filter: { provider?: string } = {}): Promise<StoredVoiceEntry[]> {
    const entries = (await this.db
      .values({ gte: ENTRY_PREFIX, lt: `${ENTRY_PREFIX}\xff`, ...JSON_ENCODING })
      .all()) as StoredVoiceEntry[];
    return filter.provider ? entries.filter((entry) => entry.provider === filter.provider) : entries;
  }

  async get(id: number): Promise<StoredVoiceEntry | null> {
    if (!Number.isSafeInteger(id) || id < 1) return null;
    return ((await this.db.get(entryKey(id), JSON_ENCODING)) as StoredVoiceEntry | undefined) ?? null;
  }

  async findByVoiceId(provider: string, voiceId: string): Promise<StoredVoiceEntry | null> {
    const entries = await this.list({ provider });
    return entries.find((entry) => entry.voice_id === voiceId) ?? null;
  }

  /** The label as given, or with a timestamp suffix (and, within one second, a counter) when taken. */
  async resolveLabel(label: string): Promise<string> {
    const taken = new Set((await this.list()).map((entry) => entry.display_label));
    return freeVoiceLabel(label, taken, () => this.now());
  }

  /** Allocates the next id and stores the entry (label de-duplicated) in one atomic batch. */
  create(entry: NewVoiceEntry): Promise<StoredVoiceEntry> {
    return this.exclusive(async () => {
      const last = Number((await this.db.get(COUNTER_KEY, JSON_ENCODING)) ?? 0);
      const id = last + 1;
      const stored: StoredVoiceEntry = {
        ...entry,
        id,
        user_id: entry.user_id ?? null,
        display_label: await this.resolveLabel(entry.display_label),
        created_at: entry.created_at ?? this.now().toISOString(),
      };
      const operations: Array<{ type: 'put'; key: string; value: unknown }> = [
        { type: 'put', key: COUNTER_KEY, value: id },
        { type: 'put', key: entryKey(id), value: stored },
      ];
      await this.db.batch(operations, JSON_ENCODING);
      return stored;
    });
  }

  /** Removes an entry; false when there was none. Ids are never reused (the counter stays). */
  delete(id: number): Promise<boolean> {
    return this.exclusive(async () => {
      const existing = await this.get(id);
      if (!existing) return false;
      await this.db.batch([{ type: 'del', key: entryKey(id) }], JSON_ENCODING);
      return true;
    });
  }

  /** The stored counter (highest id ever allocated); for consistency checks. */
  async lastAllocatedId(): Promise<number> {
    return Number((await this.db.get(COUNTER_KEY, JSON_ENCODING)) ?? 0);
  }
}
