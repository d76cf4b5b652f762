/**
 * The streaming mel window a live frame uses (`melWindowFromStream`) against the whole-clip spectrogram
 * (`wav2lipMelSpectrogram`, itself checked against a direct DFT and librosa in lipsync.mel.test.ts): inside a clip
 * they must agree column for column; and the renderer's conversion of session audio at other rates.
 */
import { describe, expect, it } from 'vitest';
import {
  MEL_STREAM_LEAD_SAMPLES,
  MEL_STREAM_WINDOW_SAMPLES,
  MEL_WINDOW_COLUMNS,
  melWindowForFrame,
  melWindowFromStream,
  wav2lipMelSpectrogram,
} from '../actors/lipsync/mel.ts';
import { streamWindowOf } from '../actors/lipsync/neural-renderer.ts';

function speechLike(length: number, rate = 16_000, noise = 0.05): Float32Array {
  let state = 12345;
  return Float32Array.from({ length }, (_, n) => {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    const t = n / rate;
    const envelope = 0.5 + 0.5 * Math.sin(2 * Math.PI * 3 * t);
    return (
      envelope *
      (0.4 * Math.sin(2 * Math.PI * 180 * t) + 0.2 * Math.sin(2 * Math.PI * 1250 * t) + noise * (state / 2 ** 31 - 1))
    );
  });
}

describe('the streaming mel window of a live frame', () => {
  const clip = speechLike(32_000);
  const mel = wav2lipMelSpectrogram(clip);

  it('equals the whole clip spectrogram columns c … c+15 for a frame presented at column c (inside the clip)', () => {
    for (const column of [3, 17, 40, 100, mel.columns - MEL_WINDOW_COLUMNS - 2]) {
      const pts = column * 200;
      const window = melWindowFromStream(
        clip.subarray(pts - MEL_STREAM_LEAD_SAMPLES, pts - MEL_STREAM_LEAD_SAMPLES + MEL_STREAM_WINDOW_SAMPLES).slice(),
      );
      // fps 80: frame index = column index (Wav2Lip's start = int(i · 80 / fps)).
      const reference = melWindowForFrame(mel, column, 80);
      let worst = 0;
      for (let i = 0; i < window.length; i++) worst = Math.max(worst, Math.abs(window[i] - reference[i]));
      expect(worst, `column ${column}`).toBeLessThan(1e-4);
    }
  });

  it('reads silence as −4 everywhere', () => {
    const window = melWindowFromStream(new Float32Array(MEL_STREAM_WINDOW_SAMPLES));
    expect(Math.max(...window)).toBe(-4);
  });

  it('takes session audio at 16 kHz sample for sample and at 48 kHz through interpolation, to nearly the same window', () => {
    const pts16 = 8_000;
    const source16 = Int16Array.from(clip.subarray(pts16 - 1000, pts16 + 4000), (v) => Math.round(v * 32767));
    const at16 = streamWindowOf({ sampleRate: 16_000, pcm: source16, leadSamples: 1000 });
    for (let i = 0; i < at16.length; i++)
      expect(at16[i]).toBeCloseTo(source16[1000 - MEL_STREAM_LEAD_SAMPLES + i] / 32768, 6);

    // Tones only: white noise at 48 kHz has a third of its power below 8 kHz, so it would not be the same signal.
    const clip48 = speechLike(96_000, 48_000, 0);
    const pcm48 = Int16Array.from(clip48.subarray(24_000 - 3000, 24_000 + 12_000), (v) => Math.round(v * 32767));
    const reference = melWindowFromStream(
      streamWindowOf({
        sampleRate: 16_000,
        pcm: Int16Array.from(speechLike(32_000, 16_000, 0).subarray(8_000 - 1000, 8_000 + 4000), (v) =>
          Math.round(v * 32767),
        ),
        leadSamples: 1000,
      }),
    );
    const resampled = melWindowFromStream(streamWindowOf({ sampleRate: 48_000, pcm: pcm48, leadSamples: 3000 }));
    let sum = 0;
    for (let i = 0; i < reference.length; i++) sum += Math.abs(reference[i] - resampled[i]);
    // Same signal, sampled at 48 kHz and interpolated down: bands agree to a small fraction of the ±4 range.
    expect(sum / reference.length).toBeLessThan(0.05);
  });
});
