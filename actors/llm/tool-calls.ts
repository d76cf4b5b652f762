/**
 * Assembles the tool calls of one streamed chat-completions reply from their deltas
 * (`choices[0].delta.tool_calls: [{index, id?, function: {name?, arguments?}}]`): the id and name usually arrive
 * in a call's first fragment and its arguments in many, and parallel calls interleave by `index`. Bounded, because a
 * broken or hostile server could stream calls or argument text without end.
 */
import { randomUUID } from 'node:crypto';
import { MAX_JSON_DEPTH, nestsDeeperThan } from '../json-depth.ts';
import { UpstreamError } from '../upstream/errors.ts';
import type { LlmToolCall } from './types.ts';

/**
 * Calls the model may make in one round. Sessions offer at most 32 tools and a model asks for a handful in
 * parallel; more than this in one answer is a model looping on itself, and each call costs a request or a
 * client round trip.
 */
export const MAX_TOOL_CALLS_PER_ROUND = 16;
/**
 * Argument text of one call: a JSON object filling a function's parameters, typically tens of bytes and at most a
 * few KiB of text. 64 KiB bounds what is buffered, parsed and sent on per call.
 */
export const MAX_TOOL_ARGUMENT_BYTES = 64 * 1024;
/** Longest function name a session may define (`^[a-zA-Z0-9_-]{1,64}$`, OpenAI's own rule). */
const MAX_TOOL_NAME_CHARS = 64;

/**
 * Arguments a server sent as an object, as JSON text. One nested past `MAX_JSON_DEPTH` would make JSON.stringify's
 * recursion throw: it becomes a JSON string instead, which is no object, so its round tells the model (`runToolRound`).
 */
function objectArgumentsText(args: object): string {
  return JSON.stringify(nestsDeeperThan(args) ? `arguments nested deeper than ${MAX_JSON_DEPTH} levels` : args);
}

interface PartialCall {
  id: string;
  name: string;
  arguments: string;
}

export class ToolCallAssembler {
  private readonly calls = new Map<number, PartialCall>();

  constructor(private readonly label: string) {}

  /** Adds one chunk's `delta.tool_calls` (or a whole reply's `message.tool_calls`, each with its position as index). */
  push(fragments: unknown): void {
    if (!Array.isArray(fragments)) return;
    fragments.forEach((fragment: unknown, position) => {
      if (!fragment || typeof fragment !== 'object') return;
      const {
        index,
        id,
        function: fn,
      } = fragment as { index?: unknown; id?: unknown; function?: { name?: unknown; arguments?: unknown } };
      const key = typeof index === 'number' && Number.isInteger(index) ? index : position;
      let call = this.calls.get(key);
      if (!call) {
        if (this.calls.size >= MAX_TOOL_CALLS_PER_ROUND)
          throw new UpstreamError(
            `${this.label} upstream asked for more than ${MAX_TOOL_CALLS_PER_ROUND} tool calls at once`,
          );
        call = { id: '', name: '', arguments: '' };
        this.calls.set(key, call);
      }
      if (typeof id === 'string' && id && !call.id) call.id = id;
      if (typeof fn?.name === 'string') call.name += fn.name;
      if (call.name.length > MAX_TOOL_NAME_CHARS)
        throw new UpstreamError(`${this.label} upstream sent a tool name over ${MAX_TOOL_NAME_CHARS} characters`);
      // Some servers send the arguments as an object instead of JSON text.
      const args =
        typeof fn?.arguments === 'string'
          ? fn.arguments
          : fn?.arguments && typeof fn.arguments === 'object'
            ? objectArgumentsText(fn.arguments)
            : '';
      call.arguments += args;
      if (Buffer.byteLength(call.arguments, 'utf8') > MAX_TOOL_ARGUMENT_BYTES) {
        throw new UpstreamError(`${this.label} upstream sent tool arguments over ${MAX_TOOL_ARGUMENT_BYTES} bytes`);
      }
    });
  }

  get size(): number {
    return this.calls.size;
  }

  /** The complete calls in index order; a call without an id (some local servers) gets one, calls without a name are dropped. */
  finish(): LlmToolCall[] {
    return [...this.calls.entries()]
      .sort(([a], [b]) => a - b)
      .filter(([, call]) => call.name)
      .map(([, call]) => ({
        id: call.id || `call_${randomUUID().replaceAll('-', '')}`,
        name: call.name,
        arguments: call.arguments,
      }));
  }
}
