/** A reply segment as the tts actor queued it for playout: its text and how long its audio plays. */
export interface QueuedSegment {
  text: string;
  durationMs: number;
}

/**
 * What the listener heard of a chat reply cut short, given how much of the turn's audio had played: the
 * text of every segment whose audio had started (one cut in the middle counts: the model should know it
 * began saying it). `playedMs` null means the media could not tell; then the whole reply streamed so far
 * is kept, since forgetting what was said misleads the model more than remembering a little too much.
 */
export function heardReply(reply: string, queued: readonly QueuedSegment[], playedMs: number | null): string {
  if (playedMs === null) return reply;
  const heard: string[] = [];
  let startMs = 0;
  for (const segment of queued) {
    if (startMs >= playedMs) break;
    heard.push(segment.text);
    startMs += segment.durationMs;
  }
  return heard.join(' ');
}
