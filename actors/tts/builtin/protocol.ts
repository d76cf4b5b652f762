/**
 * The IPC messages between the service and a built-in engine process (`engine-process.ts`). Sent with
 * `serialization: 'advanced'`, so the PCM crosses as an Int16Array without base64 or JSON arrays.
 */
import type { EngineAudio } from './engine.ts';
import type { SentenceTask } from './synthesize-sentence.ts';

/** Service → engine: one sentence; the engine answers every id exactly once. */
export interface SentenceMessage {
  type: 'sentence';
  id: number;
  task: SentenceTask;
}

/** Engine → service. `ready` once both engines are compiled; nothing is sent to an engine before it. */
export type EngineMessage =
  | { type: 'ready' }
  | { type: 'start-failed'; message: string }
  | { type: 'result'; id: number; audio: EngineAudio }
  | { type: 'failed'; id: number; message: string };

/** Absolute POSIX/Windows paths and file URLs (engine and fs errors quote them; clients must never see them). */
const PATH_PATTERN = /(?:file:\/\/\S*|[A-Za-z]:\\\S*|(?<![\w.])\/(?:[^\s/'"`:,;)]+\/?)+)/gu;

/** An error's text with every filesystem path replaced, safe for a 502 `detail` and a log line. */
export function pathFreeMessage(error: unknown): string {
  const text = error instanceof Error ? error.message : String(error);
  return text.replace(PATH_PATTERN, '<path>');
}
