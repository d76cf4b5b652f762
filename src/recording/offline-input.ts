import { Type, type Static } from '@sinclair/typebox';
import { buildMouthTimeline } from '../../actors/mouth/timeline.ts';
import {
  AudioTooLongError,
  describeDuration,
  InvalidAudioError,
  UPLOAD_AUDIO_RULES,
} from '../../actors/audio/decode.ts';
import { decodeAudioOffThread } from '../../actors/audio/decode-pool.ts';
import type { TtsProvider } from '../../actors/tts/types.ts';
import { splitSentences } from '../../actors/tts/sentences.ts';
import type { TimelinePiece } from './offline-render.ts';

/** Bounds of an offline bundle request; they keep one job to minutes of video and the body to a few MB. */
export const OFFLINE_LIMITS = {
  textChars: 5_000,
  segmentTextChars: 1_000,
  segments: 50,
  /** Base64 characters of one audio segment (~6 MB of audio). */
  audioBase64Chars: 8 * 1024 * 1024,
  pauseMs: 10_000,
  /** Request body limit of the route: the base64 audio plus JSON overhead. */
  bodyBytes: 12 * 1024 * 1024,
  /**
   * Decoded audio of one job: its audio segments and the pauses after them (text is bounded by its characters).
   * Bytes do not bound this: 6 MB of 8 kb/s MP3 is 100 minutes; 30 min holds ~58 MB of 16 kHz PCM per queued job.
   */
  audioMs: 30 * 60_000,
} as const;

/** Silence after each segment unless the segment says otherwise, so sentences of separate segments do not run together. */
export const DEFAULT_PAUSE_AFTER_MS = 300;

const PauseAfter = Type.Integer({
  minimum: 0,
  maximum: OFFLINE_LIMITS.pauseMs,
  description: `Silence after this segment, ms (default ${DEFAULT_PAUSE_AFTER_MS})`,
});

export const TextSegment = Type.Object(
  {
    text: Type.String({
      minLength: 1,
      maxLength: OFFLINE_LIMITS.segmentTextChars,
      description: 'Text spoken with the job voice',
    }),
    pause_after_ms: Type.Optional(PauseAfter),
  },
  { additionalProperties: false },
);

export const AudioSegment = Type.Object(
  {
    audio_base64: Type.String({
      minLength: 4,
      maxLength: OFFLINE_LIMITS.audioBase64Chars,
      description: 'WAV, MP3 or raw 16-bit mono PCM (format auto-detected), base64',
    }),
    sample_rate: Type.Optional(
      Type.Integer({ minimum: 8000, maximum: 48000, description: 'Rate of raw PCM (default 16000)' }),
    ),
    pause_after_ms: Type.Optional(PauseAfter),
  },
  { additionalProperties: false },
);

export const OfflineBundleRequest = Type.Object(
  {
    text: Type.Optional(
      Type.String({ minLength: 1, maxLength: OFFLINE_LIMITS.textChars, description: 'Shorthand for one text segment' }),
    ),
    segments: Type.Optional(
      Type.Array(Type.Union([TextSegment, AudioSegment]), {
        minItems: 1,
        maxItems: OFFLINE_LIMITS.segments,
        description: 'Spoken in order; text goes through TTS, audio is used as is (skips TTS)',
      }),
    ),
    voice: Type.Optional(
      Type.Union([Type.String({ maxLength: 200 }), Type.Null()], { description: 'Overrides the session voice' }),
    ),
    tts_provider: Type.Optional(
      Type.Union([Type.String(), Type.Null()], { description: 'Overrides the session TTS provider' }),
    ),
    tts_model: Type.Optional(
      Type.Union([Type.String({ maxLength: 200 }), Type.Null()], { description: 'Provider-specific model' }),
    ),
  },
  {
    $id: 'OfflineBundleRequest',
    additionalProperties: false,
    description: 'Exactly one of `text` or `segments`',
    examples: [
      {
        segments: [
          { text: 'Good morning, and welcome to the tour.', pause_after_ms: 400 },
          { text: 'Our first stop is the observation deck.' },
        ],
        voice: 'en-US-JennyNeural',
      },
    ],
  },
);
export type OfflineBundleRequest = Static<typeof OfflineBundleRequest>;
export type OfflineSegment = Static<typeof TextSegment> | Static<typeof AudioSegment>;

export class InvalidSegmentError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'InvalidSegmentError';
  }
}

/** The job's audio segments decode to more than `OFFLINE_LIMITS.audioMs` (a 413). */
export class SegmentsTooLongError extends Error {
  constructor(index: number) {
    super(
      `segments[${index}]: the job's audio decodes to more than ${describeDuration(OFFLINE_LIMITS.audioMs)} (segments and pauses together)`,
    );
    this.name = 'SegmentsTooLongError';
  }
}

/** The request as a list of segments, or an error message for the 400. */
export function segmentsOf(body: OfflineBundleRequest): OfflineSegment[] | string {
  if ((body.text === undefined) === (body.segments === undefined)) return 'give exactly one of `text` or `segments`';
  if (body.text !== undefined) return body.text.trim() ? [{ text: body.text, pause_after_ms: 0 }] : '`text` is blank';
  for (const [i, segment] of body.segments!.entries()) {
    if ('text' in segment && !segment.text.trim()) return `segments[${i}].text is blank`;
    if ('audio_base64' in segment && !/^[A-Za-z0-9+/\r\n]+={0,2}\s*$/.test(segment.audio_base64))
      return `segments[${i}].audio_base64 is not base64`;
  }
  return body.segments!;
}

/** A segment ready for the job: audio already decoded (so bad audio is a 400 at submit), text still to synthesize. */
export type PreparedSegment =
  | { kind: 'text'; text: string; pauseAfterMs: number }
  | { kind: 'audio'; pcm: Int16Array; pauseAfterMs: number };

/**
 * Decodes audio segments at the job sample rate, off the event loop, within the job's `OFFLINE_LIMITS.audioMs`
 * (each segment gets what the earlier ones and their pauses left). Throws `InvalidSegmentError` for audio that
 * cannot be decoded, `SegmentsTooLongError` past the bound; a busy decoder's error passes through.
 */
export async function prepareSegments(
  segments: OfflineSegment[],
  sampleRate: number,
  signal?: AbortSignal,
): Promise<PreparedSegment[]> {
  const prepared: PreparedSegment[] = [];
  let audioMs = 0;
  for (const [i, segment] of segments.entries()) {
    const pauseAfterMs = segment.pause_after_ms ?? DEFAULT_PAUSE_AFTER_MS;
    if ('text' in segment) {
      prepared.push({ kind: 'text', text: segment.text, pauseAfterMs });
      continue;
    }
    let pcm: Int16Array;
    try {
      const bytes = Buffer.from(segment.audio_base64, 'base64');
      // Client audio, like every upload: 16-bit WAV, 1-2 channels, 8-48 kHz (docs/api.md).
      ({ pcm } = await decodeAudioOffThread(bytes, {
        targetRate: sampleRate,
        rawSampleRate: segment.sample_rate,
        rules: UPLOAD_AUDIO_RULES,
        maxDurationMs: Math.max(0, OFFLINE_LIMITS.audioMs - audioMs),
        signal,
      }));
    } catch (error) {
      if (signal?.aborted) throw error;
      if (error instanceof AudioTooLongError) throw new SegmentsTooLongError(i);
      if (error instanceof InvalidAudioError) throw new InvalidSegmentError(`segments[${i}]: ${error.message}`);
      throw error;
    }
    audioMs += (pcm.length * 1000) / sampleRate + pauseAfterMs;
    prepared.push({ kind: 'audio', pcm, pauseAfterMs });
  }
  return prepared;
}

export interface ResolveOptions {
  tts: TtsProvider;
  voice: string | null;
  ttsModel: string | null;
  sampleRate: number;
  signal: AbortSignal;
  /** Segments resolved so far, as a fraction. */
  onProgress?(fraction: number): void;
}

/** Turns prepared segments into timeline pieces (TTS for text), each with its mouth track, then its pause. */
export async function resolveSegments(segments: PreparedSegment[], options: ResolveOptions): Promise<TimelinePiece[]> {
  const { sampleRate, signal } = options;
  const pieces: TimelinePiece[] = [];
  for (const [i, segment] of segments.entries()) {
    signal.throwIfAborted();
    if (segment.kind === 'text') {
      // Providers synthesise `splitSentences(text)` one by one: a chunk's `sentenceIndex` names its sentence (as live).
      const sentences = splitSentences(segment.text);
      let captioned = -1;
      for await (const chunk of options.tts.synthesize({
        text: segment.text,
        voice: options.voice,
        model: options.ttsModel,
        sampleRate,
        signal,
      })) {
        if (chunk.sampleRate !== sampleRate)
          throw new Error(`TTS returned ${chunk.sampleRate} Hz audio, expected ${sampleRate} Hz`);
        const sentence = chunk.sentenceIndex ?? 0;
        const caption =
          sentence !== captioned ? (sentences[sentence] ?? (sentence === 0 ? segment.text : undefined)) : undefined;
        captioned = sentence;
        pieces.push({ pcm: chunk.pcm, mouth: buildMouthTimeline(chunk), ...(caption ? { caption } : {}) });
      }
    } else {
      pieces.push({ pcm: segment.pcm, mouth: buildMouthTimeline({ pcm: segment.pcm, sampleRate }) });
    }
    if (segment.pauseAfterMs > 0)
      pieces.push({ pcm: new Int16Array(Math.round((segment.pauseAfterMs * sampleRate) / 1000)), mouth: null });
    options.onProgress?.((i + 1) / segments.length);
  }
  return pieces;
}
