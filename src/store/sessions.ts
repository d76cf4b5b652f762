import { RecordStore, type Store } from './db.ts';
import type { SessionState } from '../../machines/session.machine.ts';
import type { TtsProviderId } from '../../actors/tts/types.ts';

/** What is persisted per session: metadata only, never media. */
export interface StoredSession {
  session_id: string;
  avatar_id: string;
  model: string;
  /** Written only from a resolved selection (`resolveTtsSelection`), so always a known provider. */
  tts_provider: TtsProviderId;
  tts_voice: string | null;
  /** Provider-specific model used when a request names none (set through customize). */
  tts_model?: string | null;
  llm_system_prompt: string | null;
  lipsync_postprocess_mode: string | null;
  /** How much the avatar moves besides blinks and the mouth (create and customize `motion`); absent: 1. */
  motion?: number;
  /** Where the face is drawn (`POST /sessions` `render`); absent on records older than the option: server. */
  render?: 'server' | 'client';
  state: SessionState;
  created_at: string;
  updated_at: string;
  /** The session's own webhook receiver (on SERVICE_WEBHOOK_ALLOWED_HOSTS), besides SERVICE_WEBHOOK_URL. */
  webhook_url?: string | null;
  /** Set once terminated: the tombstone is removed after this instant. */
  expires_at?: string;
  terminated_reason?: string;
}

/** What the supervisor needs of a session store: LevelDB here, the Redis directory in cluster mode (src/cluster/). */
export type SessionRecords = Pick<SessionStore, 'get' | 'put' | 'delete' | 'all' | 'tombstoneOf'>;

/**
 * Live sessions and tombstones. A terminated session keeps only a tombstone (state `terminated`) for the
 * retention time so `start` and `webrtc/offer` can answer 409 instead of 404.
 */
export class SessionStore extends RecordStore<StoredSession> {
  constructor(store: Store) {
    super(store, 'sessions', (session) => session.session_id);
  }

  /** Turns a session into a tombstone: the stored session state is dropped, only identity and state remain. */
  tombstoneOf(session: StoredSession, retentionMs: number, reason: string, now = new Date()): StoredSession {
    return {
      session_id: session.session_id,
      avatar_id: session.avatar_id,
      model: session.model,
      tts_provider: session.tts_provider,
      tts_voice: session.tts_voice,
      llm_system_prompt: null,
      lipsync_postprocess_mode: null,
      render: session.render ?? 'server',
      state: 'terminated',
      created_at: session.created_at,
      updated_at: now.toISOString(),
      expires_at: new Date(now.getTime() + retentionMs).toISOString(),
      terminated_reason: reason,
    };
  }
}
