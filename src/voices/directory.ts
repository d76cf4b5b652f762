/**
 * What every TTS provider can speak, for a page's voice picker (`GET /tts/voices`): the built-in voice
 * table, each provider's own stock voices where its protocol has a list endpoint (fetched with a bounded
 * wait and cached briefly), and the cloned voices of the catalog. A provider whose list fails is reported
 * with `status: 'error'` and its reason; the others are unaffected.
 */
import { BUILTIN_DEFAULT_VOICE, BUILTIN_VOICE_TABLE } from '../../actors/tts/builtin/voices.ts';
import { BUILTIN_VOICE_DESCRIPTIONS, TTS_PROVIDER_SERVICES, builtinVoiceName } from './provider-names.ts';
import { isAbortError, untilAborted } from '../../actors/upstream/abort.ts';
import type { TtsRegistry } from '../../actors/tts/registry.ts';
import { isTtsProviderId, TTS_PROVIDER_IDS, type ListedVoice, type TtsProviderId } from '../../actors/tts/types.ts';
import { UpstreamError } from '../../actors/upstream/errors.ts';
import type { VoiceCatalogStore as VoiceCatalog } from './catalog.ts';

/** A voice picker waits on this: an upstream slower than 5 s is reported as an error instead of holding the page. */
export const VOICE_LIST_TIMEOUT_MS = 5_000;
/** Stock voice lists change rarely; a minute keeps page reloads off the upstream yet shows new voices soon. */
export const VOICE_LIST_CACHE_MS = 60_000;
/** A failing upstream is not asked again on every reload, but a recovered one shows up within seconds. */
export const VOICE_LIST_ERROR_CACHE_MS = 5_000;
/** Azure and Google list hundreds to a few thousand voices; the cap bounds memory and answer size whatever an upstream sends. */
export const MAX_LISTED_VOICES = 5_000;

export type VoiceSource = 'builtin' | 'provider' | 'clone';

export interface DirectoryVoice extends ListedVoice {
  source: VoiceSource;
  /** Clones only: catalog id (`DELETE /voices/{entry_id}`) and the model the clone was made for. */
  entry_id?: number;
  target_model?: string;
  /** Built-in voices only: the engine and character behind the spec's name (provider-names.ts). */
  description?: string;
}

export interface DirectoryProvider {
  id: TtsProviderId;
  /** The real service or engine behind the id. */
  service: string;
  configured: boolean;
  status: 'ok' | 'not_configured' | 'error';
  /** not_configured: what to set; error: why the voice list failed. */
  reason?: string;
  /** The provider new sessions and previews use when none is named. */
  is_default: boolean;
  /** The voice used when a request names none (for the default provider: the persona or configured default). */
  default_voice: string | null;
  /** Whether the service can enumerate this provider's stock voices (other names may still work). */
  lists_voices: boolean;
  can_clone: boolean;
  /** The provider listed more than MAX_LISTED_VOICES voices; the rest were dropped. */
  truncated: boolean;
  voices: DirectoryVoice[];
}

/** Which provider and voice apply when a request names neither (persona defaults, then configuration). */
export type DefaultVoiceSource = () => Promise<{ provider: TtsProviderId; voice: string | null }>;

export interface VoiceDirectoryDeps {
  registry: TtsRegistry;
  catalog: VoiceCatalog;
  defaults: DefaultVoiceSource;
  logger?: { warn(obj: object, msg?: string): void };
  now?: () => number;
}

type Listing = { ok: true; voices: ListedVoice[]; truncated: boolean } | { ok: false; reason: string };

const BUILTIN_VOICES: readonly DirectoryVoice[] = BUILTIN_VOICE_TABLE.map((entry) => ({
  id: entry.voice,
  name: builtinVoiceName(entry.voice),
  description: BUILTIN_VOICE_DESCRIPTIONS.get(entry.voice),
  language: entry.lang,
  gender: entry.gender,
  source: 'builtin' as const,
}));

const byLanguageThenName = (a: ListedVoice, b: ListedVoice): number =>
  (a.language ?? '\uffff').localeCompare(b.language ?? '\uffff') ||
  a.name.localeCompare(b.name) ||
  a.id.localeCompare(b.id);

export class VoiceDirectory {
  private readonly listings = new Map<TtsProviderId, { expiresAt: number; listing: Promise<Listing> }>();
  /** Aborts upstream list requests still running when the service shuts down. */
  private readonly closing = new AbortController();
  private readonly now: () => number;

  constructor(private readonly deps: VoiceDirectoryDeps) {
    this.now = deps.now ?? Date.now;
  }

  /** Every provider (or only `filter.provider`), in the order of the interface specification. */
  async list(filter: { provider?: TtsProviderId }, signal: AbortSignal): Promise<DirectoryProvider[]> {
    const ids = filter.provider ? [filter.provider] : [...TTS_PROVIDER_IDS];
    const [defaults, clones] = await Promise.all([
      this.deps.defaults(),
      this.deps.catalog.list(filter.provider ? { provider: filter.provider } : {}),
    ]);
    const entries = ids.map((id) =>
      this.describe(
        id,
        defaults,
        clones.filter((entry) => entry.provider === id),
      ),
    );
    return untilAborted(Promise.all(entries), signal);
  }

  close(): void {
    this.closing.abort(new DOMException('voice directory closed', 'AbortError'));
  }

  private async describe(
    id: TtsProviderId,
    defaults: Awaited<ReturnType<DefaultVoiceSource>>,
    clones: Array<{ id: number; voice_id: string; display_label: string; target_model: string }>,
  ): Promise<DirectoryProvider> {
    const cloneVoices: DirectoryVoice[] = clones.map((entry) => ({
      id: entry.voice_id,
      name: entry.display_label,
      language: null,
      gender: null,
      source: 'clone',
      entry_id: entry.id,
      target_model: entry.target_model,
    }));
    const isDefault = defaults.provider === id;
    if (id === 'builtin') {
      // Described from the voice table: asking the registry would start the built-in engine just to list names.
      return {
        id,
        service: TTS_PROVIDER_SERVICES[id],
        configured: true,
        status: 'ok',
        is_default: isDefault,
        default_voice: (isDefault ? defaults.voice : null) ?? BUILTIN_DEFAULT_VOICE,
        lists_voices: true,
        can_clone: false,
        truncated: false,
        voices: [...BUILTIN_VOICES, ...cloneVoices],
      };
    }
    const provider = this.deps.registry.get(id);
    const status = provider.status();
    const base = {
      id,
      service: TTS_PROVIDER_SERVICES[id],
      configured: status.configured,
      is_default: isDefault,
      default_voice: (isDefault ? defaults.voice : null) ?? provider.defaultVoice ?? null,
      lists_voices: typeof provider.listVoices === 'function',
      can_clone: typeof provider.clone === 'function',
      truncated: false,
    };
    if (!status.configured)
      return { ...base, status: 'not_configured', reason: status.reason ?? 'not configured', voices: cloneVoices };
    if (!provider.listVoices) return { ...base, status: 'ok', voices: cloneVoices };
    const listing = await this.listing(id, provider.listVoices.bind(provider));
    if (!listing.ok) return { ...base, status: 'error', reason: listing.reason, voices: cloneVoices };
    const stock: DirectoryVoice[] = listing.voices.map((voice) => ({ ...voice, source: 'provider' }));
    return { ...base, status: 'ok', truncated: listing.truncated, voices: [...stock, ...cloneVoices] };
  }

  /** The cached listing of one provider; concurrent callers share one upstream request. */
  private listing(id: TtsProviderId, listVoices: (signal: AbortSignal) => Promise<ListedVoice[]>): Promise<Listing> {
    const cached = this.listings.get(id);
    if (cached && cached.expiresAt > this.now()) return cached.listing;
    const entry = { expiresAt: Infinity, listing: this.fetchListing(id, listVoices) };
    this.listings.set(id, entry);
    void entry.listing.then((listing) => {
      entry.expiresAt = this.now() + (listing.ok ? VOICE_LIST_CACHE_MS : VOICE_LIST_ERROR_CACHE_MS);
    });
    return entry.listing;
  }

  /** Never rejects: every failure becomes a reason shown to the client (upstream text, never keys or paths). */
  private async fetchListing(
    id: TtsProviderId,
    listVoices: (signal: AbortSignal) => Promise<ListedVoice[]>,
  ): Promise<Listing> {
    const timeout = AbortSignal.timeout(VOICE_LIST_TIMEOUT_MS);
    try {
      const voices = await listVoices(AbortSignal.any([timeout, this.closing.signal]));
      const sorted = [...voices].sort(byLanguageThenName);
      return { ok: true, voices: sorted.slice(0, MAX_LISTED_VOICES), truncated: sorted.length > MAX_LISTED_VOICES };
    } catch (error) {
      let reason: string;
      if (timeout.aborted && isAbortError(error))
        reason = `${id}: the voice list did not arrive within ${VOICE_LIST_TIMEOUT_MS / 1000} s`;
      else if (error instanceof UpstreamError) reason = error.message;
      else reason = `${id}: the voice list failed (${(error as Error)?.name ?? 'error'})`;
      this.deps.logger?.warn({ provider: id, reason }, 'tts voice list failed');
      return { ok: false, reason };
    }
  }
}

/** The persona defaults (POST /customize) over the configured defaults, as `/tts/preview` resolves them. */
export function defaultVoiceSource(
  persona: () => Promise<{ ttsProvider?: string; ttsVoice?: string | null }>,
  configured: { provider: TtsProviderId; voice: string | null },
): DefaultVoiceSource {
  return async () => {
    const defaults = await persona();
    const provider = isTtsProviderId(defaults.ttsProvider) ? defaults.ttsProvider : configured.provider;
    const voice = defaults.ttsVoice !== undefined ? defaults.ttsVoice : configured.voice;
    return { provider, voice };
  };
}
