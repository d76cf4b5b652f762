import fs from 'node:fs/promises';
import path from 'node:path';
import type { Logger } from 'pino';
import type { AvatarManifest, AvatarSource } from '../../actors/render/types.ts';
import { validateManifest } from './manifest.ts';
import { isValidAvatarId } from './slug.ts';
import { errorForLog } from '../logger.ts';
import { removeBundleDir } from './bundle-fs.ts';

export interface AvatarSummary {
  id: string;
  name: string | null;
  model_type: string;
  width: number;
  height: number;
  is_custom: boolean;
  /** Photo (`lipsync`) avatars only: false when no face was found, so the mouth never moves (a still image). */
  animated?: boolean;
  /** In the creation answer of a still avatar only: why no face was used, in words for the person who uploaded it. */
  reason?: string;
}

export interface CatalogEntry extends AvatarSource {
  isCustom: boolean;
}

/** Manifests larger than this are not avatar manifests; refuse before parsing. */
const MAX_MANIFEST_BYTES = 1024 * 1024;

/**
 * The avatar catalog over `SERVICE_AVATARS_DIR`. Each sub-directory is a bundle; an invalid bundle is
 * logged and skipped. Directories starting with `.` (in-progress or being deleted) are never listed.
 * The scan is cached and redone when the directory changes (create/delete invalidate it directly).
 * This is the one-node backend: the directory is the catalog, and a bundle's rename into place is its
 * commit. Cluster mode uses `RedisAvatarCatalog` (src/cluster/avatar-catalog.ts): same files, the
 * entries in Redis, so every node sees a create or delete at once.
 */
export class AvatarCatalog {
  private entries = new Map<string, CatalogEntry>();
  private scannedMtimeMs = -1;
  private scanning: Promise<void> | null = null;
  /** The delete in progress per avatar id: a second delete of the same id waits for it (then finds nothing). */
  private readonly removing = new Map<string, Promise<boolean>>();

  /** Names this node's hidden build/trash directories (cluster mode), so its start-up sweep removes only its own. */
  readonly tempTag: string | undefined = undefined;

  constructor(
    readonly dir: string,
    protected readonly logger: Logger,
  ) {}

  /** A bundle was renamed into place (custom-avatar.ts): it is listed from now on. */
  async commitCreated(_id: string): Promise<void> {
    this.invalidate();
  }

  /**
   * Deletes a bundle: it leaves the listing first, then its files go (bundle-fs.ts). Concurrent deletes of
   * one id run one after the other, so exactly one resolves true and the others false (the route's 404),
   * whatever their interleaving.
   */
  async remove(id: string): Promise<boolean> {
    const before = this.removing.get(id);
    const mine = (before ? before.catch(() => false) : Promise.resolve(false)).then(() => this.removeNow(id));
    this.removing.set(id, mine);
    try {
      return await mine;
    } finally {
      if (this.removing.get(id) === mine) this.removing.delete(id);
    }
  }

  /** One delete, with no other delete of this id running: false when the bundle was already gone. */
  protected async removeNow(id: string): Promise<boolean> {
    const removed = await removeBundleDir(this.dir, id, this.tempTag);
    this.invalidate();
    return removed;
  }

  async list(): Promise<AvatarSummary[]> {
    await this.refresh();
    return [...this.entries.values()]
      .filter((entry) => entry.manifest.metadata.hidden !== true)
      .sort((a, b) => a.id.localeCompare(b.id))
      .map(toSummary);
  }

  /** Any avatar by id, hidden ones included; undefined for unknown or malformed ids. */
  async get(id: string): Promise<CatalogEntry | undefined> {
    if (!isValidAvatarId(id)) return undefined;
    await this.refresh();
    return this.entries.get(id);
  }

  /** Forces the next read to rescan (after a create or delete). */
  invalidate(): void {
    this.scannedMtimeMs = -1;
  }

  async refresh(): Promise<void> {
    let mtimeMs: number;
    try {
      mtimeMs = (await fs.stat(this.dir)).mtimeMs;
    } catch {
      this.entries = new Map();
      return;
    }
    if (mtimeMs === this.scannedMtimeMs) return;
    this.scanning ??= this.scan(mtimeMs).finally(() => (this.scanning = null));
    await this.scanning;
  }

  protected async scan(mtimeMs: number): Promise<void> {
    const next = new Map<string, CatalogEntry>();
    const dirents = await fs.readdir(this.dir, { withFileTypes: true });
    for (const dirent of dirents) {
      if (!dirent.isDirectory() || dirent.name.startsWith('.')) continue;
      const bundleDir = path.join(this.dir, dirent.name);
      const entry = await this.load(bundleDir, dirent.name);
      if (!entry) continue;
      if (next.has(entry.id)) {
        this.logger.warn({ avatarId: entry.id }, 'duplicate avatar id skipped');
        continue;
      }
      next.set(entry.id, entry);
    }
    this.entries = next;
    this.scannedMtimeMs = mtimeMs;
  }

  /** Every valid bundle in the directory right now (cluster mode seeds its catalog from this). */
  protected async scanDirectory(): Promise<Map<string, CatalogEntry>> {
    const mtimeMs = (await fs.stat(this.dir)).mtimeMs;
    await this.scan(mtimeMs);
    return this.entries;
  }

  protected async load(bundleDir: string, dirName: string): Promise<CatalogEntry | null> {
    try {
      const manifestPath = path.join(bundleDir, 'manifest.json');
      const stat = await fs.stat(manifestPath);
      if (stat.size > MAX_MANIFEST_BYTES) throw new Error('manifest.json too large');
      const manifest: AvatarManifest = validateManifest(JSON.parse(await fs.readFile(manifestPath, 'utf8')));
      if (manifest.id !== dirName) throw new Error('manifest id differs from its directory name');
      await fs.access(path.join(bundleDir, 'frames', 'frame_00000.png'));
      return { id: manifest.id, dir: bundleDir, manifest, isCustom: manifest.metadata.custom_avatar === true };
    } catch (error) {
      this.logger.warn({ bundle: dirName, reason: errorForLog(error) }, 'invalid avatar bundle skipped');
      return null;
    }
  }
}

export function toSummary(entry: CatalogEntry): AvatarSummary {
  return {
    id: entry.id,
    name: entry.manifest.name ?? entry.id,
    model_type: entry.manifest.model_type,
    width: entry.manifest.width,
    height: entry.manifest.height,
    is_custom: entry.isCustom,
    ...(entry.manifest.model_type === 'lipsync' ? { animated: entry.manifest.metadata.animation !== undefined } : {}),
  };
}
