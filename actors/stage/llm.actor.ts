import { fromCallback } from 'xstate';
import type { LlmActorEvent, LlmInput } from '../../machines/session.machine.ts';
import { EagerSentenceStream } from '../tts/sentences.ts';
import { ExpressionTagFilter, type ExpressionTag, type TagFilterPiece } from '../llm/expression-tags.ts';
import { TurnFiller } from '../llm/filler.ts';
import { heardReply, type QueuedSegment } from '../llm/heard.ts';
import { runToolRound } from '../llm/tool-round.ts';
import { showReplyExpression } from './reply-expression.ts';
import type { ChatMessage, LlmToolCall } from '../llm/types.ts';
import { runStage, type StageContext } from './stage.ts';

/**
 * Rounds of tool calls one chat turn may make: ask, run the calls, ask again. Two or three are normal (look
 * something up, then act on it); a model still calling tools after this is looping, and every round costs the user
 * waiting time. Past it the model is asked once more without tools, so the turn ends with words.
 */
export const MAX_TOOL_ROUNDS_PER_TURN = 4;

/**
 * Stands where a tag stood in the text the sentence splitter reads (never in what is spoken, shown or kept): a
 * private-use character no model writes, neither space nor punctuation, so it moves no sentence boundary.
 */
const TAG_MARK = '\uE000';

/**
 * A chat turn's language model: streams deltas (SSE `llm`), cuts sentences into LLM.SEGMENT, and lives as
 * long as the turn so that it commits the history once the turn ends (TURN.END, sent by the machine before
 * it stops this actor): the whole reply when its audio played to the end, otherwise what the listener
 * heard, marked interrupted.
 *
 * With tools (`ctx.tools`), a round the model answers with tool calls is followed by another: the assistant
 * message with its calls and one `tool` message per call go on the request (`tool-round.ts` runs the calls), text
 * before and after is spoken as it streams. The history keeps the user's prompt and the spoken reply only.
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
      else ctx.history.commit(prompt, heardReply(queued, ctx.media.playedMsOf(turn)), { interrupted: true });
    };
    receive((event) => {
      if (event.type === 'TTS.QUEUED')
        queued.push({ text: event.text, durationMs: event.durationMs, ...(event.filler ? { filler: true } : {}) });
      if (event.type === 'TURN.END') commit(event.completed);
    });
    // The turn's one filler sentence (thinking or tools, `filler.ts`), spoken and captioned but not the model's words.
    const filler = new TurnFiller((text) => sendBack({ type: 'LLM.SEGMENT', text, filler: true }));
    const stop = runStage(ctx, 'llm', sendBack, async (signal) => {
      if (ctx.thinkingFillerText) filler.whileThinking(ctx.thinkingFillerText, ctx.media.answerAwaitedMs() ?? 0);
      const splitter = new EagerSentenceStream();
      // Expression tags (`[smile]`) leave the text here, before the reply, SSE `llm`, TTS and the history see it. Each
      // leaves a mark where it stood in the text the sentence splitter reads, so it goes with the sentence it was
      // written in and is shown as that sentence starts to play (the tts actor places it), however far the model's
      // stream runs ahead of the audio.
      const tags = new ExpressionTagFilter();
      const marked: ExpressionTag[] = [];
      const speak = (sentences: string[]) => {
        for (const sentence of sentences) {
          const count = sentence.split(TAG_MARK).length - 1;
          const expressions = marked.splice(0, count);
          const text = sentence.replaceAll(TAG_MARK, '').trim();
          if (text) {
            filler.replyStarted();
            sendBack({ type: 'LLM.SEGMENT', text, ...(expressions.length > 0 ? { expressions } : {}) });
          }
          // Tags with no words after them: shown once the speech queued before them has played.
          else for (const tag of expressions) showReplyExpression(ctx, tag);
        }
      };
      /** The text of some filter pieces (what is spoken and shown), and the same with a mark for each tag. */
      const take = (pieces: TagFilterPiece[]): { text: string; withMarks: string } => {
        let text = '';
        let withMarks = '';
        for (const piece of pieces) {
          if ('text' in piece) {
            text += piece.text;
            withMarks += piece.text;
          } else {
            marked.push(piece.tag);
            withMarks += TAG_MARK;
          }
        }
        return { text, withMarks };
      };
      try {
        ctx.history.systemPrompt = input.systemPrompt || null;
        const messages: ChatMessage[] = ctx.history.messagesFor(prompt);
        const tools = ctx.tools?.definitions() ?? [];
        for (let round = 0; ; round++) {
          let calls: LlmToolCall[] = [];
          let roundText = '';
          const offered = tools.length > 0 && round < MAX_TOOL_ROUNDS_PER_TURN ? tools : undefined;
          for await (const raw of ctx.llm.stream({
            messages,
            signal,
            tools: offered,
            onToolCalls: (made) => (calls = made),
          })) {
            turn.accepted?.resolve();
            if (!raw) continue;
            ctx.metrics.mark(turn.id, 'llm_first_token_ms');
            const { text: delta, withMarks } = take(tags.push(raw));
            if (delta) {
              reply += delta;
              roundText += delta;
              ctx.events.publish('llm', { delta });
            }
            if (withMarks) speak(splitter.push(withMarks));
          }
          turn.accepted?.resolve();
          // A round ends the text it streamed: whatever a `[` held back was not a tag.
          const { text: held, withMarks } = take(tags.flush());
          if (held) {
            reply += held;
            roundText += held;
            ctx.events.publish('llm', { delta: held });
          }
          if (withMarks) speak(splitter.push(withMarks));
          if (calls.length === 0 || !ctx.tools) break;
          // What the model said before calling is spoken while the tools run.
          speak(splitter.flush());
          if (reply && !/\s$/u.test(reply)) reply += ' ';
          messages.push({ role: 'assistant', content: roundText, tool_calls: calls });
          const outputs = await runToolRound(ctx.tools, turn.id, calls, signal, () =>
            filler.toolsSlow(ctx.tools?.fillerText ?? null),
          );
          calls.forEach((call, index) =>
            messages.push({ role: 'tool', tool_call_id: call.id, content: outputs[index] }),
          );
        }
        speak(splitter.flush());
        // A tag whose mark the splitter let go unspoken (text it drops, such as a trailing "?!"): shown all the same.
        for (const tag of marked.splice(0)) showReplyExpression(ctx, tag);
        return { type: 'LLM.DONE' };
      } catch (error) {
        if (!signal.aborted) failed = true;
        turn.accepted?.reject(error);
        throw error;
      } finally {
        // The model has said all it will (or failed): a filler now would only come after its last words.
        filler.cancel();
      }
    });
    return () => {
      filler.cancel();
      stop();
      // Without TURN.END (the actor stopped outright) the turn did not play to its end.
      commit(false);
      turn.accepted?.reject(new DOMException('chat stopped before the language model answered', 'AbortError'));
    };
  });
}
