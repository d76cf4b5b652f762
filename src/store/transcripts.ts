import type { Static } from '@sinclair/typebox';
import type { TranscriptToolCall as TranscriptToolCallSchema, TranscriptTurn as TranscriptTurnSchema } from '../schemas/sessions.ts';
import { RecordStore, type Store } from './db.ts';

/** A tool call of a turn and one turn of the transcript: their types come from the route's schemas (one source). */
export type TranscriptToolCall = Static<typeof TranscriptToolCallSchema>;
export type TranscriptTurn = Static<typeof TranscriptTurnSchema>;

/** What is persisted per session: its newest turns, and once terminated the tombstone's expiry. */
export interface StoredTranscript {
  session_id: string;
  turns: TranscriptTurn[];
  /** Set when the session ended: the same instant as its tombstone's `expires_at`. */
  expires_at?: string;
}

/** Transcripts in their own sublevel, keyed by session id, removed with the session's tombstone. */
export class TranscriptStore extends RecordStore<StoredTranscript> {
  constructor(store: Store) {
    super(store, 'transcripts', (transcript) => transcript.session_id);
  }
}
