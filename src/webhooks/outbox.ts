import type { Store } from '../store/db.ts';

/**
 * Deliveries the outbox holds at most (pending and retrying, all receivers): a day of events of a busy service whose
 * receiver is down. Past it (or past WEBHOOK_OUTBOX_MAX_BYTES) the oldest delivery is dropped (counted in `/metrics`).
 */
export const WEBHOOK_OUTBOX_MAX_ENTRIES = 10_000;
/**
 * Body bytes the outbox holds at most, all deliveries together. Every body is kept in memory (the delivery loop reads
 * it there) and once in LevelDB, so this bounds both: 16 MiB is ~800 `turn.completed` events at their largest
 * (WEBHOOK_BODY_MAX_BYTES) or thousands of ordinary ones. A dead receiver with 60–120 KB bodies took an unbounded
 * outbox to 1.38 GB of RSS (issue 42, H2).
 */
export const WEBHOOK_OUTBOX_MAX_BYTES = 16 * 1024 * 1024;
/**
 * One body at most. The largest event, `turn.completed`, carries a transcript entry already cut to its own budget
 * (TRANSCRIPT_TURN_MAX_BYTES, 40 KiB, `src/sessions/transcript.ts`); every other event is a few hundred bytes. A body
 * past this is not stored (counted as dropped): one event must never push out hundreds of others.
 */
export const WEBHOOK_BODY_MAX_BYTES = 64 * 1024;

/** One message to one receiver, as the delivery loop sees it: everything a retry after a restart needs. */
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

/** What is written once per delivery: the message itself. */
type StoredMessage = Pick<OutboxEntry, 'id' | 'url' | 'type' | 'body' | 'createdAt'>;
/** What a failed attempt rewrites: a few bytes, never the body (absent: not attempted yet). */
type StoredSchedule = Pick<OutboxEntry, 'attempts' | 'nextAt'>;

const KEY_DIGITS = 16;

/**
 * The persistent webhook outbox: an event counts as emitted once its delivery is in LevelDB, so a delivery pending at
 * a crash (even `kill -9`) is loaded again at start-up and retried. The message (with its body) is written once, in the
 * `webhook-messages` sublevel; a failed attempt rewrites only its small schedule record (`webhook-schedule`). Bounded
 * by entries and body bytes: adding past either drops the oldest entries in the same batch. Entries are also kept in
 * memory, in order and per receiver; the delivery loop (`delivery.ts`) reads them there.
 */
export class WebhookOutbox {
  private readonly entries = new Map<string, OutboxEntry>();
  private readonly byReceiver = new Map<string, Map<string, OutboxEntry>>();
  private readonly messages;
  private readonly schedules;
  private bodyBytes = 0;
  private nextSeq = 0;

  constructor(
    private readonly store: Store,
    private readonly maxEntries = WEBHOOK_OUTBOX_MAX_ENTRIES,
    /** Called once per entry dropped to make room (or refused as too large). */
    private readonly onDropped: () => void = () => undefined,
    private readonly maxBytes = WEBHOOK_OUTBOX_MAX_BYTES,
  ) {
    this.messages = store.sublevel<StoredMessage>('webhook-messages');
    this.schedules = store.sublevel<StoredSchedule>('webhook-schedule');
  }

  /** Loads what a previous run left (start-up, before the first delivery). */
  async load(): Promise<void> {
    const schedules = new Map<string, StoredSchedule>();
    for await (const [key, schedule] of this.schedules.iterator()) schedules.set(key, schedule);
    for await (const [key, message] of this.messages.iterator()) {
      this.remember({ key, ...message, attempts: 0, nextAt: message.createdAt, ...schedules.get(key) });
      this.nextSeq = Math.max(this.nextSeq, Number(key) + 1);
    }
    await this.migrateWholeEntries();
  }

  get size(): number {
    return this.entries.size;
  }

  /** Body bytes held (the bound is `maxBytes`). */
  get bytes(): number {
    return this.bodyBytes;
  }

  /**
   * Persists a new delivery; resolves once it is stored (the event is emitted from then on). A body over
   * WEBHOOK_BODY_MAX_BYTES is not stored: null, counted as dropped.
   */
  async add(entry: Omit<OutboxEntry, 'key'>): Promise<OutboxEntry | null> {
    const size = Buffer.byteLength(entry.body);
    if (size > Math.min(WEBHOOK_BODY_MAX_BYTES, this.maxBytes)) {
      this.onDropped();
      return null;
    }
    const stored: OutboxEntry = { key: String(this.nextSeq++).padStart(KEY_DIGITS, '0'), ...entry };
    // Room is made before the write: concurrent adds must not each see room for themselves.
    const dropped: string[] = [];
    for (const old of this.entries.values()) {
      if (this.entries.size + 1 <= this.maxEntries && this.bodyBytes + size <= this.maxBytes) break;
      this.forget(old);
      dropped.push(old.key);
    }
    this.remember(stored);
    for (let i = 0; i < dropped.length; i++) this.onDropped();
    const { id, url, type, body, createdAt } = stored;
    await this.store.db.batch([
      ...dropped.flatMap((key) => this.deletions(key)),
      { type: 'put', sublevel: this.messages, key: stored.key, value: { id, url, type, body, createdAt } },
    ]);
    return stored;
  }

  /** Entries in emission order (a snapshot). */
  all(): OutboxEntry[] {
    return [...this.entries.values()];
  }

  /** Receivers with entries waiting. */
  receivers(): string[] {
    return [...this.byReceiver.keys()];
  }

  /** One receiver's entries, oldest first (live: iterate, don't hold). */
  pendingOf(url: string): IterableIterator<OutboxEntry> {
    return (this.byReceiver.get(url) ?? new Map<string, OutboxEntry>()).values();
  }

  has(key: string): boolean {
    return this.entries.has(key);
  }

  /** Records a failed attempt: only attempts and next time are written; a dropped entry stays dropped. */
  async reschedule(entry: OutboxEntry): Promise<void> {
    const kept = this.entries.get(entry.key);
    if (!kept) return;
    kept.attempts = entry.attempts;
    kept.nextAt = entry.nextAt;
    await this.schedules.put(entry.key, { attempts: entry.attempts, nextAt: entry.nextAt });
  }

  /** Delivered or given up. */
  async remove(key: string): Promise<void> {
    const entry = this.entries.get(key);
    if (entry) this.forget(entry);
    await this.store.db.batch(this.deletions(key));
  }

  private deletions(key: string) {
    return [
      { type: 'del' as const, sublevel: this.messages, key },
      { type: 'del' as const, sublevel: this.schedules, key },
    ];
  }

  private remember(entry: OutboxEntry): void {
    this.entries.set(entry.key, entry);
    this.bodyBytes += Buffer.byteLength(entry.body);
    let receiver = this.byReceiver.get(entry.url);
    if (!receiver) this.byReceiver.set(entry.url, (receiver = new Map()));
    receiver.set(entry.key, entry);
  }

  private forget(entry: OutboxEntry): void {
    if (!this.entries.delete(entry.key)) return;
    this.bodyBytes -= Buffer.byteLength(entry.body);
    const receiver = this.byReceiver.get(entry.url);
    receiver?.delete(entry.key);
    if (receiver?.size === 0) this.byReceiver.delete(entry.url);
  }

  /**
   * Entries an earlier version left whole in the `webhook-outbox` sublevel (body and schedule in one record, rewritten
   * on every retry) move to the two sublevels above, within the bounds, once.
   */
  private async migrateWholeEntries(): Promise<void> {
    const legacy = this.store.sublevel<OutboxEntry>('webhook-outbox');
    for await (const [key, entry] of legacy.iterator()) {
      const added = await this.add({
        id: entry.id,
        url: entry.url,
        type: entry.type,
        body: entry.body,
        createdAt: entry.createdAt,
        attempts: 0,
        nextAt: entry.createdAt,
      });
      if (added && entry.attempts > 0)
        await this.reschedule({ ...added, attempts: entry.attempts, nextAt: entry.nextAt });
      await legacy.del(key);
    }
  }
}
