/**
 * The remote probes behind `GET /health`: an OpenAI-compatible server's `GET {base}/models` (LLM, ASR)
 * and a plain reachability check of a TTS provider's base URL. Each answers with a `ProbeOutcome` whose
 * reason names what failed and what to check, and never carries the base URL, the API key or an
 * upstream's own error text (which can echo a key back).
 */
import { authHeaders, joinUrl, readBoundedText } from '../../actors/upstream/http.ts';
import type { ProbeOutcome } from './probe-cache.ts';

/**
 * A model list is a few KiB (OpenAI's own is ~10 KiB, an Ollama host with hundreds of tags ~100 KiB);
 * a larger answer is not a model list, so reading stops there.
 */
export const MAX_MODEL_LIST_BYTES = 1024 * 1024;
/** How many of the server's model ids a detail names when the configured model is missing. */
const LISTED_MODELS_SHOWN = 5;
/** undici's own transport error texts are a few words; anything longer is cut. */
const MAX_CAUSE_CHARS = 80;
/** Model ids are short names; a longer one is cut so a detail stays one readable line. */
const MAX_MODEL_ID_CHARS = 80;

export interface OpenAiProbeTarget {
  /** Includes the version segment (`…/v1`). */
  baseUrl: string;
  apiKey: string | null;
  model: string;
  /** The variables to point at in a reason: `SERVICE_LLM` or `SERVICE_ASR`. */
  envPrefix: 'SERVICE_LLM' | 'SERVICE_ASR';
}

/** `GET {base}/models` with the key as Bearer: 2xx → ok (detail: is the configured model listed), else error. */
export async function probeOpenAiModels(target: OpenAiProbeTarget, signal: AbortSignal): Promise<ProbeOutcome> {
  let response: Response;
  try {
    response = await fetch(joinUrl(target.baseUrl, 'models'), {
      headers: { accept: 'application/json', ...authHeaders(target.apiKey ?? undefined) },
      redirect: 'manual',
      signal,
    });
  } catch (error) {
    signal.throwIfAborted();
    return {
      status: 'error',
      reason: `cannot connect to the server (${transportErrorCode(error)}); check ${target.envPrefix}_BASE_URL`,
    };
  }
  if (!response.ok) {
    await response.body?.cancel().catch(() => undefined);
    return {
      status: 'error',
      reason: `GET /models answered HTTP ${response.status}; ${hintForStatus(response.status, target.envPrefix)}`,
    };
  }
  let ids: string[] | null;
  try {
    ids = modelIdsOf(await readBoundedText(response, 'health', MAX_MODEL_LIST_BYTES));
  } catch {
    signal.throwIfAborted();
    ids = null;
  }
  return { status: 'ok', detail: modelListDetail(target.model, ids) };
}

/**
 * A TTS server's base URL answers at all: any HTTP answer below 500 means it is up (its root is rarely a
 * route, so 404 is normal); 5xx, a refused connection or silence are errors. No key is sent: reaching the
 * server is all this checks.
 */
export async function probeReachable(baseUrl: string, envName: string, signal: AbortSignal): Promise<ProbeOutcome> {
  let response: Response;
  try {
    response = await fetch(baseUrl, { redirect: 'manual', signal });
  } catch (error) {
    signal.throwIfAborted();
    return { status: 'error', reason: `cannot connect to the server (${transportErrorCode(error)}); check ${envName}` };
  }
  await response.body?.cancel().catch(() => undefined);
  if (response.status >= 500) return { status: 'error', reason: `the server answered HTTP ${response.status}` };
  return { status: 'ok', detail: 'reachable' };
}

function hintForStatus(status: number, envPrefix: string): string {
  if (status === 401 || status === 403) return `check ${envPrefix}_API_KEY`;
  if (status === 404) return `check that ${envPrefix}_BASE_URL includes the API version segment (…/v1)`;
  if (status >= 500) return 'the server is failing';
  return `check ${envPrefix}_BASE_URL`;
}

/**
 * `ECONNREFUSED`, `ENOTFOUND`…: undici puts the system error code on the cause, and that is all that is
 * shown (a system error's message names hosts and addresses). A cause without a code is one of undici's
 * own short static texts (`bad port`: fetch refuses ports such as 6000 or 9).
 */
function transportErrorCode(error: unknown): string {
  const cause = error instanceof Error ? (error.cause as NodeJS.ErrnoException | undefined) : undefined;
  if (cause?.code) return cause.code;
  if (cause instanceof Error && cause.message) return cause.message.slice(0, MAX_CAUSE_CHARS);
  return error instanceof Error ? error.name : 'unknown error';
}

/** The ids of an OpenAI model list (`{data: [{id}]}`); null when the body is not one. */
export function modelIdsOf(bodyText: string): string[] | null {
  try {
    const parsed: unknown = JSON.parse(bodyText);
    const data = (parsed as { data?: unknown })?.data;
    if (!Array.isArray(data)) return null;
    return data.map((entry) => (entry as { id?: unknown })?.id).filter((id): id is string => typeof id === 'string');
  } catch {
    return null;
  }
}

function modelListDetail(model: string, ids: string[] | null): string {
  if (ids === null) return `the server answers; its model list could not be read, so model "${model}" was not checked`;
  if (ids.includes(model)) return `model "${model}" is listed`;
  const shown = ids
    .slice(0, LISTED_MODELS_SHOWN)
    .map((id) => (id.length > MAX_MODEL_ID_CHARS ? `${id.slice(0, MAX_MODEL_ID_CHARS)}…` : id))
    .join(', ');
  const more = ids.length > LISTED_MODELS_SHOWN ? `, … (${ids.length} in all)` : '';
  return `model "${model}" is not listed by the server (it lists: ${shown || 'nothing'}${more}); some servers answer with any model anyway`;
}
