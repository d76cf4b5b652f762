import { fromCallback } from 'xstate';
import type { StageContext } from './stage.ts';

/** The session's media for the machine: FLUSH empties the playout; stopping the actor closes the media. */
export function createMediaActor(ctx: StageContext) {
  return fromCallback<{ type: string }, { sessionId: string }>(({ receive, sendBack }) => {
    receive((event) => {
      if (event.type === 'FLUSH') {
        ctx.media.flush();
        sendBack({ type: 'MEDIA.FLUSHED' });
      }
    });
    return () => ctx.media.close();
  });
}
