/**
 * A session's tools (function calling in chat turns, `docs/integration.md`, "Tool calling"): the definitions a
 * client gave at creation or through customize, checked once here, and the runner the llm actor calls through its
 * port (`ToolRunner`, `actors/llm/types.ts`). A tool with a `webhook` is a signed HTTP POST to that URL; one without
 * is a client tool: SSE `tool_call`, answered on `POST /sessions/{id}/tool_results`. Every call is published on the
 * bus as the spec event `tool_call` and, once it settles, as `tool.result` (the transcript follows both).
 */
import type { Logger } from 'pino';
import { MAX_JSON_DEPTH, nestsDeeperThan } from '../../actors/json-depth.ts';
import { abortError } from '../../actors/upstream/abort.ts';
import { UpstreamError } from '../../actors/upstream/errors.ts';
import { fetchUpstream, readBoundedText } from '../../actors/upstream/http.ts';
import { newWebhookId, type WebhookSigner } from '../../actors/upstream/webhook-signing.ts';
import { toolErrorOutput } from '../../actors/llm/tool-round.ts';
import type { LlmToolDefinition, ToolInvocation, ToolRunner } from '../../actors/llm/types.ts';
import { InvalidInput, ToolCallClosed, ToolCallNotFound } from '../domain-errors.ts';
import { quoteClientValue } from '../errors.ts';
import { errorForLog } from '../logger.ts';
import { callbackUrlRefusal } from '../webhooks/allowed-hosts.ts';
import type { SessionBus } from './session-bus.ts';

/**
 * Tools one session may define. Every definition is sent to the model on every request of a chat turn, so they cost
 * prompt tokens and small local models choose badly among many; 32 is well past what an avatar needs (OpenAI itself
 * advises fewer than 20).
 */
export const MAX_TOOLS_PER_SESSION = 32;
/** One definition as JSON: a name, a description and a parameter schema fit in a few KiB; 16 KiB bounds the prompt. */
export const MAX_TOOL_DEFINITION_BYTES = 16 * 1024;
/** OpenAI's own rule for function names (the model must be able to name them back). */
export const TOOL_NAME_PATTERN = '^[a-zA-Z0-9_-]{1,64}$';
const TOOL_NAME = new RegExp(TOOL_NAME_PATTERN, 'u');
/**
 * How long a webhook tool has to answer (the whole response, not only its headers). The user is waiting in silence
 * (or with the filler sentence) meanwhile; a lookup that takes longer is better reported to the model as failed.
 */
export const TOOL_WEBHOOK_TIMEOUT_MS = 10_000;
/**
 * How long a client tool's answer is waited for (`POST /sessions/{id}/tool_results`). A client may ask its user
 * (confirm a booking) or call its own backend, so this is longer than a webhook's; later answers get 409.
 */
export const CLIENT_TOOL_TIMEOUT_MS = 30_000;
/**
 * One tool output (a webhook's response body, a client's `output`): it goes into the next request to the model,
 * whose context is a few thousand tokens on small local models. 64 KiB bounds what is buffered and sent.
 */
export const MAX_TOOL_OUTPUT_BYTES = 64 * 1024;
/**
 * Closed client calls remembered so a late `tool_results` answers 409 rather than 404. A session makes at most
 * 16 calls per round and 4 rounds per turn; the last 256 cover far more than a deadline's worth of calls.
 */
const MAX_CLOSED_CALLS_REMEMBERED = 256;

/** A tool as a session holds it: the function the model sees and, for a webhook tool, where calls go. */
export interface SessionToolDefinition extends LlmToolDefinition {
  webhook?: string;
}

/** Where webhook tools may point and how their requests are signed (service configuration). */
export interface ToolWebhookPolicy {
  /** SERVICE_WEBHOOK_ALLOWED_HOSTS: host names a webhook tool may call; empty: no webhook tools. */
  allowedHosts: readonly string[];
  /** SERVICE_WEBHOOK_SECRET's signer; null: requests go unsigned. */
  signer: WebhookSigner | null;
}

export interface SessionToolsOptions {
  sessionId: string;
  bus: SessionBus;
  logger: Logger;
  policy: ToolWebhookPolicy;
  /** SERVICE_TOOL_FILLER_TEXT: said once per turn while tools run longer than ~1 s; null: silence. */
  fillerText: string | null;
  definitions?: readonly SessionToolDefinition[];
  fetch?: typeof fetch;
  /** A client call's deadline; default `CLIENT_TOOL_TIMEOUT_MS`. */
  clientDeadlineMs?: number;
}

interface PendingClientCall {
  answer(output: string): void;
}

/**
 * Checks tool definitions as a client sent them (the route's schema checked their shape): names, duplicates, the
 * parameters schema, sizes, webhook URLs. Throws `InvalidInput` (400) naming the first problem.
 */
export function checkToolDefinitions(
  tools: readonly SessionToolDefinition[],
  policy: Pick<ToolWebhookPolicy, 'allowedHosts'>,
): SessionToolDefinition[] {
  if (tools.length > MAX_TOOLS_PER_SESSION)
    throw new InvalidInput(`tools: at most ${MAX_TOOLS_PER_SESSION} tools per session (got ${tools.length})`);
  const names = new Set<string>();
  return tools.map((tool, index) => {
    const where = `tools[${index}]`;
    if (tool?.type !== 'function' || !tool.function || typeof tool.function !== 'object')
      throw new InvalidInput(`${where}: must be {type: "function", function: {...}}`);
    const { name, parameters } = tool.function;
    if (typeof name !== 'string' || !TOOL_NAME.test(name))
      throw new InvalidInput(`${where}.function.name must match ${TOOL_NAME_PATTERN}`);
    if (names.has(name)) throw new InvalidInput(`${where}.function.name "${name}" is defined twice`);
    names.add(name);
    if (!parameters || typeof parameters !== 'object' || Array.isArray(parameters) || parameters.type !== 'object') {
      throw new InvalidInput(`${where}.function.parameters must be a JSON Schema object ({"type": "object", ...})`);
    }
    // Before anything walks the definition recursively (the size below, the requests to the model).
    if (nestsDeeperThan(tool))
      throw new InvalidInput(`${where}: the definition nests deeper than ${MAX_JSON_DEPTH} levels`);
    const bytes = Buffer.byteLength(JSON.stringify(tool), 'utf8');
    if (bytes > MAX_TOOL_DEFINITION_BYTES)
      throw new InvalidInput(`${where}: the definition is ${bytes} bytes, over ${MAX_TOOL_DEFINITION_BYTES}`);
    if (tool.webhook !== undefined) checkWebhookUrl(tool.webhook, where, policy.allowedHosts);
    return tool;
  });
}

function checkWebhookUrl(raw: string, where: string, allowedHosts: readonly string[]): void {
  const refusal = callbackUrlRefusal(raw, allowedHosts);
  if (refusal !== null) throw new InvalidInput(`${where}.webhook ${refusal}`);
}

/** The session's tool runner; the llm actor sees it as its `ToolRunner` port. */
export class SessionTools implements ToolRunner {
  readonly fillerText: string | null;
  private tools: readonly SessionToolDefinition[];
  private readonly pending = new Map<string, PendingClientCall>();
  /** Client calls no longer waiting, and why, oldest first (bounded by `MAX_CLOSED_CALLS_REMEMBERED`). */
  private readonly closed = new Map<string, string>();
  private readonly fetchImpl: typeof fetch;
  private readonly clientDeadlineMs: number;

  constructor(private readonly options: SessionToolsOptions) {
    this.fillerText = options.fillerText;
    this.clientDeadlineMs = options.clientDeadlineMs ?? CLIENT_TOOL_TIMEOUT_MS;
    this.tools = checkToolDefinitions(options.definitions ?? [], options.policy);
    this.fetchImpl = options.fetch ?? fetch;
  }

  /** Checks definitions a client sent (`InvalidInput`, 400) without applying them. */
  check(tools: readonly SessionToolDefinition[]): SessionToolDefinition[] {
    return checkToolDefinitions(tools, this.options.policy);
  }

  /** Replaces the session's tools (checked by `check`); turns started from now on offer them. */
  replace(tools: readonly SessionToolDefinition[]): void {
    this.tools = tools;
  }

  /** The tools as the client defined them (webhook URLs included). */
  get list(): readonly SessionToolDefinition[] {
    return this.tools;
  }

  definitions(): LlmToolDefinition[] {
    return this.tools.map((tool) => ({ type: 'function', function: tool.function }));
  }

  async run(call: ToolInvocation, signal: AbortSignal): Promise<string> {
    if (signal.aborted) throw abortError(signal);
    const tool = this.tools.find((candidate) => candidate.function.name === call.name);
    if (!tool) return toolErrorOutput(`there is no tool named ${call.name}`);
    const { bus } = this.options;
    const announce = () =>
      bus.publish('tool_call', {
        turn_id: call.turnId,
        call_id: call.callId,
        name: call.name,
        arguments: call.arguments,
      });
    let ok = false;
    try {
      let outcome: { ok: boolean; output: string };
      if (tool.webhook) {
        announce();
        outcome = await this.callWebhook(tool.webhook, call, signal);
      } else {
        outcome = await this.callClient(call, signal, announce);
      }
      ok = outcome.ok;
      return outcome.output;
    } finally {
      bus.emit('tool.result', { turnId: call.turnId, callId: call.callId, name: call.name, ok });
    }
  }

  /**
   * A client's answer to a client tool call (`POST /sessions/{id}/tool_results`): `ToolCallNotFound` (404) for a call
   * the session never made, `ToolCallClosed` (409) for one past its deadline, answered or cancelled.
   */
  answer(callId: string, output: unknown): void {
    const call = this.pending.get(callId);
    if (!call) {
      const why = this.closed.get(callId);
      if (why) throw new ToolCallClosed(`tool call ${quoteClientValue(callId)} is closed: ${why}`);
      throw new ToolCallNotFound();
    }
    if (nestsDeeperThan(output)) throw new InvalidInput(`output nests deeper than ${MAX_JSON_DEPTH} levels`);
    const text = JSON.stringify(output ?? null);
    const bytes = Buffer.byteLength(text, 'utf8');
    if (bytes > MAX_TOOL_OUTPUT_BYTES)
      throw new InvalidInput(`output is ${bytes} bytes as JSON, over ${MAX_TOOL_OUTPUT_BYTES}`);
    call.answer(text);
  }

  /** Waits for the client's answer; `announce` publishes the call once an answer can be taken (a listener may answer at once). */
  private callClient(
    call: ToolInvocation,
    signal: AbortSignal,
    announce: () => void,
  ): Promise<{ ok: boolean; output: string }> {
    const { callId } = call;
    // A model that reuses an id while the first call still waits: the first one gives way.
    if (this.pending.has(callId)) this.closeCall(callId, 'replaced by a newer call with the same id');
    return new Promise((resolve, reject) => {
      const finish = (why: string) => {
        clearTimeout(timer);
        signal.removeEventListener('abort', onAbort);
        this.closeCall(callId, why);
      };
      const timer = setTimeout(() => {
        finish(`its ${this.clientDeadlineMs} ms deadline passed`);
        resolve({ ok: false, output: toolErrorOutput(`the client did not answer within ${this.clientDeadlineMs} ms`) });
      }, this.clientDeadlineMs);
      const onAbort = () => {
        finish('its turn was interrupted');
        reject(abortError(signal));
      };
      signal.addEventListener('abort', onAbort, { once: true });
      this.pending.set(callId, {
        answer: (output) => {
          finish('it was answered already');
          resolve({ ok: true, output });
        },
      });
      announce();
    });
  }

  private closeCall(callId: string, why: string): void {
    this.pending.delete(callId);
    this.closed.delete(callId);
    this.closed.set(callId, why);
    while (this.closed.size > MAX_CLOSED_CALLS_REMEMBERED) this.closed.delete(this.closed.keys().next().value!);
  }

  private async callWebhook(
    url: string,
    call: ToolInvocation,
    signal: AbortSignal,
  ): Promise<{ ok: boolean; output: string }> {
    const { sessionId, policy, logger } = this.options;
    const body = JSON.stringify({
      session_id: sessionId,
      turn_id: call.turnId,
      call_id: call.callId,
      name: call.name,
      arguments: call.arguments,
    });
    const headers: Record<string, string> = {
      'content-type': 'application/json',
      ...(policy.signer?.headers(newWebhookId(), body) ?? {}),
    };
    const deadline = AbortSignal.timeout(TOOL_WEBHOOK_TIMEOUT_MS);
    const label = `tool ${call.name}`;
    try {
      const response = await fetchUpstream(this.fetchImpl, url, {
        method: 'POST',
        headers,
        body,
        // A redirect could lead anywhere, past SERVICE_WEBHOOK_ALLOWED_HOSTS: it counts as a failure.
        redirect: 'manual',
        signal: AbortSignal.any([signal, deadline]),
        provider: label,
        headersTimeoutMs: TOOL_WEBHOOK_TIMEOUT_MS,
      });
      const text = await readBoundedText(response, label, MAX_TOOL_OUTPUT_BYTES);
      let parsed: unknown;
      try {
        parsed = JSON.parse(text);
      } catch {
        return { ok: false, output: toolErrorOutput('the tool answered with something that is not JSON') };
      }
      if (nestsDeeperThan(parsed))
        return {
          ok: false,
          output: toolErrorOutput(`the tool answered with JSON nested deeper than ${MAX_JSON_DEPTH} levels`),
        };
      return { ok: true, output: JSON.stringify(parsed) };
    } catch (error) {
      if (signal.aborted) throw abortError(signal);
      const timedOut = deadline.aborted;
      // The URL stays out of the log: it may carry a token in its query.
      logger.warn({ tool: call.name, callId: call.callId, timedOut, err: errorForLog(error) }, 'webhook tool failed');
      return {
        ok: false,
        output: toolErrorOutput(
          timedOut ? `the tool did not answer within ${TOOL_WEBHOOK_TIMEOUT_MS / 1000} s` : failureOf(error),
        ),
      };
    }
  }
}

/** What the model is told of a failed webhook: its HTTP status when it answered one, never the URL or the server's text. */
function failureOf(error: unknown): string {
  const status = error instanceof UpstreamError ? error.upstreamStatus : undefined;
  return status ? `the tool failed (HTTP ${status})` : 'the tool failed';
}
