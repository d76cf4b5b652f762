/**
 * Short-lived clone samples that a cloud (cloud_b) downloads from `GET /voice-uploads/{token}`.
 * Each sample is one file `<token>.<expiresAtMs>.wav`: the expiry lives in the name, so it survives
 * restarts without a side index, and the file appears atomically (written to a temporary name, then
 * renamed) so a reader never sees half a sample.
 */
import { randomBytes } from 'node:crypto';
import { mkdir, readdir, rename, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';

export const UPLOAD_TOKEN_PATTERN = /^[0-9a-f]{32}$/;
/** Spec: the sample is removed about 300 s after upload — long enough for the provider to fetch it. */
export const DEFAULT_UPLOAD_TTL_MS = 300_000;
/** How often expired samples are deleted; expiry is also checked on every read, so this only frees disk. */
const SWEEP_INTERVAL_MS = 30_000;
const FILE_PATTERN = /^([0-9a-f]{32})\.(\d+)\.wav$/;
const TEMPORARY_SUFFIX = '.tmp';

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

  async store(wav: Buffer): Promise<string> {
    await mkdir(this.dir, { recursive: true });
    const token = randomBytes(16).toString('hex');
    const final = path.join(this.dir, `${token}.${this.now() + this.ttlMs}.wav`);
    const temporary = `${final}${TEMPORARY_SUFFIX}`;
    try {
      await writeFile(temporary, wav);
      await rename(temporary, final);
    } catch (error) {
      await rm(temporary, { force: true });
      throw error;
    }
    return token;
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
    await Promise.all((await this.files()).filter((file) => file.token === token).map((file) => rm(file.path, { force: true })));
  }

  /** Deletes every expired sample and leftovers of interrupted writes. */
  async sweep(): Promise<void> {
    let names: string[];
    try {
      names = await readdir(this.dir);
    } catch {
      return;
    }
    const now = this.now();
    await Promise.all(
      names.map(async (name) => {
        const match = FILE_PATTERN.exec(name);
        const leftover = name.endsWith(TEMPORARY_SUFFIX) && FILE_PATTERN.test(name.slice(0, -TEMPORARY_SUFFIX.length))
          && Number(FILE_PATTERN.exec(name.slice(0, -TEMPORARY_SUFFIX.length))![2]) <= now;
        if ((match && Number(match[2]) <= now) || leftover) await rm(path.join(this.dir, name), { force: true });
      }),
    );
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

  private async files(): Promise<Array<{ token: string; expiresAt: number; path: string }>> {
    let names: string[];
    try {
      names = await readdir(this.dir);
    } catch {
      return [];
    }
    return names.flatMap((name) => {
      const match = FILE_PATTERN.exec(name);
      return match ? [{ token: match[1], expiresAt: Number(match[2]), path: path.join(this.dir, name) }] : [];
    });
  }
}
