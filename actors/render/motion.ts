/**
 * The session's `motion` option (0..1, `FrameRequest.motion`) as every renderer reads it: the factor on idle sway,
 * breathing, nods and the head's attention; blinks and the mouth never take it.
 */

/** A request's `motion` as a factor 0..1 (absent: 1). */
export function motionScale(motion: number | undefined): number {
  return motion === undefined || !Number.isFinite(motion) ? 1 : Math.min(1, Math.max(0, motion));
}
