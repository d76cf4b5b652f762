/**
 * The mouth leads its sound (issue 44, point 4): a frame shows the mouth of the audio `MOUTH_LOOKAHEAD_MS` after its
 * presentation time (`actors/media/timeline.ts`), so the mouth starts opening on a frame shown before the sound it
 * shapes, and closes before the sound ends. Frame times and poses only: nothing here depends on how fast this machine
 * is (the lag a viewer sees is measured by `npm run bench -- mouth_sync_browser`).
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { FrameTimeline, MOUTH_LOOKAHEAD_MS } from '../actors/media/timeline.ts';
import { newPlayoutTurn } from '../actors/media/turn-playout.ts';
import { buildMouthTimeline } from '../actors/mouth/timeline.ts';
import type { PhoneTiming } from '../actors/mouth/visemes.ts';
import { vowel } from './helpers/vowel.ts';

const RATE = 16_000;
const FPS = 25;
const FRAME_MS = 1000 / FPS;
/** An opening at least this large is visible on every renderer (the photo's first of `OPEN_STEPS` is 1/7). */
const OPENING = 0.1;

/** `silenceMs` of silence, then `voiceMs` of vowel, then `tailMs` of silence: one chunk, as TTS hands it over. */
function utterance(silenceMs: number, voiceMs: number, tailMs: number, amplitude: number): Int16Array {
  const voice = vowel(voiceMs, RATE, amplitude);
  const pcm = new Int16Array(Math.round(((silenceMs + voiceMs + tailMs) / 1000) * RATE));
  pcm.set(voice, Math.round((silenceMs / 1000) * RATE));
  return pcm;
}

/** Phone timings for that chunk, as flite reports them: a pause, the vowel, a pause. */
function phonesOf(silenceMs: number, voiceMs: number, tailMs: number): PhoneTiming[] {
  const end = silenceMs + voiceMs;
  return [
    { phone: 'pau', startMs: 0, endMs: silenceMs },
    { phone: 'aa', startMs: silenceMs, endMs: end },
    { phone: 'pau', startMs: end, endMs: end + tailMs },
  ];
}

/** The frames of a timeline holding `pcm` from sample 0, with their presentation times and mouth openings. */
function framesOf(pcm: Int16Array, phones?: PhoneTiming[]): Array<{ ptsMs: number; open: number }> {
  const timeline = new FrameTimeline(RATE, FPS);
  timeline.append(
    pcm.length,
    buildMouthTimeline({ pcm, sampleRate: RATE, ...(phones ? { phones } : {}) }),
    newPlayoutTurn('turn'),
  );
  const count = Math.floor((pcm.length / RATE) * FPS);
  return Array.from({ length: count }, (_, idx) => {
    const request = timeline.requestFor(idx);
    return { ptsMs: request.ptsMs, open: request.mouth.open };
  });
}

const tracks = [
  ['from the audio alone', false],
  ['with phone timings', true],
] as const;

describe('the mouth leads its sound at frame level', () => {
  it.each(tracks)(
    'a vowel starting at 400 ms: the frame shown before it (360–400 ms) has started opening, frames well before are shut (%s)',
    (_, withPhones) => {
      const frames = framesOf(utterance(400, 500, 300, 8_000), withPhones ? phonesOf(400, 500, 300) : undefined);
      const before = frames.find((f) => f.ptsMs === 400 - FRAME_MS)!;
      expect(before.open).toBeGreaterThanOrEqual(OPENING);
      // Shut until the lookahead (and the track's own anticipation) reaches the sound: the mouth is not simply open.
      for (const frame of frames.filter((f) => f.ptsMs + MOUTH_LOOKAHEAD_MS + 2 * FRAME_MS <= 400))
        expect(frame.open, `frame at ${frame.ptsMs} ms`).toBeLessThan(0.02);
    },
  );

  it.each(tracks)(
    'for any onset and loudness of speech, the first opening frame is presented no later than the onset (%s)',
    (_, withPhones) => {
      fc.assert(
        fc.property(
          fc.integer({ min: 120, max: 900 }),
          fc.integer({ min: 200, max: 600 }),
          // −30 … −10 dBFS of voice: quiet to loud conversational speech.
          fc.double({ min: 1_000, max: 10_000, noNaN: true }),
          (onsetMs, voiceMs, amplitude) => {
            const tailMs = 300;
            const frames = framesOf(
              utterance(onsetMs, voiceMs, tailMs, amplitude),
              withPhones ? phonesOf(onsetMs, voiceMs, tailMs) : undefined,
            );
            const first = frames.find((f) => f.open >= OPENING);
            expect(first).toBeDefined();
            expect(first!.ptsMs).toBeLessThanOrEqual(onsetMs);
          },
        ),
        { numRuns: 40, seed: 44 },
      );
    },
  );

  it.each(tracks)(
    'closes as its sound stops: the frame presented at the end of a vowel (400–880 ms) is under half its widest opening (%s)',
    (_, withPhones) => {
      const frames = framesOf(utterance(400, 480, 400, 8_000), withPhones ? phonesOf(400, 480, 400) : undefined);
      const widest = Math.max(...frames.map((f) => f.open));
      expect(widest).toBeGreaterThan(0.5);
      expect(frames.find((f) => f.ptsMs === 880)!.open).toBeLessThan(0.5 * widest);
    },
  );
});
