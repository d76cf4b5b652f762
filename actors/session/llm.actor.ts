import { fromCallback } from 'xstate';
import type { StageInput } from '../../machines/session.machine.ts';
import { EagerSentenceStream } from '../tts/sentences.ts';
import { runStage, type StageContext } from './stage.ts';

/** A chat turn's language model: streams deltas (SSE `llm`), cuts sentences into LLM.SEGMENT, commits the history. */
export function createLlmActor(ctx: StageContext) {
  return fromCallback<{ type: string }, StageInput & { systemPrompt: string }>(({ input, sendBack }) =>
    runStage(ctx, 'llm', sendBack, async (signal) => {
      const prompt = input.turn.text ?? '';
      const accepted = ctx.chatAccepted.get(input.turn.id);
      const splitter = new EagerSentenceStream();
      let reply = '';
      try {
        ctx.history.systemPrompt = input.systemPrompt || null;
        const messages = ctx.history.messagesFor(prompt);
        for await (const delta of ctx.llm.stream({ messages, signal })) {
          accepted?.resolve();
          if (!delta) continue;
          ctx.metrics.mark(input.turn.id, 'llm_first_token_ms');
          reply += delta;
          ctx.events.publish('llm', { delta });
          for (const sentence of splitter.push(delta)) sendBack({ type: 'LLM.SEGMENT', text: sentence });
        }
        accepted?.resolve();
        for (const sentence of splitter.flush()) sendBack({ type: 'LLM.SEGMENT', text: sentence });
        ctx.history.commit(prompt, reply, { interrupted: false });
        return { type: 'LLM.DONE' };
      } catch (error) {
        accepted?.reject(error);
        if (signal.aborted && reply) ctx.history.commit(prompt, reply, { interrupted: true });
        throw error;
      } finally {
        ctx.chatAccepted.delete(input.turn.id);
      }
    }),
  );
}
