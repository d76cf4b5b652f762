/**
 * The `builtin` provider: offline speech with no key, from flite (English) and eSpeak-NG (other
 * languages) running in supervised child processes (actors/tts/builtin/pool.ts). Text is split into
 * sentences; each sentence is yielded as soon as it is synthesised while the next one is already being
 * synthesised.
 */
import { splitSentences } from '../sentences.ts';
import { VoiceNotFoundError } from '../types.ts';
import type { TtsChunk, TtsLogger, TtsProvider, TtsRequest } from '../types.ts';
import { UpstreamError, type ProviderStatus } from '../../upstream/errors.ts';
import type { EngineAudio } from '../builtin/engine.ts';
import { synthesizeSentenceInEngine, useBuiltinEngineLogger, warmUpBuiltinEngines } from '../builtin/pool.ts';
import { untilAborted } from '../../upstream/abort.ts';
import { BUILTIN_DEFAULT_VOICE, BUILTIN_VOICE_TABLE, findBuiltinVoice, type BuiltinVoice } from '../builtin/voices.ts';

export { BUILTIN_DEFAULT_VOICE } from '../builtin/voices.ts';
export { closeBuiltinEngines, warmUpBuiltinEngines } from '../builtin/pool.ts';

export const BUILTIN_VOICES: ReadonlyArray<{
  voice: string;
  lang: string;
  gender: 'female' | 'male';
  engine: 'flite' | 'espeak';
}> = BUILTIN_VOICE_TABLE;

export interface BuiltinProviderOptions {
  logger?: TtsLogger;
  /** Load the engines in the background right away (default true): the WASM compile takes ~1 s. */
  warmUp?: boolean;
}

function resolveVoice(voice: string | null | undefined): BuiltinVoice {
  if (voice === null || voice === undefined || voice.trim() === '') {
    return findBuiltinVoice(BUILTIN_DEFAULT_VOICE)!;
  }
  const entry = findBuiltinVoice(voice);
  if (!entry) {
    throw new VoiceNotFoundError(
      `unknown builtin voice '${voice}'; use one of ${BUILTIN_VOICE_TABLE.map((v) => v.voice).join(', ')}`,
    );
  }
  return entry;
}

export function createBuiltinProvider(options: BuiltinProviderOptions = {}): TtsProvider {
  const { logger } = options;
  if (logger) useBuiltinEngineLogger(logger);
  if (options.warmUp !== false) {
    warmUpBuiltinEngines().catch((error: unknown) => logger?.warn({ err: error }, 'builtin TTS engine warm-up failed'));
  }

  async function* synthesize(request: TtsRequest): AsyncGenerator<TtsChunk> {
    const { signal } = request;
    const voice = resolveVoice(request.voice);
    signal.throwIfAborted();
    const sentences = splitSentences(request.text);
    const startedAt = performance.now();

    const start = (index: number): Promise<EngineAudio> => {
      const work = synthesizeSentenceInEngine(
        {
          engine: voice.engine,
          engineVoice: voice.engineVoice,
          text: sentences[index],
          sampleRate: request.sampleRate,
        },
        signal,
        request.priority ?? 'live',
      );
      // A prefetched sentence may never be awaited (abort, consumer stops early).
      work.catch(() => undefined);
      return work;
    };

    let next: Promise<EngineAudio> | undefined = sentences.length > 0 ? start(0) : undefined;
    for (let index = 0; next; index++) {
      let audio: EngineAudio;
      try {
        audio = await untilAborted(next, signal);
      } catch (error) {
        if (signal.aborted) throw signal.reason;
        logger?.error({ err: error, sentenceIndex: index }, 'builtin TTS sentence failed');
        throw new UpstreamError(`builtin TTS engine failed: ${(error as Error).message ?? String(error)}`);
      }
      // Start the following sentence before handing this one over, so synthesis overlaps playback.
      next = index + 1 < sentences.length ? start(index + 1) : undefined;
      if (index === 0) {
        logger?.debug(
          { msToFirstAudio: Math.round(performance.now() - startedAt), engine: voice.engine },
          'builtin TTS first sentence ready',
        );
      }
      signal.throwIfAborted();
      yield { pcm: audio.pcm, sampleRate: audio.sampleRate, phones: audio.phones, sentenceIndex: index };
    }
  }

  return {
    id: 'builtin',
    status: (): ProviderStatus => ({ configured: true }),
    validateVoice: (voice: string | null | undefined): void => {
      resolveVoice(voice);
    },
    synthesize,
  };
}
