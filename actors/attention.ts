/**
 * What the avatar does between its own words: it listens while the user speaks and thinks while the answer is on its
 * way. A session's attention cues (`AttentionTrack`) sit on its media clock like its expression cues, and the pose a
 * frame shows (`attentionPoseAt`) is a pure function of (cues, media time): every worker rendering a frame, live or
 * offline, and a future client-side renderer get the same head for it. The media timeline puts the pose on the
 * `FrameRequest` (`attention`), beside `expression`.
 *
 * - Listening, from the VAD's speech start to the end of the user's turn: the gaze held (renderers damp their idle
 *   drift by `listening`), the brows slightly raised (`LISTEN_BROW_RAISE`, added to the frame's expression weights
 *   by the timeline, so every renderer's brows show it) and a small nod at each of the user's pauses (a VAD dip of
 *   `PAUSE_MIN_MS`–`PAUSE_MAX_MS`). The mouth is left alone: the user is the one speaking.
 * - Thinking, from the end of the user's turn or a chat request until the first audio: after `THINK_DELAY_MS` without
 *   audio, a glance aside or up and a slight head tilt, released as speech starts.
 *
 * Renderers turn the pose into pixels in their head layer (`photo-head.ts`, the clip's head warp, `rt_head`, `rt`),
 * scaled by the session's `motion` like every other head motion; at `motion: 0` nothing here moves the head.
 */

/** Listening blends in and out over this long: a person settles into attending, it does not snap. */
export const LISTEN_BLEND_MS = 300;
/** One nod, down and back up: a short acknowledgement ("mm-hm"), not a bow. */
export const NOD_MS = 600;
/** Shortest and longest VAD dip inside a user's turn that is a pause worth a nod (shorter: a gap between words). */
export const PAUSE_MIN_MS = 150;
export const PAUSE_MAX_MS = 400;
/** Thinking shows only once this long has passed without audio: a quick answer needs no thinking face. */
export const THINK_DELAY_MS = 400;
/** A glance goes aside over this long, and comes back over `THINK_RELEASE_MS` when speech starts. */
export const THINK_BLEND_MS = 400;
export const THINK_RELEASE_MS = 250;
/** How far listening raises the brows, as an `emphasis` weight (`faceExpression`): slightly, not a surprise. */
export const LISTEN_BROW_RAISE = 0.35;
/** How much listening holds the gaze: the idle drift is damped by this share at full listening. */
export const LISTEN_GAZE_HOLD = 0.7;
/**
 * Spans and nods a session keeps for its frames: the older ones ended long ago. Bounded so a long conversation (or a
 * microphone flickering in and out) cannot grow a session's memory; a frame only needs the latest few.
 */
export const MAX_ATTENTION_CUES = 32;

/** A listening or thinking span on the media clock; `endMs` Infinity while it lasts. */
interface AttentionSpan {
  startMs: number;
  endMs: number;
}

/** The attention a frame shows; every field 0 is none. Renderers scale the head motion by `motion`. */
export interface AttentionPose {
  /** Listening weight 0..1: gaze held (idle drift damped by `LISTEN_GAZE_HOLD` × this). */
  listening: number;
  /** A nod at the user's pause, 0..1: the head dips by the renderer's nod amplitude times this. */
  nod: number;
  /** Thinking: where the head turns, each -1..1 scaled by the thinking weight — `lookX` aside (+ right on screen), `lookY` up (− up). */
  lookX: number;
  lookY: number;
  /** Thinking's head tilt, -1..1 (+ clockwise on screen), scaled by the thinking weight. */
  tilt: number;
}

export const NO_ATTENTION: AttentionPose = Object.freeze({ listening: 0, nod: 0, lookX: 0, lookY: 0, tilt: 0 });

/**
 * The glances thinking chooses between (the cue's start picks one): aside either way, up either way. The head tilts
 * towards the side it looks to, so on screen the tilt about the neck carries the face further the same way.
 */
const GLANCES: ReadonlyArray<{ x: number; y: number; tilt: number }> = [
  { x: -1, y: -0.35, tilt: -1 },
  { x: 1, y: -0.35, tilt: 1 },
  { x: -0.45, y: -1, tilt: -0.7 },
  { x: 0.45, y: -1, tilt: 0.7 },
];

function ease(x: number): number {
  const t = Math.min(1, Math.max(0, x));
  return t * t * (3 - 2 * t);
}

/** Small integer hash → [0, 1): which glance a thinking cue shows (the same for every frame and worker). */
function hash01(value: number): number {
  let h = (value | 0) ^ 0x2545f491;
  h = Math.imul(h ^ (h >>> 16), 0x85ebca6b);
  h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35);
  h ^= h >>> 16;
  return (h >>> 0) / 4294967296;
}

/** A span's weight at `ms`: in over `blendIn` from its start, out over `blendOut` from its end. */
function spanWeight(span: AttentionSpan, ms: number, blendIn: number, blendOut: number): number {
  if (ms < span.startMs || span.endMs <= span.startMs) return 0;
  return Math.min(ease((ms - span.startMs) / blendIn), 1 - ease((ms - span.endMs) / blendOut));
}

/** A nod's depth `ms` after it began: down and back up over `NOD_MS` (a raised cosine), 0 outside. */
function nodDepth(sinceMs: number): number {
  if (sinceMs <= 0 || sinceMs >= NOD_MS) return 0;
  return 0.5 - 0.5 * Math.cos((2 * Math.PI * sinceMs) / NOD_MS);
}

export interface AttentionCues {
  listening: readonly AttentionSpan[];
  nods: readonly number[];
  thinking: readonly AttentionSpan[];
}

/** The pose at `ptsMs` for a session's cues (each list sorted by start). Pure. */
export function attentionPoseAt(cues: AttentionCues, ptsMs: number): AttentionPose {
  let listening = 0;
  for (const span of cues.listening)
    listening = Math.max(listening, spanWeight(span, ptsMs, LISTEN_BLEND_MS, LISTEN_BLEND_MS));
  let nod = 0;
  for (const start of cues.nods) nod = Math.max(nod, nodDepth(ptsMs - start));
  let lookX = 0;
  let lookY = 0;
  let tilt = 0;
  for (const span of cues.thinking) {
    const weight = spanWeight(span, ptsMs, THINK_BLEND_MS, THINK_RELEASE_MS);
    if (weight <= 0) continue;
    const glance = GLANCES[Math.floor(hash01(Math.round(span.startMs)) * GLANCES.length)];
    lookX = glance.x * weight;
    lookY = glance.y * weight;
    tilt = glance.tilt * weight;
  }
  return { listening, nod, lookX, lookY, tilt };
}

/** True when the pose shows nothing. */
export function isInattentive(pose: AttentionPose | undefined): boolean {
  return !pose || (pose.listening === 0 && pose.nod === 0 && pose.lookX === 0 && pose.lookY === 0 && pose.tilt === 0);
}

/** True when the pose moves the head (a nod or a glance); listening alone only damps the drift. */
export function attentionMovesHead(pose: AttentionPose | undefined): boolean {
  return !!pose && (pose.nod !== 0 || pose.lookX !== 0 || pose.lookY !== 0 || pose.tilt !== 0);
}

/**
 * A session's attention cues on its media clock: what the voice input (listening, pauses) and the turns (thinking)
 * add, what the media timeline reads for every frame. Times only go forward: a cue placed before the latest of its
 * kind starts there. Each list keeps the latest `MAX_ATTENTION_CUES`.
 */
export class AttentionTrack {
  private readonly listening: AttentionSpan[] = [];
  private readonly nods: number[] = [];
  private readonly thinking: AttentionSpan[] = [];
  /** Where the answer now awaited began to be awaited (the `think` call's ms); null while none is. */
  private awaitedFrom: number | null = null;

  /** The user started speaking at `ms`: listening from then until `stopListening`. Already listening: no change. */
  listen(ms: number): void {
    if (this.listening.at(-1)?.endMs === Infinity) return;
    push(this.listening, { startMs: Math.max(ms, this.listening.at(-1)?.endMs ?? ms), endMs: Infinity });
  }

  /** The user's turn ended (or the microphone went) at `ms`. */
  stopListening(ms: number): void {
    const open = this.listening.at(-1);
    if (open?.endMs === Infinity) open.endMs = Math.max(open.startMs, ms);
  }

  /** A pause in the user's speech at `ms`: a nod from then (one already nodding carries on). */
  nod(ms: number): void {
    const last = this.nods.at(-1);
    if (last !== undefined && ms < last + NOD_MS) return;
    push(this.nods, ms);
  }

  /**
   * Waiting for an answer from `ms` on: thinking shows from `ms + THINK_DELAY_MS` until `stopThinking`. Already
   * waiting: no change. Returns when the thinking cue starts.
   */
  think(ms: number): number {
    const open = this.thinking.at(-1);
    if (open?.endMs === Infinity) return open.startMs;
    const startMs = Math.max(ms + THINK_DELAY_MS, open?.endMs ?? 0);
    push(this.thinking, { startMs, endMs: Infinity });
    this.awaitedFrom = ms;
    return startMs;
  }

  /**
   * Speech starts (or the turn ended without any) at `ms`: thinking is released there. A cue that had not started by
   * then never shows. Returns whether a waiting or showing cue was ended.
   */
  stopThinking(ms: number): boolean {
    const open = this.thinking.at(-1);
    if (open?.endMs !== Infinity) return false;
    this.awaitedFrom = null;
    if (ms <= open.startMs) this.thinking.pop();
    else open.endMs = ms;
    return true;
  }

  /** Whether an answer is being waited for (a thinking cue is open). */
  get waiting(): boolean {
    return this.thinking.at(-1)?.endMs === Infinity;
  }

  /** Ms at which the answer now awaited began to be awaited (the end of the user's turn, a chat request); null: none is. */
  get awaitedFromMs(): number | null {
    return this.waiting ? this.awaitedFrom : null;
  }

  poseAt(ptsMs: number): AttentionPose {
    if (this.listening.length === 0 && this.nods.length === 0 && this.thinking.length === 0) return NO_ATTENTION;
    return attentionPoseAt({ listening: this.listening, nods: this.nods, thinking: this.thinking }, ptsMs);
  }

  /** The cues as they stand (a copy), e.g. for a client-side renderer or a test. */
  cues(): AttentionCues {
    return {
      listening: this.listening.map((span) => ({ ...span })),
      nods: [...this.nods],
      thinking: this.thinking.map((span) => ({ ...span })),
    };
  }
}

function push<T>(list: T[], item: T): void {
  list.push(item);
  if (list.length > MAX_ATTENTION_CUES) list.splice(0, list.length - MAX_ATTENTION_CUES);
}
