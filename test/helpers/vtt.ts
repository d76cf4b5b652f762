import { expect } from 'vitest';

/** Parses a WebVTT file (as `toWebVtt` writes it: numbered cues, one line of text) into cues with ms times. */
export function parseVtt(text: string): Array<{ fromMs: number; toMs: number; text: string }> {
  expect(text.startsWith('WEBVTT\n')).toBe(true);
  const ms = (t: string) => {
    const [h, m, s] = t.split(':');
    return Math.round((Number(h) * 3600 + Number(m) * 60 + Number(s)) * 1000);
  };
  return text
    .trim()
    .split(/\n\n/)
    .slice(1)
    .map((block) => {
      const [, times, cue] = block.split('\n');
      const [from, to] = times.split(' --> ');
      return { fromMs: ms(from), toMs: ms(to), text: cue };
    });
}
