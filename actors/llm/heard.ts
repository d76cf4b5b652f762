/** A reply segment as the tts actor queued it for playout: its text and how long its audio plays. */
export interface QueuedSegment {
  text: string;
  durationMs: number;
  /** A filler sentence the service said while the model thought or tools ran (`filler.ts`): heard, not the model's words. */
  filler?: boolean;
}

/**
 * What the listener heard of a chat reply cut short: the text of every segment whose audio had started
 * playing by `playedMs` (ms of the turn's audio played, as the media clock reports it). A segment cut in
 * the middle counts, so the model knows it began saying it; text still waiting for synthesis was never heard. A filler
 * sentence takes its time in the turn's audio but is not the reply: its text is left out.
 */
export function heardReply(queued: readonly QueuedSegment[], playedMs: number): string {
  const heard: string[] = [];
  let startMs = 0;
  for (const segment of queued) {
    if (startMs >= playedMs) break;
    if (!segment.filler) heard.push(segment.text);
    startMs += segment.durationMs;
  }
  return heard.join(' ');
}
