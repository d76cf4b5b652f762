/**
 * `rt`: real-time renderer for drawn avatars. The face comes from `manifest.metadata.face`
 * (see `../drawn-face.ts`); mouth shapes follow the pose, eyes blink, the figure breathes.
 */
import { DrawnRenderer } from './drawn.ts';

export class RtRenderer extends DrawnRenderer {
  protected readonly movesHead = false;
}
