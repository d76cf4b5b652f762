/**
 * The set of TTS providers, one instance per id, built from configuration. Unconfigured providers
 * are still registered (so `list()` can say which variable to set); using one throws
 * `ProviderNotConfiguredError` instead of quietly falling back to another provider.
 */
import path from 'node:path';
import type { FetchLike, TtsLogger } from './http.ts';
import { createBuiltinProvider } from './providers/builtin.ts';
import { createCloudAProvider } from './providers/cloud_a.ts';
import { createCloudBProvider } from './providers/cloud_b.ts';
import { createCloudCProvider } from './providers/cloud_c.ts';
import { createCloudDProvider } from './providers/cloud_d.ts';
import { createCloudEProvider } from './providers/cloud_e.ts';
import { createCloudFProvider } from './providers/cloud_f.ts';
import { envVarName, type CloningProviderConfig, type VoiceLookup } from './providers/common.ts';
import { createCompatHttpProvider } from './providers/compat_http.ts';
import { createLocalCloneAProvider } from './providers/local_clone_a.ts';
import { createLocalCloneBProvider } from './providers/local_clone_b.ts';
import { TTS_PROVIDER_IDS, type TtsProvider, type TtsProviderId } from './types.ts';

export type RemoteTtsProviderId = Exclude<TtsProviderId, 'builtin'>;
export const REMOTE_TTS_PROVIDER_IDS = TTS_PROVIDER_IDS.filter((id): id is RemoteTtsProviderId => id !== 'builtin');

export interface TtsEndpointConfig {
  baseUrl?: string;
  apiKey?: string;
}

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
    providers.set(id, FACTORIES[id]({ ...endpoint, voiceDir: config.voiceDir, fetch: deps.fetch, logger: deps.logger, voiceLookup: deps.voiceLookup }));
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
        const listing: TtsProviderListing = { id, configured: status.configured, cloning: typeof provider.clone === 'function' };
        if (status.reason) listing.reason = status.reason;
        return listing;
      });
    },
  };
}

const read = (env: NodeJS.ProcessEnv, name: string): string | undefined => {
  const value = env[name]?.trim();
  return value ? value : undefined;
};

/**
 * Reads `SERVICE_TTS_<ID>_BASE_URL` / `SERVICE_TTS_<ID>_API_KEY` for every remote provider, plus
 * `SERVICE_TTS_VOICE_DIR` (default `<SERVICE_DATA_DIR>/voices`) and `SERVICE_PUBLIC_BASE_URL`.
 * cloud_b lives on cloud_a's platform (one account), so its key defaults to cloud_a's.
 */
export function ttsConfigFromEnv(env: NodeJS.ProcessEnv, cwd = process.cwd()): TtsProvidersConfig {
  const providers: TtsProvidersConfig['providers'] = {};
  for (const id of REMOTE_TTS_PROVIDER_IDS) {
    const endpoint: TtsEndpointConfig = {};
    const baseUrl = read(env, envVarName(id, 'BASE_URL'));
    const apiKey = read(env, envVarName(id, 'API_KEY'));
    if (baseUrl) endpoint.baseUrl = baseUrl;
    if (apiKey) endpoint.apiKey = apiKey;
    providers[id] = endpoint;
  }
  const cloudA = providers.cloud_a!;
  const cloudB = providers.cloud_b!;
  if (!cloudB.apiKey && cloudA.apiKey) cloudB.apiKey = cloudA.apiKey;
  if (!cloudB.baseUrl && cloudA.baseUrl) cloudB.baseUrl = cloudA.baseUrl;
  const dataDir = path.resolve(cwd, read(env, 'SERVICE_DATA_DIR') ?? './data');
  const voiceDir = path.resolve(cwd, read(env, 'SERVICE_TTS_VOICE_DIR') ?? path.join(dataDir, 'voices'));
  const publicBaseUrl = (read(env, 'SERVICE_PUBLIC_BASE_URL') ?? `http://127.0.0.1:${read(env, 'SERVICE_PORT') ?? '8000'}`).replace(/\/+$/, '');
  return { providers, voiceDir, publicBaseUrl };
}
