/**
 * `rt_head`: the drawn avatar of `rt` plus head motion. The head nods on speech emphasis (the
 * syllable envelope rising above the phrase envelope) and tilts/bobs with phrase-level loudness;
 * a small idle drift keeps it alive when silent. Prosody comes from `request.prosody`: the session's media
 * timeline (`actors/media/timeline.ts`) carries it from frame to frame, live and offline alike. The renderer
 * keeps no prosody state of its own: one prepared renderer serves every session on its worker, so state here
 * would mix sessions and restart whenever frames arrive out of order (render-ahead re-renders). A request
 * without prosody moves like silence. While the user speaks the idle drift is held (`LISTEN_GAZE_HOLD`); the nods
 * and glances of attention are added by `DrawnRenderer` (`attentionHeadMotion`), as for `rt`.
 */
import type { FrameRequest } from '../types.ts';
import { SILENT_PROSODY, speechEmphasis } from '../prosody.ts';
import { LISTEN_GAZE_HOLD } from '../../attention.ts';
import { oscillate } from '../idle-motion.ts';
import { DrawnRenderer, type HeadMotion } from './drawn.ts';

const DEG = Math.PI / 180;
/** Limits chosen to read as natural conversational motion at 512 px: a few degrees, a few pixels. */
const IDLE_TILT_DEG = 0.8;
const IDLE_NOD_PX_AT_512 = 1.2;
const SPEECH_TILT_DEG = 4;
const SPEECH_BOB_PX_AT_512 = 3;
const EMPHASIS_NOD_PX_AT_512 = 10;

export class RtHeadRenderer extends DrawnRenderer {
  protected readonly movesHead = true;

  protected override headMotion(request: FrameRequest): HeadMotion {
    const prosody = request.prosody ?? SILENT_PROSODY;
    const scale = (this.geometry?.height ?? 512) / 512;
    const { frameIdx } = request;
    const emphasis = speechEmphasis(prosody);
    const hold = 1 - LISTEN_GAZE_HOLD * (request.attention?.listening ?? 0);
    const tilt =
      hold * IDLE_TILT_DEG * DEG * oscillate(frameIdx, this.fps, 6.3) +
      SPEECH_TILT_DEG * DEG * prosody.slow * oscillate(frameIdx, this.fps, 2.3, 0.25);
    const nod =
      scale *
      (hold * IDLE_NOD_PX_AT_512 * oscillate(frameIdx, this.fps, 4.1, 0.1) +
        SPEECH_BOB_PX_AT_512 * prosody.slow * oscillate(frameIdx, this.fps, 1.1) +
        EMPHASIS_NOD_PX_AT_512 * emphasis);
    return { tilt, nod };
  }
}
