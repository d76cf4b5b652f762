/**
 * The frame timeline: where each video frame sits on the audio sample counter, what the mouth does under
 * it and the head's prosody carried from frame to frame. Live playout (`actors/media/playout.ts`) and
 * offline MP4 rendering (`src/recording/offline-render.ts`) both build their frame requests here, so the
 * same audio gives the same frames either way.
 *
 * Prosody is stepped from the last *committed* frame (one that left the clock, or was written) through
 * every frame up to the one asked for. Asking again for a frame (a render-ahead re-render after more audio
 * arrived) therefore gives the same continuous envelope instead of starting over.
 */
import { CLOSED_MOUTH, type FrameAudio, type FrameRequest, type MouthPose, type Prosody } from '../render/types.ts';
import { SILENT_PROSODY, stepProsody } from '../render/prosody.ts';
import { ExpressionTrack, isNeutral } from '../expression.ts';
import { AttentionTrack, isInattentive, LISTEN_BROW_RAISE } from '../attention.ts';
import type { PlayoutTurn } from './turn-playout.ts';

export interface MouthSource {
  durationMs: number;
  poseAt(ms: number): MouthPose;
  levelAt(ms: number): number;
}

/** A stretch of audio on the timeline, in samples; `mouth` null is a pause (silence, mouth at rest). */
export interface TimelineSpan {
  start: number;
  end: number;
  /** The turn whose speech this is (null: not a turn's, e.g. an offline job's). */
  turn: PlayoutTurn | null;
  mouth: MouthSource | null;
  /** The audio itself (the live clock gives it: renderers that read audio around their frames and channel audio read it). */
  pcm?: Int16Array;
}

/** Audio a renderer wants around each frame's presentation time (neural lip-sync reads a mel window there). */
export interface AudioWindow {
  leadMs: number;
  lagMs: number;
}

/** A frame request plus the turn whose speech it shows (null while idle). */
export type TimedFrameRequest = FrameRequest & { turn: PlayoutTurn | null };

/**
 * Frames further than this past the last committed one take their prosody from a fresh start a little
 * before them: after ~3 s without speech both envelopes have decayed to nothing anyway, and a bound keeps a
 * lookup cheap whatever the gap.
 */
const MAX_PROSODY_STEPS_SECONDS = 3;

/**
 * A frame shows the mouth of the audio this long after its presentation time. A person's mouth leads its sound (lips
 * and jaw move 0–150 ms before the acoustic event they shape), and a frame stands for its whole 40 ms, while a pose
 * taken at its start, held through the frame and smoothed by the track's attack, reached a Chromium viewer ~80 ms
 * after its sound (issue 44: astronaut r 0.43, lag +80 ms). Looking this far ahead costs nothing: the audio is
 * already queued when frames render (TTS and uploads run up to `PLAYOUT_HIGH_WATER_MS` ahead), and audio that
 * arrives later re-renders the frames that now look into it (`readsAheadSamples`). Measured at a Chromium page with
 * `<avatar-chat>`: `npm run bench -- mouth_sync_browser` (docs/performance.md).
 */
export const MOUTH_LOOKAHEAD_MS = 80;

/** Presentation time of a frame, in samples of the audio timeline. */
export function frameStartSample(frameIdx: number, sampleRate: number, fps: number): number {
  return Math.round((frameIdx * sampleRate) / fps);
}

/** How many frames cover `samples` of audio (at least one). */
export function framesCovering(samples: number, sampleRate: number, fps: number): number {
  return Math.max(1, Math.ceil((samples * fps) / sampleRate));
}

export class FrameTimeline {
  /** Ascending, non-overlapping. */
  private spans: TimelineSpan[] = [];
  private committedIdx = -1;
  private committedProsody: Prosody = SILENT_PROSODY;
  private audioLead = 0;
  private audioLag = 0;
  private readonly mouthLookahead: number;
  /** The session's expression cues; every frame's request carries their weights at its presentation time. */
  readonly expressions = new ExpressionTrack();
  /** The session's listening and thinking cues; every frame's request carries their pose at its presentation time. */
  readonly attention = new AttentionTrack();
  /** The session's `motion` (0..1): put on every request below 1, so renderers scale sway, breathing and nods. */
  motion = 1;

  constructor(
    readonly sampleRate: number,
    readonly fps: number,
  ) {
    this.mouthLookahead = Math.round((MOUTH_LOOKAHEAD_MS * sampleRate) / 1000);
  }

  /** Sample just past the last span (0 when empty). */
  get endSample(): number {
    return this.spans.at(-1)?.end ?? 0;
  }

  frameStart(frameIdx: number): number {
    return frameStartSample(frameIdx, this.sampleRate, this.fps);
  }

  /** How far past a frame's presentation time its request depends on audio: its audio window or its mouth's lookahead. */
  get readsAheadSamples(): number {
    return Math.max(this.audioLag, this.mouthLookahead);
  }

  /** From now on requests carry the audio around their frame (null: none, the default). */
  setAudioWindow(window: AudioWindow | null | undefined): void {
    this.audioLead = window ? Math.ceil((window.leadMs * this.sampleRate) / 1000) : 0;
    this.audioLag = window ? Math.ceil((window.lagMs * this.sampleRate) / 1000) : 0;
  }

  /**
   * Places `samples` of audio right after the previous span, but not before `notBefore` (the live clock's position).
   * `pcm` is the audio itself, for requests that carry audio.
   */
  append(
    samples: number,
    mouth: MouthSource | null,
    turn: PlayoutTurn | null,
    notBefore = 0,
    pcm?: Int16Array,
  ): TimelineSpan {
    const start = Math.max(this.endSample, notBefore);
    const span: TimelineSpan = { start, end: start + samples, turn, mouth };
    if (pcm && pcm.length === samples) span.pcm = pcm;
    if (samples > 0) this.spans.push(span);
    return span;
  }

  /** Forgets audio that has played (spans ending at or before `sample`). */
  forgetBefore(sample: number): void {
    let drop = 0;
    while (drop < this.spans.length && this.spans[drop].end <= sample) drop++;
    if (drop > 0) this.spans.splice(0, drop);
  }

  /** Forgets all audio (barge-in); committed prosody stays, so the head settles rather than jumps. */
  clear(): void {
    this.spans = [];
  }

  /** What the frame shows: mouth and level of the audio at its presentation time, prosody up to it. */
  requestFor(frameIdx: number): TimedFrameRequest {
    const pts = this.frameStart(frameIdx);
    const under = this.underFrame(frameIdx);
    const ptsMs = (pts * 1000) / this.sampleRate;
    const request: TimedFrameRequest = { frameIdx, ptsMs, ...under, prosody: this.prosodyAt(frameIdx) };
    let expression = this.expressions.weightsAt(ptsMs);
    const attention = this.attention.poseAt(ptsMs);
    if (!isInattentive(attention)) {
      request.attention = attention;
      // Listening raises the brows a little: as a brow-only `emphasis`, so every renderer's brows show it.
      const raise = LISTEN_BROW_RAISE * attention.listening;
      if (raise > expression.emphasis) expression = { ...expression, emphasis: raise };
    }
    if (!isNeutral(expression)) request.expression = expression;
    if (this.motion < 1) request.motion = this.motion;
    if (this.audioLead + this.audioLag > 0) {
      const audio = this.audioAround(pts);
      if (audio) request.audio = audio;
    }
    return request;
  }

  /** The audio from `lead` before to `lag` after `pts`, zeros where nothing plays; undefined when no speech is in it. */
  private audioAround(pts: number): FrameAudio | undefined {
    const pcm = this.speechBetween(pts - this.audioLead, pts + this.audioLag);
    return pcm ? { sampleRate: this.sampleRate, pcm, leadSamples: this.audioLead } : undefined;
  }

  /**
   * The speech on the timeline from sample `from` to `to` (a fresh array), zeros where none plays; null when no
   * speech overlaps. Spans that played out are forgotten (`forgetBefore`), so only audio not yet fully played is there.
   */
  speechBetween(from: number, to: number): Int16Array | null {
    let pcm: Int16Array | null = null;
    for (const span of this.spans) {
      if (span.end <= from) continue;
      if (span.start >= to) break;
      if (!span.pcm || !span.mouth) continue;
      pcm ??= new Int16Array(to - from);
      const a = Math.max(from, span.start);
      const b = Math.min(to, span.end);
      pcm.set(span.pcm.subarray(a - span.start, b - span.start), a - from);
    }
    return pcm;
  }

  /** The frame left with this request; prosody of later frames continues from it. Frames commit in order. */
  commit(request: FrameRequest): void {
    if (request.frameIdx <= this.committedIdx) return;
    this.committedIdx = request.frameIdx;
    this.committedProsody = request.prosody ?? this.prosodyAt(request.frameIdx);
  }

  /**
   * The sound under the frame (level, speaking, turn) at its presentation time; its mouth `MOUTH_LOOKAHEAD_MS` later,
   * so it opens before a syllable it shapes and closes before the sound ends.
   */
  private underFrame(frameIdx: number): {
    mouth: MouthPose;
    level: number;
    speaking: boolean;
    turn: PlayoutTurn | null;
  } {
    const pts = this.frameStart(frameIdx);
    const mouth = this.mouthAt(pts + this.mouthLookahead);
    const span = this.spanAt(pts);
    if (!span?.mouth) return { mouth, level: 0, speaking: false, turn: span?.turn ?? null };
    const ms = ((pts - span.start) * 1000) / this.sampleRate;
    return { mouth, level: span.mouth.levelAt(ms), speaking: true, turn: span.turn };
  }

  private mouthAt(sample: number): MouthPose {
    const span = this.spanAt(sample);
    if (!span?.mouth) return CLOSED_MOUTH;
    return span.mouth.poseAt(((sample - span.start) * 1000) / this.sampleRate);
  }

  private prosodyAt(frameIdx: number): Prosody {
    if (frameIdx <= this.committedIdx) return this.committedProsody;
    const maxSteps = Math.max(1, Math.round(this.fps * MAX_PROSODY_STEPS_SECONDS));
    let idx = this.committedIdx;
    let prosody = this.committedProsody;
    if (frameIdx - idx > maxSteps) {
      idx = frameIdx - maxSteps;
      prosody = SILENT_PROSODY;
    }
    while (idx < frameIdx) {
      idx++;
      prosody = stepProsody(prosody, this.underFrame(idx).level, 1, this.fps);
    }
    return prosody;
  }

  /** The span holding timeline sample `sample`, by binary search. */
  private spanAt(sample: number): TimelineSpan | undefined {
    let lo = 0;
    let hi = this.spans.length - 1;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      const span = this.spans[mid];
      if (sample < span.start) hi = mid - 1;
      else if (sample >= span.end) lo = mid + 1;
      else return span;
    }
    return undefined;
  }
}
