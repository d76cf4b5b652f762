import fs from 'node:fs/promises';
import path from 'node:path';
import { Level } from 'level';

export type JsonSublevel<V> = ReturnType<Level<string, unknown>['sublevel']> & {
  get(key: string): Promise<V | undefined>;
};

/**
 * One LevelDB per data directory; each concern gets its own JSON sublevel so a key of one can never
 * collide with another.
 */
export class Store {
  private closed = false;
  private constructor(readonly db: Level<string, unknown>) {}

  static async open(dataDir: string): Promise<Store> {
    await fs.mkdir(dataDir, { recursive: true });
    const db = new Level<string, unknown>(path.join(dataDir, 'db'), { valueEncoding: 'json' });
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
