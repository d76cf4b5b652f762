/**
 * Sentence splitting for TTS: synthesis runs per sentence so the first one can play while later ones
 * are still being produced. `SentenceStream` consumes LLM token deltas; `splitSentences` is the same
 * algorithm fed with the whole text, so both always agree.
 *
 * Every decision depends only on text already seen; when it needs more (a "." at the end of the
 * buffer could be "3.5"), the stream waits instead of guessing, which is what keeps streaming output
 * identical for any chunking of the input.
 */

/** Long sentences are cut so one synthesis call (and the wait for its first audio) stays short. */
export const MAX_SENTENCE_CHARS = 200;
/** Fragments shorter than this ("1.", "Hi!", "Ok.") are merged with the following sentence. */
export const MIN_SENTENCE_CHARS = 8;

const WESTERN_TERMINATORS = '.!?…';
const CJK_TERMINATORS = '。！？';
const CLOSERS = `"'”’)]}»」』）】`;
/** Soft break points used when a sentence has to be cut for length. */
const CLAUSE_BREAKS = ',;:，、；：';
const CJK_CLAUSE_BREAKS = '，、；：';

/** Words that end with "." without ending the sentence ("Dr. Smith"). */
const TITLE_ABBREVIATIONS = new Set([
  'mr',
  'mrs',
  'ms',
  'dr',
  'prof',
  'sr',
  'jr',
  'st',
  'mt',
  'vs',
  'no',
  'nos',
  'fig',
  'figs',
  'vol',
  'ca',
  'cf',
  'e.g',
  'i.e',
  'gen',
  'col',
  'capt',
  'lt',
  'sgt',
  'rev',
  'hon',
  'gov',
  'sen',
  'rep',
  'dept',
  'univ',
  'ave',
  'blvd',
  'rd',
  'jan',
  'feb',
  'mar',
  'apr',
  'jun',
  'jul',
  'aug',
  'sep',
  'sept',
  'oct',
  'nov',
  'dec',
  'approx',
  'est',
  'min',
  'max',
  'p',
  'pp',
  'op',
  'ed',
  'eds',
  'bzw',
  'usw',
  'z.b',
  'd.h',
  'u.a',
  'sra',
  'mme',
  'mlle',
  'nr',
  'u.s',
  'u.k',
]);
/** Abbreviations that may or may not end the sentence: decided by the case of the next word. */
const AMBIGUOUS_ABBREVIATIONS = new Set(['etc', 'inc', 'ltd', 'co', 'corp', 'al']);

type Decision = { kind: 'split'; end: number } | { kind: 'no' } | { kind: 'need-more' };

const isWhitespace = (char: string): boolean => /\s/u.test(char);
const isLowercaseLetter = (char: string): boolean => /\p{Ll}/u.test(char);

function endOfRun(text: string, from: number, chars: string): number {
  let index = from;
  while (index < text.length && chars.includes(text[index])) index++;
  return index;
}

function firstNonWhitespace(text: string, from: number): number {
  let index = from;
  while (index < text.length && isWhitespace(text[index])) index++;
  return index;
}

/** The letters-and-dots word ending right before `index`, limited to the buffer. */
function wordBefore(text: string, index: number, lowerBound: number): string {
  let begin = index;
  while (begin > lowerBound && /[\p{L}\p{N}.]/u.test(text[begin - 1])) begin--;
  return text.slice(begin, index);
}

/** Decides whether the terminator run starting at `index` ends a sentence. */
function decideAtTerminator(text: string, index: number, lowerBound: number, atEnd: boolean): Decision {
  const runEnd = endOfRun(text, index, WESTERN_TERMINATORS + CJK_TERMINATORS);
  const end = endOfRun(text, runEnd, CLOSERS);
  const run = text.slice(index, runEnd);
  if ([...run].some((char) => CJK_TERMINATORS.includes(char))) {
    // CJK text has no spaces between sentences; closers may still follow.
    return end < text.length || atEnd ? { kind: 'split', end } : { kind: 'need-more' };
  }
  if (end >= text.length) return atEnd ? { kind: 'split', end } : { kind: 'need-more' };
  // "3.5", "e.g.x", "example.com", "Hi!you": no whitespace after the run means no boundary.
  if (!isWhitespace(text[end])) return { kind: 'no' };
  if (/[!?]/.test(run)) return { kind: 'split', end };

  const isEllipsis = run.includes('…') || run.length > 1;
  const word = wordBefore(text, index, lowerBound).toLowerCase();
  // "J. K. Rowling"; the pronoun "I" ends sentences too often to count as an initial.
  const isInitial = /^\p{Lu}$/u.test(text[index - 1]) && word.length === 1 && word !== 'i';
  if (!isEllipsis && (TITLE_ABBREVIATIONS.has(word) || isInitial)) return { kind: 'no' };
  // Dotted acronyms ("a.m.", "p.m.") end a sentence only when a capitalised word follows.
  const isAmbiguous = AMBIGUOUS_ABBREVIATIONS.has(word) || word.includes('.');
  if (!isEllipsis && !isAmbiguous) return { kind: 'split', end };

  // "and so... we left" continues; "Wait... What?" and "etc. The" start a new sentence.
  const next = firstNonWhitespace(text, end);
  if (next >= text.length) return atEnd ? { kind: 'split', end } : { kind: 'need-more' };
  return isLowercaseLetter(text[next]) ? { kind: 'no' } : { kind: 'split', end };
}

/** Where to cut a sentence that has no boundary within MAX_SENTENCE_CHARS. */
function forcedCut(text: string, start: number): number {
  const limit = start + MAX_SENTENCE_CHARS;
  const earliest = start + MIN_SENTENCE_CHARS;
  for (let index = limit - 1; index >= earliest; index--) {
    const char = text[index];
    if (CJK_CLAUSE_BREAKS.includes(char)) return index + 1;
    if (CLAUSE_BREAKS.includes(char) && isWhitespace(text[index + 1] ?? '')) return index + 1;
  }
  for (let index = limit; index > earliest; index--) {
    if (isWhitespace(text[index])) return index;
  }
  return limit;
}

interface Cut {
  /** End (exclusive) of the fragment that starts at the stream's sentence start. */
  end: number;
  /** True when the cut came from a length limit rather than punctuation. */
  forced: boolean;
}

/** The next decidable fragment end at or after `scanFrom`, or null when more text is needed. */
function nextCut(text: string, start: number, scanFrom: number, atEnd: boolean): Cut | 'need-more' | null {
  const windowEnd = Math.min(text.length, start + MAX_SENTENCE_CHARS);
  for (let index = scanFrom; index < windowEnd; index++) {
    const char = text[index];
    if (char === '\n') return { end: index + 1, forced: false };
    if (!WESTERN_TERMINATORS.includes(char) && !CJK_TERMINATORS.includes(char)) continue;
    const decision = decideAtTerminator(text, index, start, atEnd);
    if (decision.kind === 'split') return { end: decision.end, forced: false };
    if (decision.kind === 'need-more') return 'need-more';
    index = endOfRun(text, index, WESTERN_TERMINATORS + CJK_TERMINATORS) - 1;
  }
  if (text.length > start + MAX_SENTENCE_CHARS) return { end: forcedCut(text, start), forced: true };
  return atEnd ? null : 'need-more';
}

export class SentenceStream {
  private buffer = '';
  /** Offset in `buffer` where the next sentence starts (a held short fragment stays in front of it). */
  private start = 0;
  private scanFrom = 0;

  /** Adds a text delta; returns every sentence it completed, in order. */
  push(delta: string): string[] {
    this.buffer += delta;
    return this.drain(false);
  }

  /** Ends the input; returns the remaining sentences (including a trailing short fragment). */
  flush(): string[] {
    const sentences = this.drain(true);
    const rest = this.buffer.slice(this.start).trim();
    if (rest.length > 0) sentences.push(rest);
    this.buffer = '';
    this.start = 0;
    this.scanFrom = 0;
    return sentences;
  }

  private drain(atEnd: boolean): string[] {
    const sentences: string[] = [];
    for (;;) {
      const cut = nextCut(this.buffer, this.start, Math.max(this.scanFrom, this.start), atEnd);
      if (cut === 'need-more' || cut === null) break;
      const sentence = this.buffer.slice(this.start, cut.end).trim();
      const hasMoreText = cut.end < this.buffer.length || !atEnd;
      if (sentence.length > 0 && sentence.length < MIN_SENTENCE_CHARS && !cut.forced && hasMoreText) {
        // Too short to synthesise on its own: keep it and let the next sentence absorb it.
        this.scanFrom = cut.end;
        continue;
      }
      if (sentence.length > 0) sentences.push(sentence);
      this.start = cut.end;
      this.scanFrom = cut.end;
    }
    this.compact();
    return sentences;
  }

  /** Drops consumed text so long streams do not keep the whole reply in memory. */
  private compact(): void {
    if (this.start === 0) return;
    this.buffer = this.buffer.slice(this.start);
    this.scanFrom -= this.start;
    this.start = 0;
  }
}

/** Splits a whole text into sentences (same result as streaming it through `SentenceStream`). */
export function splitSentences(text: string): string[] {
  const stream = new SentenceStream();
  return [...stream.push(text), ...stream.flush()];
}

/** The first clause of a reply may be cut at a comma once it has this many characters. */
const EAGER_CLAUSE_MIN_CHARS = 16;
const EAGER_BOUNDARY = /([.!?…。！？]|[,;:，；：](?=\s))\s/gu;
/** A head that ends, for now, in one of these is cut without waiting for the space after it. */
const EAGER_END = /\p{L}[!?。！？]$/u;

/**
 * A `SentenceStream` that lets the first segment of a reply go early: at its first sentence end (even a
 * short "Sure!") or at a clause boundary once it is long enough. Synthesis of a streamed reply waits for
 * that first segment, so cutting it early takes a sentence's worth of tokens off the time to first audio;
 * everything after it is split exactly like `splitSentences`.
 */
export class EagerSentenceStream {
  private readonly rest = new SentenceStream();
  private head = '';
  private headDone = false;

  push(delta: string): string[] {
    if (this.headDone) return this.rest.push(delta);
    this.head += delta;
    const match = [...this.head.matchAll(EAGER_BOUNDARY)].find((m) => {
      const first = this.head.slice(0, m.index! + m[0].length).trim();
      if (/[,;:，；：]/u.test(m[1])) return first.length >= EAGER_CLAUSE_MIN_CHARS;
      // "1. " of a list, an initial or a title ("Dr.") is not the end of a sentence.
      if (m[1] !== '.') return true;
      const before = this.head.slice(0, m.index);
      const word = (/([\p{L}.]+)$/u.exec(before)?.[1] ?? '').toLowerCase();
      return (
        !/\d$/.test(before) &&
        word.length > 1 &&
        !TITLE_ABBREVIATIONS.has(word) &&
        !AMBIGUOUS_ABBREVIATIONS.has(word) &&
        !word.includes('.')
      );
    });
    // "Sure!" as the stream's last text: an exclamation or question mark ends the head at once — waiting for the
    // next token's space would cost one token interval of the first sound. ("?!" or a closing quote that
    // follows goes with the next segment and is not spoken.)
    const cut = match ? match.index! + match[0].length : EAGER_END.test(this.head) ? this.head.length : -1;
    if (cut < 0) return [];
    const first = this.head.slice(0, cut).trim();
    this.headDone = true;
    const tail = this.head.slice(cut);
    this.head = '';
    return [first, ...this.rest.push(tail)].filter((s) => s.length > 0);
  }

  flush(): string[] {
    if (!this.headDone) {
      this.headDone = true;
      const head = this.head;
      this.head = '';
      return [...this.rest.push(head), ...this.rest.flush()];
    }
    return this.rest.flush();
  }
}
