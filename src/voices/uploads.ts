/**
 * Short-lived clone samples that a cloud (cloud_b) downloads from `GET /voice-uploads/{token}`.
 * Each sample is one file `<token>.<expiresAtMs>.wav`: the expiry lives in the name, so it survives
 * restarts without a side index, and the file appears atomically (written to a temporary name, then
 * renamed) so a reader never sees half a sample.
 *
 * While its clone is in flight a sample is `<token>.<expiresAtMs>.pending.wav` (served all the same: the
 * provider fetches it during the clone); `commit` drops the `.pending` once the catalog record exists. So a
 * sample whose clone a crash cut short is recognisable by its name, and `recover()` removes it at start-up.
 */
import { randomBytes } from 'node:crypto';
import { mkdir, readdir, rename, rm } from 'node:fs/promises';
import path from 'node:path';
import { finalNameOf, writeFileAtomic } from '../files/atomic-file.ts';

export const UPLOAD_TOKEN_PATTERN = /^[0-9a-f]{32}$/;
/** Spec: the sample is removed about 300 s after upload — long enough for the provider to fetch it. */
export const DEFAULT_UPLOAD_TTL_MS = 300_000;
/** How often expired samples are deleted; expiry is also checked on every read, so this only frees disk. */
const SWEEP_INTERVAL_MS = 30_000;
/** `<token>.<expiresAtMs>.wav`, or `.pending.wav` while its clone is in flight. */
const FILE_PATTERN = /^([0-9a-f]{32})\.(\d+)(\.pending)?\.wav$/;
const PENDING_SUFFIX = '.pending.wav';

export interface VoiceUploadsOptions {
  dir: string;
  ttlMs?: number;
  now?: () => number;
}

export class VoiceUploads {
  private readonly dir: string;
  private readonly ttlMs: number;
  private readonly now: () => number;
  private timer: NodeJS.Timeout | null = null;
  private closed = false;

  constructor(options: VoiceUploadsOptions) {
    this.dir = options.dir;
    this.ttlMs = options.ttlMs ?? DEFAULT_UPLOAD_TTL_MS;
    this.now = options.now ?? Date.now;
  }

  /** Stores a sample as pending (served, but removed by `recover()` unless committed); returns its token. */
  async store(wav: Buffer): Promise<string> {
    await mkdir(this.dir, { recursive: true });
    const token = randomBytes(16).toString('hex');
    await writeFileAtomic(path.join(this.dir, `${token}.${this.now() + this.ttlMs}${PENDING_SUFFIX}`), wav);
    return token;
  }

  /** The clone that uploaded the sample is in the catalog: the sample now lives until its expiry, restarts included. */
  async commit(token: string): Promise<void> {
    if (!UPLOAD_TOKEN_PATTERN.test(token)) return;
    for (const file of await this.files()) {
      if (file.token !== token || !file.pending) continue;
      await rename(file.path, path.join(this.dir, `${token}.${file.expiresAt}.wav`));
    }
  }

  /** Absolute path of a live sample; null when the token is malformed, unknown or expired. */
  async path(token: string): Promise<string | null> {
    if (!UPLOAD_TOKEN_PATTERN.test(token)) return null;
    for (const file of await this.files()) {
      if (file.token !== token) continue;
      if (file.expiresAt <= this.now()) {
        await rm(file.path, { force: true });
        return null;
      }
      return file.path;
    }
    return null;
  }

  /** Deletes a sample at once (a clone that failed must not leave it behind). */
  async remove(token: string): Promise<void> {
    if (!UPLOAD_TOKEN_PATTERN.test(token)) return;
    await Promise.all(
      (await this.files()).filter((file) => file.token === token).map((file) => rm(file.path, { force: true })),
    );
  }

  /**
   * Deletes every expired sample, and temporary files of writes that would have expired by now (a write in
   * progress is younger than the TTL, so it is never touched). Resolves with how many files went.
   */
  async sweep(): Promise<number> {
    const now = this.now();
    return this.removeWhere((name) => {
      const sample = FILE_PATTERN.exec(finalNameOf(name));
      return sample !== null && Number(sample[2]) <= now;
    });
  }

  /**
   * Start-up sweep, before any clone can run: keeps only committed, unexpired samples. Pending samples (their
   * clone never reached the catalog), half-written files and anything else in the directory go.
   */
  async recover(): Promise<number> {
    const now = this.now();
    return this.removeWhere((name) => {
      const sample = FILE_PATTERN.exec(name);
      return sample === null || sample[3] !== undefined || Number(sample[2]) <= now;
    });
  }

  private async removeWhere(doomed: (name: string) => boolean): Promise<number> {
    let names: string[];
    try {
      names = await readdir(this.dir);
    } catch {
      return 0;
    }
    const victims = names.filter(doomed);
    await Promise.all(victims.map((name) => rm(path.join(this.dir, name), { recursive: true, force: true })));
    return victims.length;
  }

  /** Sweeps now (expired samples from before a restart) and then periodically, without keeping the process alive. */
  start(): void {
    if (this.timer || this.closed) return;
    void this.sweep().catch(() => {});
    this.timer = setInterval(() => void this.sweep().catch(() => {}), SWEEP_INTERVAL_MS);
    this.timer.unref();
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  private async files(): Promise<Array<{ token: string; expiresAt: number; pending: boolean; path: string }>> {
    let names: string[];
    try {
      names = await readdir(this.dir);
    } catch {
      return [];
    }
    return names.flatMap((name) => {
      const match = FILE_PATTERN.exec(name);
      return match
        ? [
            {
              token: match[1],
              expiresAt: Number(match[2]),
              pending: match[3] !== undefined,
              path: path.join(this.dir, name),
            },
          ]
        : [];
    });
  }
}
