import { loadConfig } from '../../src/config.ts';
import { createTtsRegistry, type TtsRegistry } from '../../actors/tts/registry.ts';
import type { TtsProvider } from '../../actors/tts/types.ts';

/**
 * A TTS registry whose `builtin` speaks every segment as `msPerSegment` of a 440 Hz tone, at once: a segment's
 * length, hence what of a turn was heard when, is known exactly. A segment containing `explode` fails (an
 * upstream error), for tests that need a failing synthesis.
 */
export function toneTtsRegistry(msPerSegment: number): TtsRegistry {
  const builtin: TtsProvider = {
    id: 'builtin',
    defaultVoice: null,
    status: () => ({ configured: true }),
    async *synthesize({ text, sampleRate, signal }) {
      signal.throwIfAborted();
      if (text.includes('explode')) throw new Error('tone tts: asked to explode');
      const pcm = new Int16Array(Math.round((sampleRate * msPerSegment) / 1000));
      for (let i = 0; i < pcm.length; i++) pcm[i] = Math.round(9000 * Math.sin((2 * Math.PI * 440 * i) / sampleRate));
      yield { pcm, sampleRate };
    },
  };
  return createTtsRegistry(loadConfig({}, '/ignored').tts, { builtin });
}
