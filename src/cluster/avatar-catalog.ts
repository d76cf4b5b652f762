import fs from 'node:fs/promises';
import path from 'node:path';
import type { Redis } from 'ioredis';
import type { Logger } from 'pino';
import type { AvatarManifest } from '../../actors/render/types.ts';
import { AvatarCatalog, toSummary, type AvatarSummary, type CatalogEntry } from '../catalog/catalog.ts';
import { removeBundleDir } from '../catalog/bundle-fs.ts';
import { validateManifest } from '../catalog/manifest.ts';
import { isValidAvatarId } from '../catalog/slug.ts';
import { errorForLog } from '../logger.ts';
import { AVATARS_KEY, KEY_PREFIX } from './scripts.ts';

/** Set once, by the first node that ever seeded the catalog: later nodes do not adopt custom bundles. */
const SEEDED_KEY = `${KEY_PREFIX}avatars:seeded`;
/**
 * A custom bundle directory with no catalog entry is removed once it is this old. Younger, it may be
 * another node's upload between its rename into place and its catalog write (milliseconds), or a delete
 * between its catalog removal and its rename to trash; older, that node crashed in between.
 */
export const ORPHAN_BUNDLE_MIN_AGE_MS = 10 * 60_000;
/** Parsed manifests kept, keyed by their JSON (a changed entry is parsed again); bounded by the catalog size. */
const PARSED_CACHE_MAX = 10_000;

/**
 * The avatar catalog of cluster mode: the bundle files stay in SERVICE_AVATARS_DIR on shared storage, and
 * the entries (avatar id → manifest JSON) live in one Redis hash, so a create or delete on any node is
 * seen by every node at its next read (no directory mtime, no NFS attribute cache).
 *
 * Crash consistency, as on one node: a custom bundle is built in a hidden `.tmp-<node>-*` directory,
 * renamed to its id, and only then written to the hash (the commit). A delete removes the entry first
 * (the commit), then renames the files to `.trash-<node>-*` and removes them. Each node's start-up sweep
 * removes only its own hidden directories; a custom directory with no entry older than
 * ORPHAN_BUNDLE_MIN_AGE_MS is a crash between the two steps and goes too. Built-in bundles (not
 * `custom-*`) are written to the hash by every node at start (the files are authoritative for them);
 * custom bundles already present when the cluster's catalog is first seeded are adopted once.
 */
export class RedisAvatarCatalog extends AvatarCatalog {
  override readonly tempTag: string;
  private readonly parsed = new Map<string, CatalogEntry>();

  constructor(
    dir: string,
    logger: Logger,
    private readonly redis: Redis,
    nodeId: string,
  ) {
    super(dir, logger);
    this.tempTag = nodeId;
  }

  /** Writes the directory's built-in bundles (and, on the cluster's first start, its custom ones) to the hash. */
  async seed(): Promise<number> {
    let found: Map<string, CatalogEntry>;
    try {
      found = await this.scanDirectory();
    } catch (error) {
      this.logger.warn({ err: errorForLog(error) }, 'avatars directory not readable');
      return 0;
    }
    const first = (await this.redis.set(SEEDED_KEY, new Date().toISOString(), 'NX')) === 'OK';
    const adopt = [...found.values()].filter((entry) => first || !entry.isCustom);
    if (adopt.length > 0)
      await this.redis.hset(
        AVATARS_KEY,
        Object.fromEntries(adopt.map((entry) => [entry.id, JSON.stringify(entry.manifest)])),
      );
    return adopt.length;
  }

  /** Removes custom bundle directories no entry points to, once they are old enough to be a crash's leftover. */
  async sweepOrphans(now = Date.now()): Promise<number> {
    const known = new Set(await this.redis.hkeys(AVATARS_KEY));
    let removed = 0;
    for (const dirent of await fs.readdir(this.dir, { withFileTypes: true })) {
      if (!dirent.isDirectory() || !dirent.name.startsWith('custom-') || known.has(dirent.name)) continue;
      const stat = await fs.stat(path.join(this.dir, dirent.name)).catch(() => null);
      if (!stat || now - stat.mtimeMs < ORPHAN_BUNDLE_MIN_AGE_MS) continue;
      await removeBundleDir(this.dir, dirent.name, this.tempTag).catch(() => undefined);
      removed++;
    }
    return removed;
  }

  override async list(): Promise<AvatarSummary[]> {
    const all = await this.redis.hgetall(AVATARS_KEY);
    const entries: CatalogEntry[] = [];
    for (const [id, raw] of Object.entries(all)) {
      const entry = this.entryOf(id, raw);
      if (entry && entry.manifest.metadata.hidden !== true) entries.push(entry);
    }
    return entries.sort((a, b) => a.id.localeCompare(b.id)).map(toSummary);
  }

  override async get(id: string): Promise<CatalogEntry | undefined> {
    if (!isValidAvatarId(id)) return undefined;
    const raw = await this.redis.hget(AVATARS_KEY, id);
    return raw ? this.entryOf(id, raw) : undefined;
  }

  /** The bundle is in place under its id: its manifest goes to the hash, the commit every node sees. */
  override async commitCreated(id: string): Promise<void> {
    const manifest = validateManifest(JSON.parse(await fs.readFile(path.join(this.dir, id, 'manifest.json'), 'utf8')));
    await this.redis.hset(AVATARS_KEY, id, JSON.stringify(manifest));
  }

  /** The entry's removal is the commit: of deletes racing on any nodes, only the one whose HDEL removed it goes on. */
  protected override async removeNow(id: string): Promise<boolean> {
    if (!isValidAvatarId(id)) throw new Error('invalid avatar id');
    if ((await this.redis.hdel(AVATARS_KEY, id)) === 0) return false;
    await removeBundleDir(this.dir, id, this.tempTag);
    return true;
  }

  override async refresh(): Promise<void> {
    // Every read goes to Redis: nothing to refresh.
  }

  private entryOf(id: string, raw: string): CatalogEntry | undefined {
    const cached = this.parsed.get(raw);
    if (cached) return cached;
    try {
      const manifest: AvatarManifest = validateManifest(JSON.parse(raw));
      if (manifest.id !== id) throw new Error('manifest id differs from its catalog key');
      const entry: CatalogEntry = {
        id,
        dir: path.join(this.dir, id),
        manifest,
        isCustom: manifest.metadata.custom_avatar === true,
      };
      if (this.parsed.size >= PARSED_CACHE_MAX) this.parsed.clear();
      this.parsed.set(raw, entry);
      return entry;
    } catch (error) {
      this.logger.warn({ avatarId: id, reason: errorForLog(error) }, 'invalid avatar catalog entry skipped');
      return undefined;
    }
  }
}
