/** Who can be using a started session; anything else (a client that went away) leaves it orphaned. */
export type ConsumerKind =
  | 'sse'
  | 'webrtc'
  | 'audio_ws'
  | 'listen_ws'
  | 'recording'
  | 'offline_job'
  | 'whep'
  | 'output';

/**
 * The consumers of one session, so the supervisor can reap a session nobody uses any more (a closed
 * browser tab). Two ways to be a consumer:
 * - `hold(kind)` while something is open (an SSE stream, a WebSocket, a job); the returned release is
 *   idempotent, so it can be wired to every end event (close, error) at once;
 * - `watch(kind, isPresent)` for a consumer whose presence is a state its owner already keeps (a peer
 *   connection's `connected`, a recorder running); read at each check, one per kind.
 * `touch()` marks client activity without a lasting consumer (any REST call on the session).
 */
export class SessionConsumers {
  private readonly holds = new Map<ConsumerKind, number>();
  private readonly watches = new Map<ConsumerKind, () => boolean>();
  private lastSeenAt: number;

  constructor(private readonly now: () => number = () => performance.now()) {
    this.lastSeenAt = now();
  }

  hold(kind: ConsumerKind): () => void {
    this.holds.set(kind, (this.holds.get(kind) ?? 0) + 1);
    this.touch();
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const left = (this.holds.get(kind) ?? 1) - 1;
      if (left > 0) this.holds.set(kind, left);
      else this.holds.delete(kind);
      // Idle time counts from when the last consumer left, not from when it arrived.
      this.touch();
    };
  }

  /** Replaces any earlier watch of the same kind, so repeated calls (a recording restarted) stay bounded. */
  watch(kind: ConsumerKind, isPresent: () => boolean): void {
    this.watches.set(kind, isPresent);
  }

  touch(): void {
    this.lastSeenAt = this.now();
  }

  /** The kinds present right now (holds and watches that report present). */
  present(): ConsumerKind[] {
    const kinds = new Set(this.holds.keys());
    for (const [kind, isPresent] of this.watches) if (isPresent()) kinds.add(kind);
    return [...kinds];
  }

  /** How long the session has had no consumer and no REST call; 0 while any consumer is present. */
  idleMs(): number {
    if (this.present().length > 0) this.touch();
    return this.now() - this.lastSeenAt;
  }
}
