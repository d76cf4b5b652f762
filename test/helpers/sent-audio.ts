/**
 * The audio as the service sends it: the playout's 'audio' emissions, one per `AUDIO_CHUNK_MS` chunk, each with its
 * presentation time on the media clock and its RMS, in the shape a receiving peer records (`ReceivedAudio`), so the
 * same readers (`rmsAround`) work on both. Read here, not at a receiver, whatever the host's speed: a receiver's
 * jitter buffer on a starved host stretches and conceals audio (docs/performance.md).
 */
import type { PlayoutClock } from '../../actors/media/playout.ts';
import { rms } from './mp4.ts';
import type { ReceivedAudio } from './peer.ts';

export interface SentAudio {
  /** Every chunk sent since the recording began, in order. */
  readonly chunks: readonly ReceivedAudio[];
  stop(): void;
}

export function recordSentAudioChunks(playout: PlayoutClock): SentAudio {
  const chunks: ReceivedAudio[] = [];
  const onAudio = (samples: Int16Array, sampleRate: number, mediaMs: number) =>
    chunks.push({ at: mediaMs, rms: rms(samples), sampleRate });
  playout.on('audio', onAudio);
  return { chunks, stop: () => playout.off('audio', onAudio) };
}
