import type { Store } from '../store/db.ts';

/**
 * Deliveries the outbox holds at most (pending and retrying, all receivers). A delivery is a few KB (a turn's
 * transcript entry is the largest body); 10,000 of them are tens of MB in LevelDB and memory, a day of events of a
 * busy service whose receiver is down. Past it the oldest delivery is dropped (counted in `/metrics`).
 */
export const WEBHOOK_OUTBOX_MAX_ENTRIES = 10_000;

/** One message to one receiver, as persisted: everything a retry after a restart needs. */
export interface OutboxEntry {
  /** LevelDB key: a zero-padded sequence number, so the store's order is the order events were emitted in. */
  key: string;
  /** The Standard Webhooks `webhook-id`: the same on every attempt (receivers deduplicate on it). */
  id: string;
  url: string;
  /** The event type, for logs. */
  type: string;
  /** The exact body signed and sent: `{type, timestamp, data}`. */
  body: string;
  /** When the event was emitted (ms since the epoch): retries stop a retry period after it. */
  createdAt: number;
  attempts: number;
  /** When the next attempt is due (ms since the epoch). */
  nextAt: number;
}

const KEY_DIGITS = 16;

/**
 * The persistent webhook outbox: an event counts as emitted once its deliveries are in LevelDB (its own sublevel),
 * so a delivery pending at a crash (even `kill -9`) is loaded again at start-up and retried. Bounded by
 * `maxEntries`: adding past it drops the oldest entry in the same batch. Entries are also kept in memory, in order;
 * the delivery loop (`delivery.ts`) reads them there.
 */
export class WebhookOutbox {
  private readonly entries = new Map<string, OutboxEntry>();
  private readonly db;
  private nextSeq = 0;

  constructor(
    store: Store,
    private readonly maxEntries = WEBHOOK_OUTBOX_MAX_ENTRIES,
    /** Called once per entry dropped to make room. */
    private readonly onDropped: () => void = () => undefined,
  ) {
    this.db = store.sublevel<OutboxEntry>('webhook-outbox');
  }

  /** Loads what a previous run left (start-up, before the first delivery). */
  async load(): Promise<void> {
    for await (const entry of this.db.values()) {
      this.entries.set(entry.key, entry);
      this.nextSeq = Math.max(this.nextSeq, Number(entry.key) + 1);
    }
  }

  get size(): number {
    return this.entries.size;
  }

  /** Persists a new delivery; resolves once it is stored (the event is emitted from then on). */
  async add(entry: Omit<OutboxEntry, 'key'>): Promise<OutboxEntry> {
    const stored: OutboxEntry = { key: String(this.nextSeq++).padStart(KEY_DIGITS, '0'), ...entry };
    const dropped: string[] = [];
    // Counted before the write: concurrent adds must not each see room for themselves.
    for (const key of this.entries.keys()) {
      if (this.entries.size + 1 - dropped.length <= this.maxEntries) break;
      dropped.push(key);
    }
    for (const key of dropped) this.entries.delete(key);
    this.entries.set(stored.key, stored);
    for (let i = 0; i < dropped.length; i++) this.onDropped();
    await this.db.batch([...dropped.map((key) => ({ type: 'del' as const, key })), { type: 'put' as const, key: stored.key, value: stored }]);
    return stored;
  }

  /** Entries in emission order (a snapshot). */
  all(): OutboxEntry[] {
    return [...this.entries.values()];
  }

  has(key: string): boolean {
    return this.entries.has(key);
  }

  /** Records a failed attempt (attempts and next time); a dropped entry stays dropped. */
  async reschedule(entry: OutboxEntry): Promise<void> {
    if (!this.entries.has(entry.key)) return;
    this.entries.set(entry.key, entry);
    await this.db.put(entry.key, entry);
  }

  /** Delivered or given up. */
  async remove(key: string): Promise<void> {
    this.entries.delete(key);
    await this.db.del(key);
  }
}
