/** One sentence through the right engine, edge silence trimmed, resampled to the caller's rate. */
import { resamplePcm16 } from '../../audio/resample.ts';
import { trimEdgeSilence, type EngineAudio, type EngineSentenceRequest } from './engine.ts';
import { loadEspeak, synthesizeWithEspeak } from './espeak.ts';
import { synthesizeWithFlite, warmUpFlite } from './flite.ts';

export interface SentenceTask extends EngineSentenceRequest {
  /** Sample rate the caller wants back. */
  sampleRate: number;
}

export async function synthesizeSentence(task: SentenceTask): Promise<EngineAudio> {
  const raw =
    task.engine === 'flite'
      ? await synthesizeWithFlite(task.engineVoice, task.text)
      : await synthesizeWithEspeak(task.engineVoice, task.text);
  const trimmed = trimEdgeSilence(raw);
  if (trimmed.sampleRate === task.sampleRate) return trimmed;
  return {
    pcm: await resamplePcm16(trimmed.pcm, trimmed.sampleRate, task.sampleRate),
    sampleRate: task.sampleRate,
    phones: trimmed.phones,
  };
}

/** Compiles both engines and instantiates flite's first instance, so the first real sentence pays for neither. */
export async function warmUpEngines(): Promise<void> {
  await Promise.all([warmUpFlite(), loadEspeak()]);
}
