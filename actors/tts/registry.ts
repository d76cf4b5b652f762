/**
 * The set of TTS providers, one instance per id, built from configuration. Unconfigured providers
 * are still registered (so `list()` can say which variable to set); using one throws
 * `ProviderNotConfiguredError` instead of quietly falling back to another provider.
 */
import type { FetchLike } from '../upstream/http.ts';
import { createBuiltinProvider } from './providers/builtin.ts';
import { createCloudAProvider } from './providers/cloud_a.ts';
import { createCloudBProvider } from './providers/cloud_b.ts';
import { createCloudCProvider } from './providers/cloud_c.ts';
import { createCloudDProvider } from './providers/cloud_d.ts';
import { createCloudEProvider } from './providers/cloud_e.ts';
import { createCloudFProvider } from './providers/cloud_f.ts';
import type { CloningProviderConfig, VoiceLookup } from './providers/common.ts';
import { createCompatHttpProvider } from './providers/compat_http.ts';
import { createLocalCloneAProvider } from './providers/local_clone_a.ts';
import { createLocalCloneBProvider } from './providers/local_clone_b.ts';
import { TTS_PROVIDER_IDS, type TtsLogger, type TtsProvider, type TtsProviderId } from './types.ts';

export type RemoteTtsProviderId = Exclude<TtsProviderId, 'builtin'>;
export const REMOTE_TTS_PROVIDER_IDS = TTS_PROVIDER_IDS.filter((id): id is RemoteTtsProviderId => id !== 'builtin');

export interface TtsEndpointConfig {
  baseUrl?: string;
  apiKey?: string;
}

/** Provider settings, read and validated with every other SERVICE_* variable in `src/config.ts`. */
export interface TtsProvidersConfig {
  providers: Partial<Record<RemoteTtsProviderId, TtsEndpointConfig>>;
  /** Where reference WAVs of locally cloned voices live. */
  voiceDir: string;
  /** Address upstreams use to fetch clone samples (`/voice-uploads/{token}`). */
  publicBaseUrl: string;
}

export interface TtsRegistryDeps {
  fetch?: FetchLike;
  logger?: TtsLogger;
  /** Resolves cloned voice_ids to their reference (normally backed by the voice catalog). */
  voiceLookup?: VoiceLookup;
  /** Replaces the built-in provider (tests that must not start the engine). */
  builtin?: TtsProvider;
}

export interface TtsProviderListing {
  id: TtsProviderId;
  configured: boolean;
  reason?: string;
  cloning: boolean;
}

export interface TtsRegistry {
  get(id: TtsProviderId): TtsProvider;
  list(): TtsProviderListing[];
}

const FACTORIES: Record<RemoteTtsProviderId, (config: CloningProviderConfig) => TtsProvider> = {
  cloud_a: createCloudAProvider,
  cloud_b: createCloudBProvider,
  cloud_c: createCloudCProvider,
  cloud_d: createCloudDProvider,
  cloud_e: createCloudEProvider,
  cloud_f: createCloudFProvider,
  local_clone_a: createLocalCloneAProvider,
  local_clone_b: createLocalCloneBProvider,
  compat_http: createCompatHttpProvider,
};

export function createTtsRegistry(config: TtsProvidersConfig, deps: TtsRegistryDeps = {}): TtsRegistry {
  const providers = new Map<TtsProviderId, TtsProvider>();
  for (const id of REMOTE_TTS_PROVIDER_IDS) {
    const endpoint = config.providers[id] ?? {};
    providers.set(
      id,
      FACTORIES[id]({
        ...endpoint,
        voiceDir: config.voiceDir,
        fetch: deps.fetch,
        logger: deps.logger,
        voiceLookup: deps.voiceLookup,
      }),
    );
  }
  // The built-in engine starts workers, so it is only built when first asked for.
  const builtin = (): TtsProvider => {
    let provider = providers.get('builtin');
    if (!provider) {
      provider = deps.builtin ?? createBuiltinProvider();
      providers.set('builtin', provider);
    }
    return provider;
  };

  return {
    get(id) {
      if (id === 'builtin') return builtin();
      const provider = providers.get(id);
      if (!provider) throw new RangeError(`unknown TTS provider: ${String(id)}`);
      return provider;
    },
    list() {
      return TTS_PROVIDER_IDS.map((id) => {
        const provider = id === 'builtin' ? builtin() : providers.get(id)!;
        const status = provider.status();
        const listing: TtsProviderListing = {
          id,
          configured: status.configured,
          cloning: typeof provider.clone === 'function',
        };
        if (status.reason) listing.reason = status.reason;
        return listing;
      });
    },
  };
}
