/**
 * Where each custom-avatar creation is, for a client polling `GET /avatars/custom/uploads/{upload_id}` while its
 * `POST /avatars/custom` (carrying that `upload_id`) is still running: the upload bar reaches 100 % long before a
 * clip is decoded and its face tracked. An entry lives from the end of the upload to the answer, so the table holds
 * at most the creations admitted at once (`admitCustomAvatarUpload`'s bound); `MAX_TRACKED_CREATIONS` is a second,
 * independent bound in case that admission ever changes.
 */

/** The phases a client sees, in order; the POST's answer is the result. */
export type CreationPhase = 'processing' | 'saving';

export interface CreationProgressEntry {
  phase: CreationPhase;
  /** `image` or `video`: a clip's processing takes much longer. */
  kind: 'image' | 'video';
  started_at: string;
}

/** Client-chosen ids: short and URL-safe, so they can be echoed in a path. */
export const UPLOAD_ID_PATTERN = '^[A-Za-z0-9_-]{8,64}$';
/** Most creations tracked at once; beyond it a creation runs untracked (its poll answers 404 and the POST still answers). */
export const MAX_TRACKED_CREATIONS = 64;

export class CreationProgress {
  private readonly entries = new Map<string, CreationProgressEntry>();

  /** Starts tracking `uploadId` (ignored when it is already tracked or the table is full); answers the phase setter. */
  track(uploadId: string, kind: 'image' | 'video'): { phase(phase: CreationPhase): void; done(): void } {
    const owned = !this.entries.has(uploadId) && this.entries.size < MAX_TRACKED_CREATIONS;
    if (owned) this.entries.set(uploadId, { phase: 'processing', kind, started_at: new Date().toISOString() });
    return {
      phase: (phase) => {
        const entry = owned ? this.entries.get(uploadId) : undefined;
        if (entry) entry.phase = phase;
      },
      done: () => {
        if (owned) this.entries.delete(uploadId);
      },
    };
  }

  get(uploadId: string): CreationProgressEntry | undefined {
    return this.entries.get(uploadId);
  }
}
