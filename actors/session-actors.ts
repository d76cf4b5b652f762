/**
 * A session's stage actors wired together (`actors/stage/<stage>.actor.ts`), by the names the machine gives them.
 */
import { createAsrActor } from './stage/asr.actor.ts';
import { createLlmActor } from './stage/llm.actor.ts';
import { createMediaActor } from './stage/media.actor.ts';
import type { StageContext } from './stage/stage.ts';
import { createTtsActor } from './stage/tts.actor.ts';

export type { StageContext } from './stage/stage.ts';

/**
 * The real child actors of one session, by the names the machine's `setup({ actors })` gives them;
 * `Session` plugs them in with `sessionMachine.provide({ actors })`.
 */
export function createStageActors(ctx: StageContext) {
  return { media: createMediaActor(ctx), tts: createTtsActor(ctx), llm: createLlmActor(ctx), asr: createAsrActor(ctx) };
}
