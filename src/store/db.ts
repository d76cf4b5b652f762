import fs from 'node:fs/promises';
import path from 'node:path';
import { Level } from 'level';

export type JsonSublevel<V> = ReturnType<Level<string, unknown>['sublevel']> & {
  get(key: string): Promise<V | undefined>;
};

/**
 * LevelDB's in-memory write buffer (memtable). Our records are small JSON (a session or tombstone ~1 KB, written a few
 * times per session); classic-level's 4 MB default held ~3000 session lifetimes in memory before writing a table,
 * which the 1000-cycle bench read as RSS growth. 128 KB is written out as a table every ~100 sessions, in the
 * background thread, at no measurable cost.
 */
const WRITE_BUFFER_BYTES = 128 << 10;
/**
 * LevelDB's block cache. Reads are rare (a GET of a terminated session, the catalogs at start) and the OS page cache
 * keeps the table files; classic-level's 8 MB default only added resident memory.
 */
const BLOCK_CACHE_BYTES = 256 << 10;

/**
 * One LevelDB per data directory; each concern gets its own JSON sublevel so a key of one can never
 * collide with another.
 */
export class Store {
  private closed = false;
  private constructor(readonly db: Level<string, unknown>) {}

  static async open(dataDir: string): Promise<Store> {
    await fs.mkdir(dataDir, { recursive: true });
    const db = new Level<string, unknown>(path.join(dataDir, 'db'), {
      valueEncoding: 'json',
      writeBufferSize: WRITE_BUFFER_BYTES,
      cacheSize: BLOCK_CACHE_BYTES,
    });
    await db.open();
    return new Store(db);
  }

  sublevel<V>(name: string) {
    return this.db.sublevel<string, V>(name, { valueEncoding: 'json' });
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.db.close();
  }
}

/** Records of one kind in their own JSON sublevel, keyed by a field of the record. */
export class RecordStore<V> {
  private readonly records;

  constructor(
    store: Store,
    name: string,
    private readonly keyOf: (record: V) => string,
  ) {
    this.records = store.sublevel<V>(name);
  }

  async get(key: string): Promise<V | undefined> {
    return this.records.get(key);
  }

  async put(record: V): Promise<void> {
    await this.records.put(this.keyOf(record), record);
  }

  async delete(key: string): Promise<void> {
    await this.records.del(key);
  }

  async all(): Promise<V[]> {
    const out: V[] = [];
    for await (const value of this.records.values()) out.push(value);
    return out;
  }
}
