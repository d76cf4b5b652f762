import type { Store } from './db.ts';
import type { TranscriptTurn } from './transcript-turn.ts';

export type { TranscriptToolCall, TranscriptTurn } from './transcript-turn.ts';

/** One kept turn: its place in the session's transcript, its id and its JSON, serialised once when it ended. */
export interface KeptTurn {
  seq: number;
  turnId: string;
  json: string;
  /** UTF-8 bytes of `json`. */
  bytes: number;
}

/** What is persisted per session beside its turns: where they are, how big, and once terminated the tombstone's expiry. */
export interface TranscriptIndex {
  session_id: string;
  /** Sequence numbers of the oldest kept turn and of the next turn. */
  first_seq: number;
  next_seq: number;
  /** UTF-8 bytes of the kept turns' JSON (what the byte budgets count). */
  bytes: number;
  /** When the last turn was written (ms since the epoch): the global bound drops the oldest transcripts first. */
  updated_at: number;
  /** Set when the session ended: the same instant as its tombstone's `expires_at`. */
  expires_at?: string;
}

/** The whole transcript of a session as an earlier version stored it (one record, rewritten after every turn). */
interface WholeTranscript {
  session_id: string;
  turns: TranscriptTurn[];
  expires_at?: string;
}

const SEQ_DIGITS = 10;
/** Sorts after every key of a session (`!` and digits): the end of its key range. */
const RANGE_END = '~';

/**
 * Transcripts in LevelDB: one record per turn (`transcript-turns`, keyed `<session>!<seq>!<turn id>`, its JSON as
 * written once) and one small index record per session (`transcript-index`). A turn is appended with its index in one
 * batch; nothing is ever rewritten whole.
 */
export class TranscriptStore {
  private readonly turns;
  private readonly indexes;

  constructor(private readonly store: Store) {
    this.turns = store.db.sublevel<string, string>('transcript-turns', { valueEncoding: 'utf8' });
    this.indexes = store.sublevel<TranscriptIndex>('transcript-index');
  }

  async index(sessionId: string): Promise<TranscriptIndex | undefined> {
    return this.indexes.get(sessionId);
  }

  async allIndexes(): Promise<TranscriptIndex[]> {
    const out: TranscriptIndex[] = [];
    for await (const index of this.indexes.values()) out.push(index);
    return out;
  }

  /** Appends one turn and drops the given older ones, with the session's new index, in one batch. */
  async append(index: TranscriptIndex, turn: KeptTurn, dropped: readonly KeptTurn[]): Promise<void> {
    await this.store.db.batch([
      ...dropped.map((old) => ({ type: 'del' as const, sublevel: this.turns, key: turnKey(index.session_id, old) })),
      { type: 'put', sublevel: this.turns, key: turnKey(index.session_id, turn), value: turn.json },
      { type: 'put', sublevel: this.indexes, key: index.session_id, value: index },
    ]);
  }

  async putIndex(index: TranscriptIndex): Promise<void> {
    await this.indexes.put(index.session_id, index);
  }

  /**
   * Up to `limit` kept turns' JSON, oldest first, after the turn `afterTurnId` (from the oldest without it). Null
   * when `afterTurnId` is not a kept turn of the session.
   */
  async page(sessionId: string, afterTurnId: string | undefined, limit: number): Promise<string[] | null> {
    let from = `${sessionId}!`;
    if (afterTurnId !== undefined) {
      const key = await this.keyOf(sessionId, afterTurnId);
      if (key === null) return null;
      from = key;
    }
    const out: string[] = [];
    for await (const json of this.turns.values({ gt: from, lt: `${sessionId}!${RANGE_END}`, limit })) out.push(json);
    return out;
  }

  /** Removes a session's transcript: its index and every turn. */
  async delete(sessionId: string): Promise<void> {
    await this.turns.clear({ gte: `${sessionId}!`, lt: `${sessionId}!${RANGE_END}` });
    await this.indexes.del(sessionId);
  }

  /**
   * Whole transcripts an earlier version left in the `transcripts` sublevel, handed to `adopt` one by one and removed:
   * the caller re-appends them turn by turn, within its budgets.
   */
  async migrateWholeTranscripts(adopt: (transcript: WholeTranscript) => Promise<void>): Promise<void> {
    const legacy = this.store.sublevel<WholeTranscript>('transcripts');
    for await (const [key, transcript] of legacy.iterator()) {
      await adopt(transcript);
      await legacy.del(key);
    }
  }

  /** The key of a kept turn, found by its id (keys only: a few hundred short strings at most). */
  private async keyOf(sessionId: string, turnId: string): Promise<string | null> {
    for await (const key of this.turns.keys({ gt: `${sessionId}!`, lt: `${sessionId}!${RANGE_END}` })) {
      if (key.endsWith(`!${turnId}`)) return key;
    }
    return null;
  }
}

function turnKey(sessionId: string, turn: KeptTurn): string {
  return `${sessionId}!${String(turn.seq).padStart(SEQ_DIGITS, '0')}!${turn.turnId}`;
}
