import { fromCallback } from 'xstate';
import type { MediaActorEvent } from '../../machines/session.machine.ts';
import { stageErrorOf } from './errors.ts';
import type { StageContext } from './stage.ts';

/**
 * The session's media for the machine: FLUSH empties the playout; a renderer failure becomes STAGE.ERROR
 * (recoverable while the media reopens the renderer, fatal once it gave up: spec 6.1 rule 5).
 */
export function createMediaActor(ctx: StageContext) {
  return fromCallback<MediaActorEvent, { sessionId: string }>(({ receive, sendBack }) => {
    receive((event) => {
      if (event.type === 'FLUSH') {
        ctx.media.flush();
        sendBack({ type: 'MEDIA.FLUSHED' });
      }
    });
    const stopWatching = ctx.media.onFailure((error) => {
      const { code, message, fatal } = stageErrorOf('render', error);
      sendBack({ type: 'STAGE.ERROR', code, message, fatal });
    });
    // Stopping does not close the media: the session's close cascade does (src/sessions/session-close.ts).
    return stopWatching;
  });
}
