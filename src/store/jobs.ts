import { RecordStore, type Store } from './db.ts';

export type JobStatus = 'pending' | 'running' | 'complete' | 'failed';

/** An offline bundle job as persisted: metadata only; the MP4 lives at `bundles/<job_id>.mp4`. */
export interface StoredJob {
  job_id: string;
  session_id: string;
  status: JobStatus;
  /** 0..1, never decreases. */
  progress: number;
  error: string | null;
  created_at: string;
  updated_at: string;
  started_at?: string;
  finished_at?: string;
  /** Set once finished: record and artifact are swept after this instant. */
  expires_at?: string;
  /** Length of the produced video, once complete. */
  duration_ms?: number;
}

/** Offline bundle jobs in their own sublevel, so they survive restarts. */
export class JobStore extends RecordStore<StoredJob> {
  constructor(store: Store) {
    super(store, 'offline-jobs', (job) => job.job_id);
  }
}
