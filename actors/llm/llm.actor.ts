import { fromCallback } from 'xstate';
import type { LlmActorEvent, LlmInput } from '../../machines/session.machine.ts';
import { EagerSentenceStream } from '../tts/sentences.ts';
import { heardReply, type QueuedSegment } from './heard.ts';
import { runStage, type StageContext } from '../stage/stage.ts';

/**
 * A chat turn's language model: streams deltas (SSE `llm`), cuts sentences into LLM.SEGMENT, and lives as
 * long as the turn so that it commits the history once the turn ends (TURN.END, sent by the machine before
 * it stops this actor): the whole reply when its audio played to the end, otherwise what the listener
 * heard, marked interrupted.
 */
export function createLlmActor(ctx: StageContext) {
  return fromCallback<LlmActorEvent, LlmInput>(({ input, receive, sendBack }) => {
    const { turn } = input;
    const prompt = turn.text ?? '';
    const queued: QueuedSegment[] = [];
    let reply = '';
    let failed = false;
    let committed = false;
    const commit = (completed: boolean): void => {
      // A failed stream or one cut before its first token leaves the history as it was.
      if (committed || failed || !reply) return;
      committed = true;
      if (completed) ctx.history.commit(prompt, reply, { interrupted: false });
      else ctx.history.commit(prompt, heardReply(queued, ctx.media.playedMsOf(turn.id)), { interrupted: true });
    };
    receive((event) => {
      if (event.type === 'TTS.QUEUED') queued.push({ text: event.text, durationMs: event.durationMs });
      if (event.type === 'TURN.END') commit(event.completed);
    });
    const stop = runStage(ctx, 'llm', sendBack, async (signal) => {
      const splitter = new EagerSentenceStream();
      try {
        ctx.history.systemPrompt = input.systemPrompt || null;
        const messages = ctx.history.messagesFor(prompt);
        for await (const delta of ctx.llm.stream({ messages, signal })) {
          turn.accepted?.resolve();
          if (!delta) continue;
          ctx.metrics.mark(turn.id, 'llm_first_token_ms');
          reply += delta;
          ctx.events.publish('llm', { delta });
          for (const sentence of splitter.push(delta)) sendBack({ type: 'LLM.SEGMENT', text: sentence });
        }
        turn.accepted?.resolve();
        for (const sentence of splitter.flush()) sendBack({ type: 'LLM.SEGMENT', text: sentence });
        return { type: 'LLM.DONE' };
      } catch (error) {
        if (!signal.aborted) failed = true;
        turn.accepted?.reject(error);
        throw error;
      }
    });
    return () => {
      stop();
      // Without TURN.END (the actor stopped outright) the turn did not play to its end.
      commit(false);
      turn.accepted?.reject(new DOMException('chat stopped before the language model answered', 'AbortError'));
    };
  });
}
