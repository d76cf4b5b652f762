import { describe, expect, it } from 'vitest';
import { detectSpeechSegments, splitForAsr, trimSilence } from '../actors/audio/vad.ts';

/** Deterministic PRNG so background noise is the same on every run. */
function random(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state * 1_664_525 + 1_013_904_223) >>> 0;
    return state / 2 ** 32;
  };
}

/**
 * Low background noise (~-55 dBFS) with voiced "bursts": a harmonic-rich source whose pitch glides
 * and whose loudness pulses at a syllable rate, which the WebRTC VAD treats as speech.
 */
function recording(sampleRate: number, seconds: number, bursts: Array<[number, number]>): Int16Array {
  const next = random(42);
  const pcm = new Int16Array(Math.round(sampleRate * seconds));
  let phase = 0;
  for (let i = 0; i < pcm.length; i++) {
    const t = i / sampleRate;
    let value = (next() - 0.5) * 120;
    if (bursts.some(([from, to]) => t >= from && t < to)) {
      const pitch = 140 + 30 * Math.sin(2 * Math.PI * 3 * t);
      phase += (2 * Math.PI * pitch) / sampleRate;
      let voiced = 0;
      for (let harmonic = 1; harmonic <= 12; harmonic++) voiced += Math.sin(harmonic * phase) / harmonic;
      value += 5_000 * voiced * (0.6 + 0.4 * Math.sin(2 * Math.PI * 4 * t));
    }
    pcm[i] = Math.round(value);
  }
  return pcm;
}

describe('detectSpeechSegments (WebRTC VAD)', () => {
  it.each([8_000, 16_000, 22_050, 48_000])('finds one burst between silences at %i Hz', async (rate) => {
    const segments = await detectSpeechSegments(recording(rate, 3, [[1, 2]]), rate);
    expect(segments).toHaveLength(1);
    const [{ startMs, endMs }] = segments;
    // Padding (150 ms) and the detector's own hangover widen the burst a little, never a lot.
    expect(startMs).toBeGreaterThanOrEqual(750);
    expect(startMs).toBeLessThanOrEqual(1_000);
    expect(endMs).toBeGreaterThanOrEqual(2_000);
    expect(endMs).toBeLessThanOrEqual(2_450);
  });

  it('finds nothing in background noise alone', async () => {
    expect(await detectSpeechSegments(recording(16_000, 2, []), 16_000)).toEqual([]);
  });

  it('bridges a short pause but keeps a long pause as two segments', async () => {
    const shortPause = await detectSpeechSegments(
      recording(16_000, 4, [
        [0.5, 1.5],
        [1.65, 2.5],
      ]),
      16_000,
    );
    expect(shortPause).toHaveLength(1);
    const longPause = await detectSpeechSegments(
      recording(16_000, 4, [
        [0.5, 1.3],
        [2.3, 3.2],
      ]),
      16_000,
    );
    expect(longPause).toHaveLength(2);
    expect(longPause[0].endMs).toBeLessThan(longPause[1].startMs);
  });

  it('drops blips shorter than minSpeechMs', async () => {
    const pcm = recording(16_000, 2, [[1, 1.06]]);
    expect(await detectSpeechSegments(pcm, 16_000, { minSpeechMs: 400 })).toEqual([]);
  });

  it('stops when its signal aborts', async () => {
    const controller = new AbortController();
    controller.abort();
    // Long enough to reach a yield point, where the signal is checked.
    const pcm = recording(16_000, 10, [[1, 2]]);
    await expect(detectSpeechSegments(pcm, 16_000, { signal: controller.signal })).rejects.toThrow(/abort/i);
  });
});

describe('trimSilence', () => {
  it('keeps the speech and cuts leading and trailing silence', async () => {
    const pcm = recording(16_000, 4, [[1.5, 2.5]]);
    const trimmed = await trimSilence(pcm, 16_000);
    expect(trimmed.pcm.length).toBe(Math.round(((trimmed.endMs - trimmed.startMs) / 1000) * 16_000));
    expect(trimmed.pcm.length).toBeGreaterThanOrEqual(16_000);
    expect(trimmed.pcm.length).toBeLessThan(1.6 * 16_000);
    expect(trimmed.pcm[0]).toBe(pcm[Math.round((trimmed.startMs / 1000) * 16_000)]);
  });

  it('returns empty audio when there is no speech', async () => {
    const trimmed = await trimSilence(recording(16_000, 1, []), 16_000);
    expect(trimmed.pcm.length).toBe(0);
  });
});

describe('splitForAsr', () => {
  it('cuts in the pauses, each piece within the limit, covering every burst', async () => {
    const bursts: Array<[number, number]> = [
      [0.5, 1.7],
      [2.5, 3.7],
      [4.5, 5.7],
      [6.5, 7.7],
    ];
    const pieces = await splitForAsr(recording(16_000, 8.5, bursts), 16_000, 3_000);
    expect(pieces.length).toBeGreaterThanOrEqual(2);
    for (const piece of pieces) {
      expect(piece.endMs - piece.startMs).toBeLessThanOrEqual(3_000);
      expect(piece.pcm.length).toBe(Math.round(((piece.endMs - piece.startMs) / 1000) * 16_000));
    }
    for (const [from, to] of bursts) {
      // Every burst lies wholly inside one piece: no cut goes through speech.
      expect(pieces.some((piece) => piece.startMs <= from * 1000 && piece.endMs >= to * 1000)).toBe(true);
    }
  });

  it('cuts a stretch of speech longer than the limit into contiguous pieces within it', async () => {
    const pieces = await splitForAsr(recording(16_000, 7, [[0.5, 6.5]]), 16_000, 2_000);
    expect(pieces.length).toBeGreaterThanOrEqual(3);
    for (const piece of pieces) expect(piece.endMs - piece.startMs).toBeLessThanOrEqual(2_000);
    for (let i = 1; i < pieces.length; i++) expect(pieces[i].startMs).toBe(pieces[i - 1].endMs);
    expect(pieces[0].startMs).toBeLessThanOrEqual(500);
    expect(pieces.at(-1)!.endMs).toBeGreaterThanOrEqual(6_500);
  });

  it('returns no pieces for silence', async () => {
    expect(await splitForAsr(recording(16_000, 2, []), 16_000, 5_000)).toEqual([]);
  });
});
