/** What the built-in engines return for one sentence, before any resampling. */
import type { PhoneTiming } from '../types.ts';

export interface EngineAudio {
  pcm: Int16Array;
  sampleRate: number;
  /** Phones covering [0, duration] of `pcm`, in ms, ARPAbet-like lower-case names (`pau` = silence). */
  phones: PhoneTiming[];
}

export type EngineName = 'flite' | 'espeak';

export interface EngineSentenceRequest {
  engine: EngineName;
  /** Engine-specific voice (flite: `slt`; espeak: `de+f2`). */
  engineVoice: string;
  text: string;
}

/**
 * Makes phones contiguous from 0 to the audio's end: gaps and the tail become `pau`, zero-length
 * entries go, and neighbouring pauses merge, so the mouth track never sees holes or overlaps.
 */
export function normalisePhones(raw: PhoneTiming[], durationMs: number): PhoneTiming[] {
  const phones: PhoneTiming[] = [];
  const push = (phone: string, startMs: number, endMs: number): void => {
    const start = Math.max(0, Math.min(startMs, durationMs));
    const end = Math.max(start, Math.min(endMs, durationMs));
    if (end - start <= 0) return;
    const last = phones[phones.length - 1];
    if (last && last.phone === 'pau' && phone === 'pau') {
      last.endMs = end;
      return;
    }
    phones.push({ phone, startMs: start, endMs: end });
  };
  let cursor = 0;
  for (const entry of [...raw].sort((a, b) => a.startMs - b.startMs)) {
    if (entry.startMs > cursor) push('pau', cursor, entry.startMs);
    const start = Math.max(entry.startMs, cursor);
    push(entry.phone, start, entry.endMs);
    cursor = Math.max(cursor, Math.min(entry.endMs, durationMs));
  }
  if (cursor < durationMs) push('pau', cursor, durationMs);
  return phones.map((phone) => ({
    phone: phone.phone,
    startMs: Math.round(phone.startMs * 10) / 10,
    endMs: Math.round(phone.endMs * 10) / 10,
  }));
}

/**
 * Silence kept before speech: enough for the first phone's onset not to click, and no more — every ms of it
 * is a ms before the listener hears the first word (it was 30; docs/performance.md, first sound).
 */
export const LEADING_SILENCE_KEEP_MS = 5;
/** Silence kept after speech: this plus the next sentence's lead (330 ms) is the pause between sentences. */
export const TRAILING_SILENCE_KEEP_MS = 325;

/**
 * Flite pads every utterance with ~200 ms of silence on each side; trimming the edge `pau` phones
 * cuts the time before the first word and the gaps between streamed sentences.
 */
export function trimEdgeSilence(audio: EngineAudio): EngineAudio {
  const { phones, sampleRate } = audio;
  if (phones.length < 2) return audio;
  const durationMs = (audio.pcm.length / sampleRate) * 1000;
  const first = phones[0];
  const last = phones[phones.length - 1];
  const cutHeadMs = first.phone === 'pau' ? Math.max(0, first.endMs - LEADING_SILENCE_KEEP_MS) : 0;
  const cutTailMs = last.phone === 'pau' ? Math.max(0, last.endMs - last.startMs - TRAILING_SILENCE_KEEP_MS) : 0;
  if (cutHeadMs === 0 && cutTailMs === 0) return audio;
  const startSample = Math.round((cutHeadMs / 1000) * sampleRate);
  const endSample = Math.max(startSample, audio.pcm.length - Math.round((cutTailMs / 1000) * sampleRate));
  const keptDurationMs = ((endSample - startSample) / sampleRate) * 1000;
  const shifted = phones.map((phone) => ({
    phone: phone.phone,
    startMs: phone.startMs - cutHeadMs,
    endMs: phone.endMs - cutHeadMs,
  }));
  return {
    pcm: audio.pcm.slice(startSample, endSample),
    sampleRate,
    phones: normalisePhones(shifted, Math.min(keptDurationMs, durationMs)),
  };
}
