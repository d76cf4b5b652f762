/**
 * Alibaba Cloud Model Studio (DashScope) pieces shared by `cloud_a` (Qwen-TTS) and `cloud_b`
 * (CosyVoice): the platform base URL, bearer auth, the voice customization endpoint both clone
 * through, and error texts from DashScope's `{code, message}` bodies.
 */
import { fetchUpstream, readJson, trimTrailingSlash, type FetchLike } from '../../upstream/http.ts';
import type { TtsProviderId } from '../types.ts';
import { UpstreamError } from '../../upstream/errors.ts';

export const DASHSCOPE_DEFAULT_BASE_URL = 'https://dashscope.aliyuncs.com';
export const CUSTOMIZATION_PATH = '/api/v1/services/audio/tts/customization';

export function dashscopeBase(baseUrl: string | undefined): string {
  return trimTrailingSlash(baseUrl || DASHSCOPE_DEFAULT_BASE_URL);
}

interface CustomizationAnswer {
  output?: { voice?: string; voice_id?: string };
  code?: string;
  message?: string;
}

/** Calls the voice customization API and returns the new voice name the platform assigned. */
export async function createDashscopeVoice(options: {
  fetchImpl: FetchLike;
  baseUrl: string;
  apiKey: string;
  body: unknown;
  signal: AbortSignal;
  provider: TtsProviderId;
}): Promise<string> {
  const response = await fetchUpstream(options.fetchImpl, `${options.baseUrl}${CUSTOMIZATION_PATH}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${options.apiKey}`, 'content-type': 'application/json' },
    body: JSON.stringify(options.body),
    signal: options.signal,
    provider: options.provider,
  });
  const answer = await readJson<CustomizationAnswer>(response, options.signal, options.provider);
  const voice = answer.output?.voice ?? answer.output?.voice_id;
  if (!voice) {
    const why = answer.message ? `${answer.code ?? 'error'}: ${answer.message}` : JSON.stringify(answer).slice(0, 300);
    throw new UpstreamError(`${options.provider}: voice enrollment returned no voice: ${why}`);
  }
  return voice;
}
