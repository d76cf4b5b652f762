import { RecordStore, type Store } from './db.ts';

/** A tool call of a turn, as the chat loop reported it; `ok` is null until its result came (or never came). */
export interface TranscriptToolCall {
  call_id: string;
  name: string;
  /** The model's arguments, parsed (as in the SSE `tool_call` event). */
  arguments: Record<string, unknown>;
  ok: boolean | null;
}

/** One turn of a session's transcript (`GET /sessions/{id}/transcript`, the `turn.completed` webhook). */
export interface TranscriptTurn {
  turn_id: string;
  kind: string;
  /** chat: the prompt; voice, transcribe: what was recognised; otherwise null. */
  user_text: string | null;
  /** speak: the text; chat and voice: the model's reply as streamed; otherwise null. */
  assistant_text: string | null;
  /** What of `assistant_text` was played: all of it for a completed turn, the segments that had started for a cut one. */
  heard_text: string | null;
  tool_calls: TranscriptToolCall[];
  outcome: 'completed' | 'interrupted' | 'error' | 'paused';
  started_at: string;
  ended_at: string;
}

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
