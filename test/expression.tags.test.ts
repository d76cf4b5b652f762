import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  ExpressionTagFilter,
  MAX_TAG_CHARS,
  stripExpressionTags,
  type TagFilterPiece,
} from '../actors/llm/expression-tags.ts';
import {
  EXPRESSION_BLEND_MS,
  expressionWeightsAt,
  ExpressionTrack,
  MAX_EXPRESSION_CUES,
} from '../actors/expression.ts';

function streamed(reply: string, cuts: number[]): { text: string; tags: string[] } {
  const filter = new ExpressionTagFilter();
  const pieces: TagFilterPiece[] = [];
  let previous = 0;
  for (const cut of [...cuts.sort((a, b) => a - b), reply.length]) {
    pieces.push(...filter.push(reply.slice(previous, cut)));
    previous = Math.max(previous, cut);
  }
  pieces.push(...filter.flush());
  return {
    text: pieces.map((piece) => ('text' in piece ? piece.text : '')).join(''),
    tags: pieces.flatMap((piece) => ('tag' in piece ? [`${piece.tag.name}:${piece.tag.intensity}`] : [])),
  };
}

const words = fc.constantFrom(
  'Hello',
  'there',
  'great',
  'news',
  '3.5',
  'ok!',
  '[1]',
  '[see above]',
  '[',
  ']',
  ' ',
  '  ',
  'smile',
  '[[smile]',
);
const tags = fc.constantFrom(
  '[smile]',
  '[Surprise]',
  '[concern 0.5]',
  '[emphasis:1]',
  '[neutral]',
  '[smile .25]',
  '[smil',
  '[frown]',
);
const reply = fc.array(fc.oneof(words, tags), { maxLength: 30 }).map((parts) => parts.join(' '));

describe('expression tags in a streamed reply', () => {
  it('a tagged reply speaks without its tags and names them in order', () => {
    expect(stripExpressionTags('[smile] Great to see you! [surprise 0.6]Really? See [1].')).toEqual({
      text: 'Great to see you! Really? See [1].',
      tags: [
        { name: 'smile', intensity: 1 },
        { name: 'surprise', intensity: 0.6 },
      ],
    });
    expect(stripExpressionTags('Hello [smile] there').text).toBe('Hello there');
    expect(stripExpressionTags('an [unknown] tag and [smile 2] stay').text).toBe('an [unknown] tag and [smile 2] stay');
  });

  it('any split of a tagged reply yields the same stripped text and the same tags (property)', () => {
    fc.assert(
      fc.property(reply, fc.array(fc.nat(400), { maxLength: 12 }), (text, cuts) => {
        const whole = stripExpressionTags(text);
        const pieces = streamed(
          text,
          cuts.map((cut) => cut % (text.length + 1)),
        );
        expect(pieces.text).toBe(whole.text);
        expect(pieces.tags).toEqual(whole.tags.map((tag) => `${tag.name}:${tag.intensity}`));
        expect(pieces.text).not.toMatch(/\[(smile|surprise|concern|emphasis|neutral)( \.?[\d.]+|:1)?\]/iu);
      }),
      { numRuns: 400 },
    );
  });

  it('a tag split into single characters is still stripped', () => {
    const filter = new ExpressionTagFilter();
    const out = ['Fine [sm', 'i', 'le', '] thanks'].flatMap((delta) => filter.push(delta)).concat(filter.flush());
    expect(out).toEqual([{ text: 'Fine ' }, { tag: { name: 'smile', intensity: 1 } }, { text: 'thanks' }]);
  });

  it('holds back at most MAX_TAG_CHARS after an open bracket', () => {
    const filter = new ExpressionTagFilter();
    const long = `[${'a'.repeat(MAX_TAG_CHARS + 5)}`;
    const out = filter.push(long);
    const released = out.map((piece) => ('text' in piece ? piece.text : '')).join('');
    expect(long.length - released.length).toBeLessThanOrEqual(MAX_TAG_CHARS);
    expect(released.startsWith('[aaa')).toBe(true);
  });
});

describe('expression weights on the media clock', () => {
  it('blend in and out over the blend time, the same for any frame asked in any order', () => {
    const cues = [
      { name: 'smile' as const, intensity: 1, startMs: 1000 },
      { name: 'neutral' as const, intensity: 1, startMs: 3000 },
    ];
    expect(expressionWeightsAt(cues, 999).smile).toBe(0);
    expect(expressionWeightsAt(cues, 1000 + EXPRESSION_BLEND_MS / 2).smile).toBeCloseTo(0.5, 5);
    expect(expressionWeightsAt(cues, 1000 + EXPRESSION_BLEND_MS).smile).toBe(1);
    expect(expressionWeightsAt(cues, 2999).smile).toBe(1);
    expect(expressionWeightsAt(cues, 3000 + EXPRESSION_BLEND_MS / 2).smile).toBeCloseTo(0.5, 5);
    expect(expressionWeightsAt(cues, 3000 + EXPRESSION_BLEND_MS).smile).toBe(0);
  });

  it('a new cue cross-fades with the one before; a duration ends it; emphasis is a short flash', () => {
    const cues = [
      { name: 'concern' as const, intensity: 0.8, startMs: 0 },
      { name: 'surprise' as const, intensity: 1, startMs: 1000, durationMs: 500 },
      { name: 'emphasis' as const, intensity: 1, startMs: 4000 },
    ];
    const mid = expressionWeightsAt(cues, 1150);
    expect(mid.concern).toBeCloseTo(0.4, 5);
    expect(mid.surprise).toBeCloseTo(0.5, 5);
    expect(expressionWeightsAt(cues, 1500).surprise).toBe(1);
    expect(expressionWeightsAt(cues, 1800).surprise).toBe(0);
    expect(expressionWeightsAt(cues, 4350).emphasis).toBe(1);
    expect(expressionWeightsAt(cues, 5000).emphasis).toBe(0);
  });

  it('a track keeps only its latest cues and never goes back in time', () => {
    const track = new ExpressionTrack();
    for (let index = 0; index < MAX_EXPRESSION_CUES * 3; index++)
      track.add({ name: 'smile', intensity: 1, startMs: index * 10 });
    expect(track.add({ name: 'surprise', intensity: 1, startMs: 0 }).startMs).toBe((MAX_EXPRESSION_CUES * 3 - 1) * 10);
    expect(track.weightsAt(10_000).surprise).toBe(1);
  });
});
