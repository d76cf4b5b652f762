import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { MAX_SENTENCE_CHARS, SentenceStream, splitSentences } from '../actors/tts/sentences.ts';

const withoutWhitespace = (text: string): string => text.replace(/\s+/gu, '');

function streamInChunks(text: string, cutPoints: number[]): string[] {
  const stream = new SentenceStream();
  const sentences: string[] = [];
  let previous = 0;
  for (const cut of [...cutPoints].sort((a, b) => a - b)) {
    sentences.push(...stream.push(text.slice(previous, cut)));
    previous = cut;
  }
  sentences.push(...stream.push(text.slice(previous)));
  sentences.push(...stream.flush());
  return sentences;
}

describe('splitSentences', () => {
  it('splits on . ! ? and keeps the punctuation', () => {
    expect(splitSentences('The sky is blue. Is it raining? What a lovely day!')).toEqual([
      'The sky is blue.',
      'Is it raining?',
      'What a lovely day!',
    ]);
  });

  it('does not split after titles, initials or inside numbers', () => {
    expect(splitSentences('Dr. Smith paid 3.5 dollars to J. K. Rowling today. Then he left.')).toEqual([
      'Dr. Smith paid 3.5 dollars to J. K. Rowling today.',
      'Then he left.',
    ]);
    expect(splitSentences('We use tools, e.g. hammers and saws, every day. It works well.')).toEqual([
      'We use tools, e.g. hammers and saws, every day.',
      'It works well.',
    ]);
  });

  it('treats an ellipsis as a boundary only before a capitalised word', () => {
    expect(splitSentences('I was thinking... maybe we should go. Wait... What was that?')).toEqual([
      'I was thinking... maybe we should go.',
      'Wait... What was that?',
    ]);
  });

  it('keeps closing quotes with their sentence and handles ?! runs', () => {
    expect(splitSentences('He said "we are done." Huh?! I did not expect that.')).toEqual([
      'He said "we are done."',
      'Huh?! I did not expect that.',
    ]);
  });

  it('splits CJK text on 。！？ without spaces', () => {
    expect(splitSentences('今天天气很好，我们去公园吧。你想去吗？太好了！我们走吧。')).toEqual([
      '今天天气很好，我们去公园吧。',
      '你想去吗？太好了！',
      '我们走吧。',
    ]);
  });

  it('splits on newlines and merges very short fragments into the next sentence', () => {
    expect(
      splitSentences('Shopping list\n1. Apples for the pie\n2. Fresh pears\n\nOk. That is all for today.'),
    ).toEqual(['Shopping list', '1. Apples for the pie', '2. Fresh pears', 'Ok. That is all for today.']);
  });

  it('cuts a very long sentence at a comma, then at a space, within the maximum length', () => {
    const clause = 'and then the little robot walked further along the winding road';
    const long = `${Array.from({ length: 8 }, () => clause).join(', ')}.`;
    const sentences = splitSentences(long);
    expect(sentences.length).toBeGreaterThan(2);
    for (const sentence of sentences) expect(sentence.length).toBeLessThanOrEqual(MAX_SENTENCE_CHARS);
    expect(sentences[0].endsWith(',')).toBe(true);

    const noCommas = Array.from({ length: 80 }, (_, i) => `word${i}`).join(' ');
    for (const sentence of splitSentences(noCommas)) {
      expect(sentence.length).toBeLessThanOrEqual(MAX_SENTENCE_CHARS);
      expect(sentence).toMatch(/^word\d+( word\d+)*$/);
    }
  });

  it('returns nothing for empty or blank text', () => {
    expect(splitSentences('')).toEqual([]);
    expect(splitSentences('  \n\t ')).toEqual([]);
  });
});

describe('SentenceStream', () => {
  it('emits a sentence as soon as the next one begins, before the reply ends', () => {
    const stream = new SentenceStream();
    expect(stream.push('Hello there, my fri')).toEqual([]);
    expect(stream.push('end.')).toEqual([]); // "." at the end could still be "end.com" or "3.5"
    expect(stream.push(' How')).toEqual(['Hello there, my friend.']);
    expect(stream.push(' are you?')).toEqual([]);
    expect(stream.flush()).toEqual(['How are you?']);
  });

  it('emits CJK sentences without waiting for a space', () => {
    const stream = new SentenceStream();
    expect(stream.push('我们今天去公园散步。明')).toEqual(['我们今天去公园散步。']);
  });
});

// Text made of pieces that exercise every rule: abbreviations, numbers, ellipses, CJK, newlines, long runs.
const piece = fc.constantFrom(
  'Hello',
  'world',
  'Dr.',
  'Mr.',
  '3.5',
  'e.g.',
  'etc.',
  'The',
  'end.',
  'yes!',
  'why?',
  '?!',
  '...',
  '…',
  'maybe',
  'Ok.',
  '"quoted."',
  '(aside.)',
  '。',
  '你好',
  '！',
  '？',
  ',',
  ';',
  'a',
  'I.',
  'J.',
  'U.S.',
  '\n',
  '\n\n',
  '  ',
  'supercalifragilisticexpialidocious',
  '1.',
  'x'.repeat(60),
);
const text = fc
  .array(fc.tuple(piece, fc.constantFrom(' ', '', '  ', '\n')), { maxLength: 60 })
  .map((parts) => parts.map(([word, gap]) => word + gap).join(''));
const anyText = fc.oneof(text, fc.string({ maxLength: 400 }), fc.string({ unit: 'grapheme', maxLength: 300 }));

describe('sentence splitting properties', () => {
  it('loses and adds nothing but whitespace', () => {
    fc.assert(
      fc.property(anyText, (input) => {
        const sentences = splitSentences(input);
        expect(withoutWhitespace(sentences.join(''))).toBe(withoutWhitespace(input));
        for (const sentence of sentences) {
          expect(sentence.trim()).toBe(sentence);
          expect(sentence.length).toBeGreaterThan(0);
        }
      }),
      { numRuns: 500 },
    );
  });

  it('streams to the same sentences as the batch split for any chunking', () => {
    fc.assert(
      fc.property(
        anyText.chain((input) =>
          fc.tuple(fc.constant(input), fc.array(fc.integer({ min: 0, max: input.length }), { maxLength: 20 })),
        ),
        ([input, cuts]) => {
          expect(streamInChunks(input, cuts)).toEqual(splitSentences(input));
        },
      ),
      { numRuns: 500 },
    );
  });

  it('never emits a sentence longer than the maximum (plus a held short fragment)', () => {
    fc.assert(
      fc.property(anyText, (input) => {
        for (const sentence of splitSentences(input)) {
          expect(sentence.length).toBeLessThanOrEqual(MAX_SENTENCE_CHARS + 2);
        }
      }),
      { numRuns: 300 },
    );
  });
});

describe('EagerSentenceStream (first segment of a streamed reply)', () => {
  it('lets a short first sentence go at once, then splits like splitSentences', async () => {
    const { EagerSentenceStream, splitSentences } = await import('../actors/tts/sentences.ts');
    const stream = new EagerSentenceStream();
    const out: string[] = [];
    for (const token of ['Sure', '!', ' Here', ' is', ' a', ' short', ' answer', '.', ' And', ' more', ' text', '.'])
      out.push(...stream.push(token));
    expect(out[0]).toBe('Sure!');
    out.push(...stream.flush());
    expect(out).toEqual(['Sure!', ...splitSentences('Here is a short answer. And more text.')]);
  });

  it('lets "Sure!" go as soon as the "!" arrives, without waiting for the next token; a "." still waits for its space', async () => {
    const { EagerSentenceStream } = await import('../actors/tts/sentences.ts');
    const stream = new EagerSentenceStream();
    expect(stream.push('Sure')).toEqual([]);
    expect(stream.push('!')).toEqual(['Sure!']);
    expect([...stream.push(' Here is a short answer.'), ...stream.flush()]).toEqual(['Here is a short answer.']);
    const dotted = new EagerSentenceStream();
    expect(dotted.push('Dr.')).toEqual([]);
    expect(dotted.push('3.')).toEqual([]);
    expect(dotted.push('!')).toEqual([]);
  });

  it('cuts a long first clause at a comma, but not a short one, and not inside a number', async () => {
    const { EagerSentenceStream } = await import('../actors/tts/sentences.ts');
    const long = new EagerSentenceStream();
    expect(long.push('Well, ')).toEqual([]);
    expect(long.push('that is a very good question, ')).toEqual(['Well, that is a very good question,']);
    const num = new EagerSentenceStream();
    expect(num.push('It costs 3.5 euros. ')).toEqual(['It costs 3.5 euros.']);
    const title = new EagerSentenceStream();
    expect(title.push('Dr. Smith will see you now. ')).toEqual(['Dr. Smith will see you now.']);
  });

  it('loses no text for any chunking (property)', async () => {
    const fc = (await import('fast-check')).default;
    const { EagerSentenceStream } = await import('../actors/tts/sentences.ts');
    fc.assert(
      fc.property(fc.string({ maxLength: 300 }), fc.array(fc.nat(20), { maxLength: 30 }), (text, cuts) => {
        const stream = new EagerSentenceStream();
        const out: string[] = [];
        let pos = 0;
        for (const c of cuts) {
          out.push(...stream.push(text.slice(pos, pos + c)));
          pos += c;
        }
        out.push(...stream.push(text.slice(pos)), ...stream.flush());
        expect(out.join('').replace(/\s+/g, '')).toBe(text.replace(/\s+/g, ''));
      }),
    );
  });
});
