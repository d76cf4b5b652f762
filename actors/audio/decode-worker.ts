/**
 * One client upload decoded inside the audio decode pool's worker thread (`decode-pool.ts`). Failures come back
 * as values: an Error's class does not survive the trip between threads, and the caller maps each kind to its own.
 */
import { movedWith } from '../transferable.ts';
import {
  AudioTooLongError,
  decodeAudioToPcm16,
  InvalidAudioError,
  type AudioFormat,
  type AudioRules,
} from './decode.ts';

export interface DecodeTask {
  bytes: Uint8Array;
  targetRate: number;
  rawSampleRate?: number;
  rules?: AudioRules;
  maxDurationMs: number;
}

export type DecodeOutcome =
  | { ok: true; pcm: Int16Array; sampleRate: number; format: AudioFormat }
  | { ok: false; kind: 'invalid' | 'too_long'; message: string };

export default async function decode(task: DecodeTask): Promise<DecodeOutcome> {
  try {
    const { bytes, ...options } = task;
    const decoded = await decodeAudioToPcm16(bytes, options);
    // The samples move back to the caller's thread rather than being copied.
    return movedWith<DecodeOutcome>({ ok: true, ...decoded }, [decoded.pcm.buffer]);
  } catch (error) {
    if (error instanceof AudioTooLongError) return { ok: false, kind: 'too_long', message: error.message };
    if (error instanceof InvalidAudioError) return { ok: false, kind: 'invalid', message: error.message };
    throw error;
  }
}
