/**
 * Turns whatever an upstream sends (WAV, MP3, raw little-endian PCM16) into 16-bit mono PCM at the
 * rate the caller asked for, via the shared `actors/audio` decoder; undecodable audio from an
 * upstream is the upstream's fault, so it becomes `UpstreamError`.
 */
import { decodeAudioToPcm16, InvalidAudioError } from '../../audio/decode.ts';
import { resamplePcm16 } from '../../audio/resample.ts';
import { isWav, pcm16FromLittleEndian } from '../../audio/wav.ts';
import type { TtsChunk, TtsRequest } from '../types.ts';
import { UpstreamError } from '../../upstream/errors.ts';
import { sentencesOf } from './common.ts';

/** A whole sentence of audio as one chunk at `targetRate`. Without `rawSampleRate` only containers are accepted. */
export async function toChunk(
  bytes: Uint8Array,
  options: { targetRate: number; rawSampleRate?: number; sentenceIndex: number; provider: string },
): Promise<TtsChunk> {
  try {
    const decoded = await decodeAudioToPcm16(bytes, {
      targetRate: options.targetRate,
      rawSampleRate: options.rawSampleRate,
    });
    if (decoded.format === 'pcm' && !options.rawSampleRate) {
      throw new UpstreamError(`${options.provider}: upstream sent audio in an unexpected format (expected WAV)`);
    }
    return { pcm: decoded.pcm, sampleRate: options.targetRate, sentenceIndex: options.sentenceIndex };
  } catch (error) {
    if (error instanceof InvalidAudioError)
      throw new UpstreamError(`${options.provider}: upstream audio is unusable: ${error.message}`);
    throw error;
  }
}

export { isWav };

/**
 * Re-chunks a raw PCM16 byte stream into whole samples. When the upstream rate equals the wanted
 * rate, chunks pass through as they arrive (lowest latency); otherwise the sentence is gathered and
 * resampled once, because resampling fragments independently clicks at every seam.
 */
export async function* rawPcmStreamToChunks(
  body: AsyncIterable<Buffer>,
  options: { upstreamRate: number; targetRate: number; sentenceIndex: number; provider: string },
): AsyncGenerator<TtsChunk> {
  let carry = Buffer.alloc(0);
  const gathered: Buffer[] = [];
  let total = 0;
  for await (const piece of body) {
    const bytes = carry.length ? Buffer.concat([carry, piece]) : piece;
    const whole = bytes.length - (bytes.length % 2);
    carry = Buffer.from(bytes.subarray(whole));
    if (whole === 0) continue;
    total += whole;
    if (options.upstreamRate === options.targetRate) {
      yield {
        pcm: pcm16FromLittleEndian(bytes.subarray(0, whole)),
        sampleRate: options.targetRate,
        sentenceIndex: options.sentenceIndex,
      };
    } else {
      gathered.push(Buffer.from(bytes.subarray(0, whole)));
    }
  }
  if (total === 0) throw new UpstreamError(`${options.provider}: upstream sent no audio`);
  if (gathered.length) {
    const pcm = await resamplePcm16(
      pcm16FromLittleEndian(Buffer.concat(gathered)),
      options.upstreamRate,
      options.targetRate,
    );
    yield { pcm, sampleRate: options.targetRate, sentenceIndex: options.sentenceIndex };
  }
}

/**
 * The loop every raw-PCM streaming provider shares: one upstream call per sentence, the caller's
 * signal re-checked before each so an interrupted turn never starts another request, and the
 * answer re-chunked at the wanted rate.
 */
export async function* rawPcmBySentence(
  request: TtsRequest,
  options: { upstreamRate: number; provider: string },
  audioOfSentence: (sentence: string) => Promise<AsyncIterable<Buffer>> | AsyncIterable<Buffer>,
): AsyncGenerator<TtsChunk> {
  const sentences = sentencesOf(request.text);
  for (let index = 0; index < sentences.length; index++) {
    request.signal.throwIfAborted();
    yield* rawPcmStreamToChunks(await audioOfSentence(sentences[index]), {
      upstreamRate: options.upstreamRate,
      targetRate: request.sampleRate,
      sentenceIndex: index,
      provider: options.provider,
    });
  }
}
