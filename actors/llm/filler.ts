/**
 * A chat turn's filler sentence, said at most once per turn: either while the model thinks (the thinking filler,
 * `SERVICE_THINKING_FILLER_TEXT`: no sentence of the reply has gone to speech `THINKING_FILLER_DELAY_MS` after the
 * answer began to be awaited) or while a round of tools runs (the tool filler, `ToolRunner.fillerText`, after
 * `TOOL_FILLER_DELAY_MS`), never both. It is heard (spoken and captioned) but is not the model's words: the segment
 * carries `filler`, so neither the history nor the transcript takes its text.
 */

/**
 * The thinking filler waits this long from the end of the user's turn or the chat request. Longer than the thinking
 * cue's `THINK_DELAY_MS` (400 ms): a hosted model's first token commonly takes 0.3–0.8 s, and a filler said then
 * would come before nearly every answer and hold it back by its own length; a pause past ~1 s is one a listener
 * notices. The same wait as the tool filler's.
 */
export const THINKING_FILLER_DELAY_MS = 1_000;

export class TurnFiller {
  private said = false;
  private replying = false;
  private timer: ReturnType<typeof setTimeout> | null = null;

  constructor(private readonly say: (text: string) => void) {}

  /**
   * Says `text` (null: nothing) once the answer will have been awaited `THINKING_FILLER_DELAY_MS`, given it has been
   * awaited `awaitedMs` already (a voice turn's recognition counts), unless the reply starts to be spoken first.
   */
  whileThinking(text: string | null, awaitedMs: number): void {
    if (!text || this.said || this.replying) return;
    this.cancel();
    this.timer = setTimeout(
      () => {
        this.timer = null;
        if (!this.replying) this.sayOnce(text);
      },
      Math.max(0, THINKING_FILLER_DELAY_MS - awaitedMs),
    );
  }

  /** A sentence of the reply went to speech: no thinking filler after it (it would be heard after the answer began). */
  replyStarted(): void {
    this.replying = true;
    this.cancel();
  }

  /** Tools still running after `TOOL_FILLER_DELAY_MS`: the tool filler `text`, unless a filler was said this turn. */
  toolsSlow(text: string | null): void {
    if (text) this.sayOnce(text);
  }

  /** The turn's model is done or stopped. Idempotent. */
  cancel(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
  }

  private sayOnce(text: string): void {
    if (this.said) return;
    this.said = true;
    this.cancel();
    this.say(text);
  }
}
