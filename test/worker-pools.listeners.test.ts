import { getEventListeners } from 'node:events';
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import { closeAudioDecoder, decodeAudioOffThread } from '../actors/audio/decode-pool.ts';
import { encodeWav } from '../actors/audio/wav.ts';
import { closeKserveJsonReader, readJsonOutputOffThread } from '../actors/lipsync/kserve-json-pool.ts';

/** More calls than an emitter's default listener limit (10) many times over, as one long session makes. */
const CALLS = 50;

describe('worker pools: many calls of one session leave no listener behind', () => {
  const warnings: Error[] = [];
  const onWarning = (warning: Error): void => void warnings.push(warning);
  beforeEach(() => {
    warnings.length = 0;
    process.on('warning', onWarning);
  });
  afterEach(() => {
    process.off('warning', onWarning);
  });
  afterAll(async () => {
    await Promise.all([closeAudioDecoder(), closeKserveJsonReader()]);
  });

  /** Warnings are emitted on a later tick than the listener that crossed the limit was added. */
  async function leakWarnings(): Promise<string[]> {
    await new Promise((resolve) => setImmediate(resolve));
    return warnings
      .filter((warning) => warning.name === 'MaxListenersExceededWarning')
      .map((warning) => warning.message);
  }

  it(`${CALLS} sequential audio decodes under one session signal: no MaxListenersExceededWarning, no abort listener left`, async () => {
    const session = new AbortController();
    const wav = encodeWav(new Int16Array(1600).fill(1000), 16_000);
    for (let call = 0; call < CALLS; call++) {
      const decoded = await decodeAudioOffThread(wav, {
        targetRate: 16_000,
        maxDurationMs: 1000,
        signal: session.signal,
      });
      expect(decoded.pcm.length).toBe(1600);
    }
    expect(await leakWarnings()).toEqual([]);
    expect(getEventListeners(session.signal, 'abort')).toHaveLength(0);
  });

  it(`${CALLS} sequential KServe JSON answer reads under one session signal: no MaxListenersExceededWarning, no abort listener left`, async () => {
    const session = new AbortController();
    const answer = JSON.stringify({ outputs: [{ name: 'mouth', datatype: 'FP32', shape: [1, 2], data: [0.25, 0.5] }] });
    for (let call = 0; call < CALLS; call++) {
      const output = await readJsonOutputOffThread(new TextEncoder().encode(answer), 'mouth', [1, 2], session.signal);
      expect([...output]).toEqual([0.25, 0.5]);
    }
    expect(await leakWarnings()).toEqual([]);
    expect(getEventListeners(session.signal, 'abort')).toHaveLength(0);
  });
});
