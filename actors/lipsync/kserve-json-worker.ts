/**
 * A KServe v2 JSON inference answer read inside the JSON decode pool's worker thread (`kserve-json-pool.ts`): the
 * parse of megabytes of number text and its conversion to floats. Failures come back as values: an Error's class
 * does not survive the trip between threads.
 */
import { movedWith } from '../transferable.ts';
import { KserveError, readOutput } from './kserve-client.ts';

export interface JsonOutputTask {
  body: Uint8Array;
  name: string;
  shape: number[];
}

export type JsonOutputOutcome = { ok: true; output: Float32Array } | { ok: false; message: string };

export default function readJsonOutput(task: JsonOutputTask): JsonOutputOutcome {
  try {
    const output = readOutput(task.body, null, task.name, task.shape);
    // The floats move back to the caller's thread rather than being copied.
    return movedWith<JsonOutputOutcome>({ ok: true, output }, [output.buffer]);
  } catch (error) {
    if (error instanceof KserveError) return { ok: false, message: error.message };
    throw error;
  }
}
