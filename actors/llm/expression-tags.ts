/**
 * Expression tags in a language model's reply (`[smile]`, `[surprise 0.5]`): taken out of the text before
 * it reaches TTS, captions, SSE `llm` and the transcript, and handed on as expression cues. The model streams
 * its reply in arbitrary pieces, so a tag can arrive split (`[sm` + `ile]`); the filter decides character by
 * character and holds back at most `MAX_TAG_CHARS` after a `[`, so its output is the same for any split.
 * Bracketed text that is not a tag (`[1]`, `[see above]`) passes through unchanged.
 */
import { isExpressionName, type ExpressionName } from '../expression.ts';

/**
 * Longest text held back after a `[` while deciding whether it opens a tag: the longest name with an
 * intensity (`[surprise 0.75]`) fits with room; past it the text is released as it is.
 */
export const MAX_TAG_CHARS = 24;

/** The default system-prompt sentence that teaches the model the tags (docs/api.md, `llm_system_prompt`). */
export const EXPRESSION_TAGS_PROMPT =
  'You can show a facial expression by writing one of the tags [smile], [concern], [surprise], [emphasis] or [neutral] ' +
  'just before the words it goes with, optionally with an intensity from 0 to 1 such as [smile 0.5]; the tags are never spoken.';

export interface ExpressionTag {
  name: ExpressionName;
  /** 0..1; 1 when the tag names none. */
  intensity: number;
}

/** Text and tags in the order the model wrote them. */
export type TagFilterPiece = { text: string } | { tag: ExpressionTag };

const TAG_BODY = /^\s*([a-z]+)(?:\s*[:\s]\s*(0(?:\.\d+)?|1(?:\.0*)?|\.\d+))?\s*$/iu;
const TAG_CHAR = /[a-z0-9.:\s]/iu;

/** The tag a bracketed body names, or null when it is not one (the text then stays). */
export function parseTag(body: string): ExpressionTag | null {
  const match = TAG_BODY.exec(body);
  if (!match) return null;
  const name = match[1].toLowerCase();
  if (!isExpressionName(name)) return null;
  return { name, intensity: match[2] === undefined ? 1 : Number(match[2]) };
}

export class ExpressionTagFilter {
  private held = '';
  private skipSpace = false;
  private lastOut = '';
  private out: TagFilterPiece[] = [];

  /** Feeds one streamed delta; returns what can be released now. */
  push(delta: string): TagFilterPiece[] {
    for (const char of delta) this.feed(char);
    return this.take();
  }

  /** End of the reply: whatever is held back was not a tag and is released as text. */
  flush(): TagFilterPiece[] {
    while (this.held) this.releaseHeld();
    return this.take();
  }

  private feed(char: string): void {
    if (this.held) {
      this.held += char;
      if (char === ']') {
        const tag = parseTag(this.held.slice(1, -1));
        if (tag) {
          this.held = '';
          this.out.push({ tag });
          // "Hello [smile] there" reads "Hello there": the space after a tag goes when one is already there.
          this.skipSpace = this.lastOut === '' || /\s/u.test(this.lastOut);
        } else this.releaseHeld();
      } else if (!TAG_CHAR.test(char) || this.held.length > MAX_TAG_CHARS) this.releaseHeld();
      return;
    }
    if (char === '[') {
      this.held = char;
      return;
    }
    if (this.skipSpace && /\s/u.test(char)) return;
    this.emit(char);
  }

  /** Not a tag: the `[` is text, and what followed it is read again (it may open a tag itself). */
  private releaseHeld(): void {
    const rest = this.held.slice(1);
    this.held = '';
    this.emit('[');
    for (const char of rest) this.feed(char);
  }

  private emit(text: string): void {
    this.skipSpace = false;
    this.lastOut = text;
    const last = this.out[this.out.length - 1];
    if (last && 'text' in last) last.text += text;
    else this.out.push({ text });
  }

  private take(): TagFilterPiece[] {
    const pieces = this.out;
    this.out = [];
    return pieces;
  }
}

/** A whole reply at once: the same as streaming it in any pieces. */
export function stripExpressionTags(reply: string): { text: string; tags: ExpressionTag[] } {
  const filter = new ExpressionTagFilter();
  const pieces = [...filter.push(reply), ...filter.flush()];
  return {
    text: pieces.map((piece) => ('text' in piece ? piece.text : '')).join(''),
    tags: pieces.flatMap((piece) => ('tag' in piece ? [piece.tag] : [])),
  };
}
