/**
 * Deterministic idle behaviour shared by the renderers: blink schedule and slow sway/breathing
 * phases are pure functions of (frameIdx, fps), so the same frame index always renders the same
 * pixels (workers, retries and offline rendering agree).
 */

/** Blinks start once per slot at a hashed offset: consecutive blinks are 3..6 s apart. */
const BLINK_SLOT_SECONDS = 4.5;
const BLINK_JITTER_SECONDS = 1.5;
/** A natural blink (close + open) lasts 150–250 ms. */
const BLINK_DURATION_SECONDS = 0.2;

/** Small integer hash -> [0, 1). */
export function hash01(value: number): number {
  let h = (value | 0) ^ 0x9e3779b9;
  h = Math.imul(h ^ (h >>> 16), 0x85ebca6b);
  h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35);
  h ^= h >>> 16;
  return (h >>> 0) / 4294967296;
}

/** Eyelid closure 0 (open) .. 1 (shut) at this frame. */
export function blinkClosure(frameIdx: number, fps: number): number {
  const t = frameIdx / fps;
  const slot = Math.floor(t / BLINK_SLOT_SECONDS);
  // The first slot starts late so a fresh session does not open with a blink.
  const start = slot * BLINK_SLOT_SECONDS + BLINK_JITTER_SECONDS * hash01(slot) + (slot === 0 ? 2 : 0);
  const phase = (t - start) / BLINK_DURATION_SECONDS;
  if (phase < 0 || phase >= 1) return 0;
  if (phase < 0.4) return phase / 0.4;
  if (phase < 0.6) return 1;
  return (1 - phase) / 0.4;
}

/** Slow sinusoid in -1..1 with the given period; `phase` in cycles. */
export function oscillate(frameIdx: number, fps: number, periodSeconds: number, phase = 0): number {
  return Math.sin(2 * Math.PI * (frameIdx / fps / periodSeconds + phase));
}

export function quantise(value: number, steps: number): number {
  const clamped = Number.isFinite(value) ? Math.min(1, Math.max(0, value)) : 0;
  return Math.round(clamped * (steps - 1));
}

export function smoothstep(edge0: number, edge1: number, x: number): number {
  const t = Math.min(1, Math.max(0, (x - edge0) / (edge1 - edge0)));
  return t * t * (3 - 2 * t);
}
