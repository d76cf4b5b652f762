/**
 * A video avatar's head on top of its loop: the loop is kept (its blinks, its breathing, its own sway), and a listening
 * nod or a thinking glance (`request.attention`, `actors/attention.ts`) is warped onto the loop frame as a photo's head
 * is (`photo-head.ts`, the same feathered ellipse around the reference face). The session's `motion` scales both that
 * and the loop's own head motion: below 1 the head of each loop frame is moved back towards where the face sits on
 * average over the loop (its face track's median anchor) by the share `1 - motion`, so at 0 the head holds still while
 * the loop's blinks and the mouth go on.
 */
import { PhotoHead, attentionHeadPose, type HeadPose } from './photo-head.ts';
import { motionScale } from './motion.ts';
import { attentionMovesHead } from '../attention.ts';
import type { FrameRequest, I420Frame, MouthAnimation, Point } from './types.ts';

/** Where a face sits: the mean of its eye centres and its mouth centre (stable under blinks and speech). */
function anchorOf(face: MouthAnimation): Point {
  return {
    x: (face.left_eye.x + face.right_eye.x + face.mouth_center.x) / 3,
    y: (face.left_eye.y + face.right_eye.y + face.mouth_center.y) / 3,
  };
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)] ?? 0;
}

export class ClipHead {
  private readonly head: PhotoHead;
  /** The face's median anchor over the loop: where `motion: 0` holds the head. */
  private readonly home: Point;

  constructor(reference: MouthAnimation, track: readonly MouthAnimation[], width: number, height: number, fps: number) {
    this.head = new PhotoHead(reference, width, height, fps);
    const anchors = (track.length > 0 ? track : [reference]).map(anchorOf);
    this.home = { x: median(anchors.map((a) => a.x)), y: median(anchors.map((a) => a.y)) };
  }

  /** The pose warped onto a loop frame whose tracked face is `face`: attention, and the loop's motion taken back by `1 - motion`. */
  pose(request: FrameRequest, face: MouthAnimation): HeadPose {
    const pose = attentionHeadPose(request.attention, request.motion, this.head.faceSize);
    const still = 1 - motionScale(request.motion);
    if (still > 0) {
      const anchor = anchorOf(face);
      pose.dx += still * (this.home.x - anchor.x);
      pose.dy += still * (this.home.y - anchor.y);
    }
    return pose;
  }

  /** Whether this request moves the loop's head at all (otherwise the loop frame is shown as it is). */
  moves(request: FrameRequest): boolean {
    return motionScale(request.motion) < 1 || attentionMovesHead(request.attention);
  }

  /** Moves the head of the finished loop frame (mouth already laid) in place. */
  apply(frame: I420Frame, request: FrameRequest, face: MouthAnimation): void {
    if (this.moves(request)) this.head.applyPose(frame, this.pose(request, face));
  }
}
