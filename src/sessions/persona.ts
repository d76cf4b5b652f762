import {
  isTtsProviderId,
  TTS_PROVIDER_IDS,
  type TtsProvider,
  type TtsProviderId,
  type TtsSelection,
} from '../../actors/tts/types.ts';
import type { ServiceConfig } from '../config.ts';
import { InvalidSelection } from '../domain-errors.ts';
import { quoteClientValue } from '../errors.ts';
import type { PersonaDefaults } from '../store/defaults.ts';
import type { StoredSession } from '../store/sessions.ts';

/**
 * The one persona/voice rule. Every path that picks what speaks — session creation, speak, chat,
 * `/tts/preview`, customize (session and service-wide), the reference clone, offline jobs — resolves its
 * provider, voice and model here, so they all agree and all refuse the same way (`InvalidSelection`: 400 `{detail}`).
 *
 * - A voice and a model belong to their provider. Naming another provider without a voice gives that
 *   provider's default voice (and its default model); the base's voice never crosses to another provider.
 * - A voice without a provider uses the base's provider.
 * - Voice null is "the provider's default voice"; a provider without stock voices (cloud_d) refuses it,
 *   which is the 400 telling the client to name one.
 * - An unknown provider, one not configured, or a voice the provider rejects is a 400.
 */

/** What a request asks to change. Absent (undefined) keeps the base's choice; voice or model null asks for the provider's default. */
export interface TtsOverrides {
  provider?: string;
  voice?: string | null;
  model?: string | null;
}

/** A persona a selection starts from (a session's, the service's defaults); its provider is checked when used. */
export interface PersonaBase {
  provider: string;
  voice: string | null;
  model: string | null;
}

export type TtsLookup = (id: TtsProviderId) => TtsProvider;

/** The selection for `overrides` on `base` and the checks that make it usable: what every path calls. */
export function resolveTtsSelection(
  providers: TtsLookup,
  base: PersonaBase,
  overrides: TtsOverrides = {},
): TtsSelection {
  const selection = selectTts(base, overrides);
  const providerId = selection.provider;
  const provider = providers(providerId);
  const status = provider.status();
  if (!status.configured)
    throw new InvalidSelection(`tts_provider "${providerId}" is not configured: ${status.reason ?? ''}`);
  try {
    provider.validateVoice?.(selection.voice);
  } catch (error) {
    const reason = (error as Error).message;
    throw new InvalidSelection(
      selection.voice === null ? `tts_provider "${providerId}" has no default voice; pass a voice (${reason})` : reason,
    );
  }
  return selection;
}

/**
 * The rule alone, for what will not be synthesised now (an offline job of audio segments, the target model of
 * a clone): only an unknown provider id is refused.
 */
export function selectTts(base: PersonaBase, overrides: TtsOverrides = {}): TtsSelection {
  const providerId = overrides.provider ?? base.provider;
  if (!isTtsProviderId(providerId))
    throw new InvalidSelection(
      `tts_provider ${quoteClientValue(providerId)} is unknown; use one of ${TTS_PROVIDER_IDS.join(', ')}`,
    );
  const sameProvider = providerId === base.provider;
  return {
    provider: providerId,
    voice: overrides.voice !== undefined ? overrides.voice : sameProvider ? base.voice : null,
    model: overrides.model !== undefined ? overrides.model : sameProvider ? base.model : null,
  };
}

/**
 * Overrides of one request (speak, chat, preview, offline job): null there means "not given", as the
 * specification writes optional fields ("string or null").
 */
export function requestOverrides(body: {
  tts_provider?: string | null;
  voice?: string | null;
  tts_model?: string | null;
}): TtsOverrides {
  return {
    ...(body.tts_provider != null ? { provider: body.tts_provider } : {}),
    ...(body.voice != null ? { voice: body.voice } : {}),
    ...(body.tts_model != null ? { model: body.tts_model } : {}),
  };
}

/** A session's persona as the base of its turns' selections. */
export function sessionPersona(stored: Pick<StoredSession, 'tts_provider' | 'tts_voice' | 'tts_model'>): PersonaBase {
  return { provider: stored.tts_provider, voice: stored.tts_voice, model: stored.tts_model ?? null };
}

/**
 * The service-wide persona new sessions and previews start from: the customized defaults (`POST /customize`)
 * once set, which always carry their provider, else SERVICE_TTS_DEFAULT_PROVIDER / SERVICE_TTS_DEFAULT_VOICE.
 */
export function defaultsPersona(
  config: Pick<ServiceConfig, 'ttsDefaultProvider' | 'ttsDefaultVoice'>,
  defaults: PersonaDefaults,
): PersonaBase {
  if (defaults.ttsProvider !== undefined) {
    return { provider: defaults.ttsProvider, voice: defaults.ttsVoice ?? null, model: defaults.ttsModel ?? null };
  }
  return { provider: config.ttsDefaultProvider, voice: config.ttsDefaultVoice, model: null };
}
