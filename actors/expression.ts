/**
 * Facial expressions: the vocabulary, a session's cues, and the weights a frame shows. Weights are a pure
 * function of (cues, media time), so every renderer and worker that draws a frame gets the same blend for it,
 * live and offline alike, however frames are spread over workers. The media timeline puts them on the
 * `FrameRequest` (`expression`), the way it carries prosody.
 *
 * Renderers read the weights through `faceExpression`, which turns them into the few face parameters a
 * renderer can move (mouth curve and width, brow raise and brow knit). Drawn faces (`rt`, `rt_head`) draw those
 * parameters; photo and clip renderers can warp mouth corners and brows along their landmarks by the same ones.
 */

export const EXPRESSION_NAMES = ['neutral', 'smile', 'concern', 'surprise', 'emphasis'] as const;
export type ExpressionName = (typeof EXPRESSION_NAMES)[number];

export function isExpressionName(value: unknown): value is ExpressionName {
  return typeof value === 'string' && (EXPRESSION_NAMES as readonly string[]).includes(value);
}

/** Blend in and out over this long: fast enough to read as a reaction, slow enough not to pop (~300 ms). */
export const EXPRESSION_BLEND_MS = 300;
/**
 * An `emphasis` without a duration is a brow flash on a stressed word, not a held look: this long before it
 * blends out. Every other expression is held until the next cue (or its `duration_ms`).
 */
export const EMPHASIS_DEFAULT_MS = 400;
/** A cue may hold at most this long (10 min); a longer `duration_ms` is refused by the route's schema. */
export const MAX_EXPRESSION_DURATION_MS = 600_000;
/**
 * Cues a session keeps for its frames: older ones blended out long ago. Bounded so a client posting cues in a
 * loop cannot grow a session's memory; a frame only ever needs the few latest.
 */
export const MAX_EXPRESSION_CUES = 32;

/** One cue: `name` at `intensity` from `startMs` on the media clock, until the next cue or `startMs + durationMs`. */
export interface ExpressionCue {
  name: ExpressionName;
  intensity: number;
  startMs: number;
  durationMs?: number;
}

/** Weight 0..1 of each non-neutral expression at one frame (neutral is what remains). */
export interface ExpressionWeights {
  smile: number;
  concern: number;
  surprise: number;
  emphasis: number;
}

export const NEUTRAL_WEIGHTS: ExpressionWeights = Object.freeze({ smile: 0, concern: 0, surprise: 0, emphasis: 0 });

function ease(x: number): number {
  const t = Math.min(1, Math.max(0, x));
  return t * t * (3 - 2 * t);
}

function clamp01(value: number): number {
  return Number.isFinite(value) ? Math.min(1, Math.max(0, value)) : 0;
}

/** When a cue starts blending out: its own duration, or the next cue's start, whichever comes first. */
function cueEnd(cue: ExpressionCue, next: ExpressionCue | undefined): number {
  const own =
    cue.durationMs !== undefined
      ? cue.startMs + cue.durationMs
      : cue.name === 'emphasis'
        ? cue.startMs + EMPHASIS_DEFAULT_MS
        : Infinity;
  return Math.min(own, next ? next.startMs : Infinity);
}

/**
 * The weights at `ptsMs` for cues sorted by start. Each cue ramps in over `EXPRESSION_BLEND_MS` from its start
 * and out over the same from its end, so a new cue cross-fades with the one it replaces; `neutral` only ends
 * the one before it.
 */
export function expressionWeightsAt(cues: readonly ExpressionCue[], ptsMs: number): ExpressionWeights {
  const weights = { ...NEUTRAL_WEIGHTS };
  for (let index = 0; index < cues.length; index++) {
    const cue = cues[index];
    if (cue.startMs > ptsMs) break;
    if (cue.name === 'neutral') continue;
    const end = cueEnd(cue, cues[index + 1]);
    const rampIn = ease((ptsMs - cue.startMs) / EXPRESSION_BLEND_MS);
    const rampOut = 1 - ease((ptsMs - end) / EXPRESSION_BLEND_MS);
    const weight = clamp01(cue.intensity) * Math.min(rampIn, rampOut);
    if (weight > 0) weights[cue.name] = clamp01(weights[cue.name] + weight);
  }
  return weights;
}

/** True when nothing shows (every weight 0). */
export function isNeutral(weights: ExpressionWeights | undefined): boolean {
  return !weights || (weights.smile === 0 && weights.concern === 0 && weights.surprise === 0 && weights.emphasis === 0);
}

/**
 * A session's cues on its media clock: what `POST /sessions/{id}/expression` and the language model's tags add,
 * what the media timeline reads for every frame. Keeps the latest `MAX_EXPRESSION_CUES`.
 */
export class ExpressionTrack {
  private cues: ExpressionCue[] = [];

  /** Adds a cue; one starting before the latest is placed at the latest's start (the clock does not go back). */
  add(cue: ExpressionCue): ExpressionCue {
    const last = this.cues[this.cues.length - 1];
    const placed = {
      ...cue,
      intensity: clamp01(cue.intensity),
      startMs: last ? Math.max(last.startMs, cue.startMs) : cue.startMs,
    };
    this.cues.push(placed);
    if (this.cues.length > MAX_EXPRESSION_CUES) this.cues.splice(0, this.cues.length - MAX_EXPRESSION_CUES);
    return placed;
  }

  weightsAt(ptsMs: number): ExpressionWeights {
    return this.cues.length === 0 ? NEUTRAL_WEIGHTS : expressionWeightsAt(this.cues, ptsMs);
  }

  clear(): void {
    this.cues = [];
  }
}

/** What a face shows for some weights: the parameters every renderer can move. */
export interface FaceExpression {
  /** Mouth corners: +1 raised and the mouth widened (smile), negative lowered (concern). -1..1. */
  mouthCurve: number;
  /** Both brows up (surprise, emphasis). 0..1. */
  browRaise: number;
  /** Inner brow ends up and together (concern). 0..1. */
  browKnit: number;
}

export function faceExpression(weights: ExpressionWeights | undefined): FaceExpression {
  if (!weights) return { mouthCurve: 0, browRaise: 0, browKnit: 0 };
  return {
    mouthCurve: Math.max(-1, Math.min(1, weights.smile - 0.9 * weights.concern)),
    browRaise: clamp01(weights.surprise + 0.6 * weights.emphasis + 0.15 * weights.smile),
    browKnit: clamp01(weights.concern),
  };
}
