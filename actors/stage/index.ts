import { createAsrActor } from '../asr/asr.actor.ts';
import { createLlmActor } from '../llm/llm.actor.ts';
import { createMediaActor } from '../media/media.actor.ts';
import type { StageContext } from './stage.ts';
import { createTtsActor } from '../tts/tts.actor.ts';

export type { StageContext } from './stage.ts';

/**
 * The real child actors of one session, by the names the machine's `setup({ actors })` gives them;
 * `Session` plugs them in with `sessionMachine.provide({ actors })`.
 */
export function createStageActors(ctx: StageContext) {
  return { media: createMediaActor(ctx), tts: createTtsActor(ctx), llm: createLlmActor(ctx), asr: createAsrActor(ctx) };
}
