/**
 * Per-session conversation memory, bounded so prompts stay inside small local context windows and
 * the request size does not grow with session length. A reply cut short by an interrupt is kept
 * (the model should know what the user already heard) with `INTERRUPTED_MARKER` appended.
 */
import type { ChatMessage } from './types.ts';

/** Appended to an interrupted assistant reply; models read it as "the user stopped me here". */
export const INTERRUPTED_MARKER = ' [interrupted]';

export interface ConversationTurn {
  user: string;
  assistant: string;
  interrupted: boolean;
}

export interface ConversationHistoryOptions {
  /** Most recent user+assistant exchanges kept. */
  maxTurns: number;
  /** Upper bound on the characters of kept turns (system prompt and the new prompt not counted). */
  maxChars: number;
  systemPrompt?: string | null;
}

export class ConversationHistory {
  systemPrompt: string | null;
  private readonly maxTurns: number;
  private readonly maxChars: number;
  private kept: ConversationTurn[] = [];

  constructor(options: ConversationHistoryOptions) {
    if (!Number.isInteger(options.maxTurns) || options.maxTurns < 0)
      throw new RangeError('maxTurns must be an integer >= 0');
    if (!Number.isFinite(options.maxChars) || options.maxChars < 0) throw new RangeError('maxChars must be >= 0');
    this.maxTurns = options.maxTurns;
    this.maxChars = options.maxChars;
    this.systemPrompt = options.systemPrompt ?? null;
  }

  /** The messages to send for a new user prompt: system prompt, kept turns oldest first, the prompt. */
  messagesFor(prompt: string): ChatMessage[] {
    const messages: ChatMessage[] = [];
    if (this.systemPrompt) messages.push({ role: 'system', content: this.systemPrompt });
    for (const turn of this.kept) {
      messages.push({ role: 'user', content: turn.user });
      messages.push({ role: 'assistant', content: assistantContent(turn) });
    }
    messages.push({ role: 'user', content: prompt });
    return messages;
  }

  /**
   * Records a finished (or interrupted) exchange. An interrupted turn with no text yet still keeps
   * an assistant message, so roles keep alternating (several chat templates require it).
   */
  commit(user: string, assistant: string, options: { interrupted: boolean }): void {
    this.kept.push({ user, assistant, interrupted: options.interrupted });
    this.enforceBounds();
  }

  turns(): readonly ConversationTurn[] {
    return this.kept;
  }

  clear(): void {
    this.kept = [];
  }

  private enforceBounds(): void {
    while (this.kept.length > this.maxTurns) this.kept.shift();
    let chars = this.kept.reduce((sum, turn) => sum + turnChars(turn), 0);
    while (this.kept.length > 0 && chars > this.maxChars) chars -= turnChars(this.kept.shift()!);
  }
}

function assistantContent(turn: ConversationTurn): string {
  return turn.interrupted ? `${turn.assistant}${INTERRUPTED_MARKER}`.trimStart() : turn.assistant;
}

function turnChars(turn: ConversationTurn): number {
  return turn.user.length + assistantContent(turn).length;
}
