/**
 * One round of tool calls of a chat turn: every call the model made in its answer runs at once (parallel calls), and
 * the round is over when all have an output. A call whose arguments are not a JSON object, or nest deeper than
 * `MAX_JSON_DEPTH`, never runs: its output tells the model so. Outputs keep the calls' order, as the `tool` messages that carry them must.
 */
import { MAX_JSON_DEPTH, nestsDeeperThan } from '../json-depth.ts';
import { isAbortError } from '../upstream/abort.ts';
import type { LlmToolCall, ToolRunner } from './types.ts';

/** A round still running after this says the session's filler sentence (`ToolRunner.fillerText`), once per turn. */
export const TOOL_FILLER_DELAY_MS = 1_000;

/** The output a tool call gives the model when it failed: the model reads it and can tell the user. */
export function toolErrorOutput(message: string): string {
  return JSON.stringify({ error: message });
}

/** The model's argument text as an object, or null when it is not one (empty text counts as no arguments). */
export function parseToolArguments(text: string): Record<string, unknown> | null {
  if (text.trim() === '') return {};
  try {
    const parsed: unknown = JSON.parse(text);
    return parsed && typeof parsed === 'object' && !Array.isArray(parsed) ? (parsed as Record<string, unknown>) : null;
  } catch {
    return null;
  }
}

/** Runs `calls` in parallel; resolves with one output per call, in order. Rejects only when `signal` aborts. */
export async function runToolRound(
  runner: ToolRunner,
  turnId: string,
  calls: readonly LlmToolCall[],
  signal: AbortSignal,
  onSlow: () => void,
): Promise<string[]> {
  const filler = setTimeout(onSlow, TOOL_FILLER_DELAY_MS);
  try {
    return await Promise.all(
      calls.map(async (call) => {
        const args = parseToolArguments(call.arguments);
        if (!args)
          return toolErrorOutput(`the arguments of ${call.name} were not a JSON object; the tool was not called`);
        // Checked here, where the model's arguments enter the session: past this they are serialised recursively
        // (SSE tool_call, the webhook's body, the transcript).
        if (nestsDeeperThan(args))
          return toolErrorOutput(
            `the arguments of ${call.name} nest deeper than ${MAX_JSON_DEPTH} levels; the tool was not called`,
          );
        try {
          return await runner.run({ turnId, callId: call.id, name: call.name, arguments: args }, signal);
        } catch (error) {
          if (signal.aborted || isAbortError(error, { includeTimeout: false })) throw error;
          return toolErrorOutput('the tool failed');
        }
      }),
    );
  } finally {
    clearTimeout(filler);
  }
}
