import type { SegmentExpression } from '../llm/types.ts';
import type { StageContext } from './stage.ts';

/**
 * Shows an expression tag of the reply from the end of the speech queued so far, and publishes it (SSE
 * `expression`, which the transcript records with the turn). Called by the tts actor just before a segment's first
 * audio is queued, so the cue starts with that segment; by the llm actor for a tag with no words after it.
 */
export function showReplyExpression(ctx: StageContext, tag: SegmentExpression): void {
  const cue = ctx.media.express({ name: tag.name, intensity: tag.intensity }, 'after-queued');
  ctx.events.publish('expression', {
    name: cue.name,
    intensity: cue.intensity,
    duration_ms: null,
    start_ms: Math.round(cue.startMs),
    source: 'llm',
  });
}
