/**
 * Admission for `POST /tts/preview`: a few previews synthesise at once, a bounded line waits behind them, and
 * the rest are refused at once (503 + Retry-After) instead of piling up work nobody bounded. Previews are
 * tooling, not conversation: they wait for each other here, and the built-in engine runs them apart from live
 * turns (actors/tts/builtin/pool.ts), so a flood of them never delays a live session's speech.
 */
import { Admission, Overloaded } from '../../actors/admission.ts';

/**
 * Previews synthesising at once. Two keep the built-in preview engine busy (each asks for its next sentence
 * while the current one is handed over) and bound the upstream calls a flood of previews makes to a cloud
 * provider; a third would only wait inside the engine instead of here.
 */
export const MAX_RUNNING_PREVIEWS = 2;
/**
 * Previews waiting for a running slot. A waiting preview holds its ≤ 1000-character text and its socket, no
 * audio; 18 behind the 2 running admit a burst of 20 (a page previewing every voice), the 21st is refused.
 */
export const MAX_WAITING_PREVIEWS = 18;
/** Retry-After of a full line: a 1000-character preview takes a few seconds, so a slot frees within this. */
export const PREVIEW_RETRY_AFTER_S = 5;

export function previewsBusy(): Overloaded {
  return new Overloaded(
    `${MAX_RUNNING_PREVIEWS + MAX_WAITING_PREVIEWS} previews are already running or waiting; try again shortly`,
    PREVIEW_RETRY_AFTER_S,
  );
}

/** What `POST /tts/preview` waits in (routes reach the primitive through this module). */
export type PreviewAdmission = Admission;

/** The previews' admission: `MAX_RUNNING_PREVIEWS` synthesise, `MAX_WAITING_PREVIEWS` wait, the rest get `previewsBusy`. */
export function previewAdmission(
  maxRunning = MAX_RUNNING_PREVIEWS,
  maxWaiting = MAX_WAITING_PREVIEWS,
): PreviewAdmission {
  return new Admission({ maxRunning, maxWaiting, refusal: previewsBusy });
}
