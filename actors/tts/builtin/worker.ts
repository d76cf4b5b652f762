/**
 * Piscina worker: the engines run synchronously for tens to hundreds of ms per sentence (and over a
 * second to load), which must not stall the event loop that paces audio and video. Engines are
 * cached per worker thread.
 */
import { synthesizeSentence, warmUpEngines, type SentenceTask } from './synthesize-sentence.ts';
import type { EngineAudio } from './engine.ts';

export type WorkerTask = ({ kind: 'sentence' } & SentenceTask) | { kind: 'warm-up' };

export default async function runTask(task: WorkerTask): Promise<EngineAudio | null> {
  if (task.kind === 'warm-up') {
    await warmUpEngines();
    return null;
  }
  return synthesizeSentence(task);
}
