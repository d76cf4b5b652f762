/**
 * Render kits of client-rendered sessions (issue 47, `actors/render/render-kit.ts`): one per avatar version and
 * model, built on first request in the kit thread and kept, by content hash, within `RENDER_KIT_CACHE_BYTES`.
 * Concurrent requests for one kit share its build; a failed build is tried again on the next request.
 */
import { createHash } from 'node:crypto';
import { CLIENT_RENDER_MODELS } from '../../actors/render/render-kit.ts';
import { buildRenderKitOffThread } from '../../actors/render/render-kit-pool.ts';
import { contentStamp } from '../../actors/render/pool.ts';
import { canRender } from '../../actors/render/compat.ts';
import { MODEL_TYPES, type ModelType } from '../../actors/render/types.ts';
import { AvatarNotFound, InvalidSelection } from '../domain-errors.ts';
import type { CatalogEntry } from './catalog.ts';

/**
 * Kit bytes kept at once: a dozen photo kits (~1.3 MB) and a few clips' (≤ 6 MB each). Past it the least recently
 * asked for goes (and is built again if asked for again: builds are deterministic, so its hash is the same).
 */
export const RENDER_KIT_CACHE_BYTES = 48 * 1024 * 1024;

export interface RenderKitFile {
  bytes: Uint8Array;
  /** sha256 of the bytes, 16 hex digits: the kit's URL and ETag. */
  hash: string;
  model: ModelType;
}

export class RenderKits {
  private readonly kits = new Map<string, Promise<RenderKitFile>>();
  private readonly sizes = new Map<string, number>();

  constructor(
    private readonly catalog: { get(id: string): Promise<CatalogEntry | undefined> },
    private readonly budgetBytes = RENDER_KIT_CACHE_BYTES,
  ) {}

  /** Bytes of the kits kept now (tests, diagnostics). */
  get bytes(): number {
    let total = 0;
    for (const size of this.sizes.values()) total += size;
    return total;
  }

  /**
   * The avatar's kit for `model` (default: the avatar's own model type). `AvatarNotFound` for an unknown avatar,
   * `InvalidSelection` for a model the browser cannot draw or that cannot render this avatar.
   */
  async kitOf(avatarId: string, model?: string): Promise<RenderKitFile> {
    const entry = await this.catalog.get(avatarId);
    if (!entry) throw new AvatarNotFound('avatar not found');
    const modelType = (model ?? entry.manifest.model_type) as ModelType;
    if (!CLIENT_RENDER_MODELS.includes(modelType))
      throw new InvalidSelection(
        `model "${MODEL_TYPES.includes(modelType) ? modelType : 'unknown'}" cannot render in the browser; client rendering is for ${CLIENT_RENDER_MODELS.join(', ')}`,
      );
    if (!canRender(modelType, entry.manifest.model_type))
      throw new InvalidSelection(
        `model "${modelType}" cannot render avatar "${entry.id}" of model_type "${entry.manifest.model_type}"`,
      );
    const key = [entry.id, entry.manifest.version, await contentStamp(entry), modelType].join('|');
    const kept = this.kits.get(key);
    if (kept) {
      // Least recently asked for goes first.
      this.kits.delete(key);
      this.kits.set(key, kept);
      return kept;
    }
    const build = buildRenderKitOffThread({ id: entry.id, dir: entry.dir, manifest: entry.manifest, model: modelType })
      .then((bytes) => {
        this.sizes.set(key, bytes.length);
        this.evict();
        const hash = createHash('sha256').update(bytes).digest('hex').slice(0, 16);
        return { bytes, hash, model: modelType };
      })
      .catch((error: unknown) => {
        if (this.kits.get(key) === build) this.kits.delete(key);
        throw error;
      });
    this.kits.set(key, build);
    return build;
  }

  private evict(): void {
    let total = this.bytes;
    for (const key of this.kits.keys()) {
      if (total <= this.budgetBytes) return;
      const size = this.sizes.get(key);
      if (size === undefined) continue; // still building
      this.kits.delete(key);
      this.sizes.delete(key);
      total -= size;
    }
  }
}
