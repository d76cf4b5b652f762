/**
 * The session's media clock: the one owner of media timing. It decides when every audio chunk and video
 * frame leaves, renders frames ahead, holds video behind audio for the wire, carries the head's prosody
 * from frame to frame, and flushes all of it at once on barge-in. Frame times, mouth poses and prosody
 * come from `FrameTimeline` (`./timeline.ts`), the same code offline rendering uses.
 */
import { EventEmitter } from 'node:events';
import type { PlayoutTurn, TurnPlayout, TurnSegment } from './turn-playout.ts';
import { CLOSED_MOUTH, type FrameRequest, type I420Frame } from '../render/types.ts';
import { releaseFrame, retainFrame } from '../render/frame-buffers.ts';
import { FrameTimeline, type AudioWindow, type MouthSource, type TimedFrameRequest } from './timeline.ts';
import type { ExpressionCue } from '../expression.ts';
import { onClockTick } from './clock-ticks.ts';

/**
 * What the session tells the clock about attention (`actors/attention.ts`): the user started or stopped speaking,
 * paused (a nod), or an answer is awaited (thinking, shown after `THINK_DELAY_MS` without audio) or ended without one.
 */
export type AttentionCue = 'listen' | 'stop-listening' | 'nod' | 'think' | 'stop-thinking';

/** An expression to show: the cue without its place on the clock, which the clock decides. */
export type ExpressionRequest = Omit<ExpressionCue, 'startMs'>;

export type { MouthSource } from './timeline.ts';

/** WebRTC audio sources take exactly 10 ms of PCM per call. */
export const AUDIO_CHUNK_MS = 10;
/** Frames rendered ahead of the clock: enough to hide worker latency, small enough that an interrupt shows within ~2 frames. */
const RENDER_AHEAD_FRAMES = 2;
/** Upper bound on a renderer's own render-ahead (`FrameRenderer.renderAhead`): 1 s of frames at 25 fps in flight per session. */
const MAX_RENDER_AHEAD_FRAMES = 25;
/** Above this much queued speech, `waitForRoom` blocks producers (WebSocket back-pressure, TTS pacing). */
export const PLAYOUT_HIGH_WATER_MS = 2_000;
/** If the machine stalls longer than this (GC pause, suspended laptop), restart the timeline instead of bursting. */
const MAX_CATCH_UP_MS = 500;
/**
 * How long video is held back behind audio on the wire. A browser plays a frame with the audio captured when the
 * frame was, and wrtc stamps a frame as it is handed over, this long after its presentation time: at a Chromium page
 * the mouth shows this much minus the timeline's mouth lookahead (`MOUTH_LOOKAHEAD_MS`, 80) after its sound, so 60
 * puts it ~20 ms ahead, as a person's mouth leads its voice (measured: `npm run bench -- mouth_sync_browser`,
 * docs/performance.md, "Every frame sent"). 120 was measured for receivers that show frames as they arrive (the audio
 * path, 10 ms chunks → 20 ms Opus frames → jitter buffer, is that much longer than the video's); Chromium showed
 * frames that way only for streams that skipped repeated frames, which none does in a viewer's first seconds or
 * while it speaks now (`FrameSendPolicy`, `actors/media/frame-send-policy.ts`). Configurable with
 * SERVICE_VIDEO_DELAY_MS.
 */
export const DEFAULT_VIDEO_DELAY_MS = 60;
/**
 * How long after a captioned segment's speech onset leaves the clock its `caption` is emitted: the time that audio
 * takes to be heard at a viewer (10 ms chunks → 20 ms Opus frames → network → the receiver's jitter buffer). Not the
 * video hold (`videoDelayMs`, then 120 ms): that also covered VP8 encoding and the video jitter buffer, and a caption
 * waiting for it arrived 50–85 ms after its sound at a quiet wrtc viewer (docs/performance.md, "Captions"), which puts the
 * audio path at ~45 ms.
 */
export const DEFAULT_CAPTION_DELAY_MS = 50;
/**
 * A captioned segment starts to be heard at its first sample this loud (≈ −30 dBFS): synthesised sentences open with
 * 10–90 ms of near-silence, and a caption timed on their first sample ran that much ahead of the words.
 */
export const CAPTION_ONSET_LEVEL = 1_000;

/** Index of the first sample of `pcm` at `CAPTION_ONSET_LEVEL` or louder (where speech starts to be heard); -1 if none. */
export function speechOnset(pcm: Int16Array): number {
  return pcm.findIndex((sample) => sample >= CAPTION_ONSET_LEVEL || sample <= -CAPTION_ONSET_LEVEL);
}
export interface FrameRenderer {
  readonly width: number;
  readonly height: number;
  readonly fps: number;
  /** Audio this renderer needs around each frame (`FrameRequest.audio`); none by default. */
  readonly audioWindow?: AudioWindow;
  /**
   * How far ahead of the clock this renderer wants its frames asked for, and in bursts of how many (asked in
   * one tick, so a batching backend runs them together). Default `RENDER_AHEAD_FRAMES`, bursts of one.
   */
  readonly renderAhead?: { frames: number; burst: number };
  render(requests: FrameRequest[], signal?: AbortSignal): Promise<I420Frame[]>;
  /**
   * A renderer with a backend it can fall back from (the neural lip-sync renderer) reports the backend's health to
   * `watcher` until the returned stop is called; renderers without one leave this out.
   */
  watchBackend?(watcher: RenderBackendWatcher): () => void;
}

/** What a renderer with a fallback tells about its backend (`FrameRenderer.watchBackend`). */
export interface RenderBackendWatcher {
  /** The backend failed; speech renders on the fallback until it recovers. */
  failed(error: unknown): void;
  /** The backend answered again after failing. */
  recovered(): void;
  /** The backend could not take some frames; they render on the fallback. Once per streak. */
  overloaded(error: unknown): void;
}

export interface PlayoutOptions {
  /**
   * How long a frame is held after its presentation time before it goes to the WebRTC output (`videoOut`),
   * so it reaches viewers with its audio (`DEFAULT_VIDEO_DELAY_MS`). Part of the clock's
   * schedule: a flush replaces held speech frames with idle ones.
   */
  videoDelayMs?: number;
  /** How long after its speech onset leaves a segment's caption is emitted (default `DEFAULT_CAPTION_DELAY_MS`). */
  captionDelayMs?: number;
}

interface QueuedAudio {
  turn: PlayoutTurn;
  pcm: Int16Array;
  /** Next sample of `pcm` to play. */
  offset: number;
}

interface RenderedFrame {
  request: TimedFrameRequest;
  frame: Promise<I420Frame | null>;
}

/** A frame past its presentation time, waiting for its moment on the wire. */
interface OutgoingFrame {
  frameIdx: number;
  ptsMs: number;
  /** Clock sample at which it goes to the output. */
  dueSample: number;
  request: TimedFrameRequest;
  frame: Promise<I420Frame | null>;
  /** Bumped when a flush replaces `frame`; delivery waits for the latest. */
  version: number;
  released: boolean;
}

/** A played segment of a turn's audio, in ms from the turn's first enqueued sample. */
export interface PlayedSegment {
  segment: number;
  startMs: number;
  endMs: number;
}

/** A segment's text as it starts to be heard (the clock's `caption` event). */
export interface CaptionCue {
  turnId: string;
  text: string;
  /** Ms from the turn's first sample (= first enqueued sample) to the segment's speech onset (`CAPTION_ONSET_LEVEL`). */
  startMs: number;
  /** Ms from the turn's first sample to the end of the segment's audio queued when the cue is due. */
  endMs: number;
  /** The segment's speech onset on the session's media clock (`mediaMs`), ms: where recordings place it. */
  clockMs: number;
}

/** A cue waiting for its moment (`captionDelayMs` after its audio left). */
interface PendingCue {
  dueSample: number;
  turn: PlayoutTurn;
  segment: TurnSegment;
  /** Where the segment starts to be heard, samples from the turn's first. */
  onset: number;
}

export interface TurnPlayback {
  /** Audio of the turn handed to the clock. */
  enqueuedMs: number;
  /** Audio of the turn that left for WebRTC; what the listener heard, ~80 ms of network and jitter buffer aside. */
  playedMs: number;
  /** Tagged stretches of the turn's audio (e.g. one per synthesised sentence), in enqueue order. */
  segments: PlayedSegment[];
}

export interface PlayoutEvents {
  /**
   * A 10 ms chunk leaves for WebRTC (and taps). `samples` is rewritten for the next chunk: copy what you keep
   * (wrtc, the recorder and the echo guard all do).
   */
  audio: [samples: Int16Array, sampleRate: number, mediaMs: number];
  /** A frame at its presentation time, with the audio chunk containing it (recording, sync measurements). */
  video: [frame: I420Frame, frameIdx: number, mediaMs: number];
  /** A frame handed to the WebRTC output, `videoDelayMs` after its presentation time. */
  videoOut: [frame: I420Frame, frameIdx: number, mediaMs: number];
  /** A frame showing a turn's speech (SSE `frame`): pts relative to the turn's first sample. */
  frame: [info: { turnId: string; frameIdx: number; ptsMs: number }];
  turnStarted: [turnId: string];
  /**
   * A captioned segment (`enqueue`'s `caption`) starts to be heard: emitted `captionDelayMs` after its first sample
   * left, because that is when viewers hear it. Start and end are ms from the turn's
   * first sample; the end is that of the segment's audio queued so far. A segment flushed before it started never
   * gets one; one that started is captioned even if a flush follows within the delay (its start was heard).
   */
  caption: [cue: CaptionCue];
  late: [lateMs: number];
  /**
   * The renderer failed a frame. With a listener the clock stops calling that renderer (frames are skipped:
   * viewers keep the last one) until `useRenderer` gives it a new one; without one, failed frames are just skipped.
   */
  renderFailed: [error: unknown];
  /**
   * Frame requests already handed to the renderer became void: from frame `fromFrameIdx` on (new audio, a changed
   * expression or motion: they are asked for again), or every one not yet on the wire (null: a flush). A consumer of
   * requests that outlive the render call (the pose channel of a client-rendered session) forgets them.
   */
  framesVoid: [fromFrameIdx: number | null];
  /**
   * A 'video' or 'videoOut' listener threw. The frame chains go on without it (a rejected chain would stop
   * video for good and keep every later frame's buffer), and the frame's references are released as usual.
   */
  tapFailed: [error: unknown];
}

/**
 * One media clock per session. Audio leaves in 10 ms chunks and video frames at their presentation time, both
 * from the same sample counter, so they cannot drift apart. When nothing is queued the avatar keeps rendering
 * idle frames (blink, breathing) and audio is silence.
 */
export class PlayoutClock extends EventEmitter<PlayoutEvents> {
  readonly chunkSamples: number;
  readonly fps: number;
  private readonly timeline: FrameTimeline;
  private readonly videoDelaySamples: number;
  private readonly captionDelaySamples: number;
  private readonly queue: QueuedAudio[] = [];
  /**
   * The turns the clock was handed that have not settled (audio queued, or more may come): a flush ends them all.
   * Each turn's record is on the turn itself (`TurnPlayout`); a settled turn leaves this set and the clock forgets it.
   */
  private readonly unsettled = new Set<PlayoutTurn>();
  private renderer: FrameRenderer | null;
  private renderAheadFrames = RENDER_AHEAD_FRAMES;
  private renderAheadBurst = 1;
  /** Tells a late failure of a replaced renderer from one of the current renderer. */
  private rendererGeneration = 0;
  private playedSamples = 0;
  /**
   * Captions of segments that started, waiting out `captionDelayMs`: at most one per segment started within that
   * delay (a few), since a cue is queued only as its segment's audio leaves.
   */
  private readonly pendingCues: PendingCue[] = [];
  private frameIdx = 0;
  private startedAt = 0;
  /** Stops this clock's ticks (`onClockTick`: one timer for every clock of the process); null until started. */
  private stopTicking: (() => void) | null = null;
  private closed = false;
  /** Frames rendered ahead, by index, with the request they were rendered from. */
  private readonly rendered = new Map<number, RenderedFrame>();
  /** Frames past their presentation time, in index order, until they are on the wire. */
  private outgoing: OutgoingFrame[] = [];
  /** Frames leave strictly in index order even when workers finish out of order. */
  private sendChain: Promise<void> = Promise.resolve();
  private readonly audioChunk: Int16Array;
  private wireChain: Promise<void> = Promise.resolve();
  private roomWaiters: Array<() => void> = [];
  private queuedSamples = 0;
  /** Frames that left later than one frame period after their presentation time. */
  lateFrames = 0;
  sentFrames = 0;

  constructor(
    renderer: FrameRenderer,
    readonly sampleRate: number,
    options: PlayoutOptions = {},
  ) {
    super();
    this.renderer = renderer;
    this.fps = renderer.fps;
    this.chunkSamples = (sampleRate * AUDIO_CHUNK_MS) / 1000;
    this.audioChunk = new Int16Array(this.chunkSamples);
    this.timeline = new FrameTimeline(sampleRate, renderer.fps);
    this.adoptNeeds(renderer);
    this.videoDelaySamples = Math.max(0, Math.round(((options.videoDelayMs ?? 0) * sampleRate) / 1000));
    const captionDelayMs = options.captionDelayMs ?? DEFAULT_CAPTION_DELAY_MS;
    this.captionDelaySamples = Math.max(0, Math.round((captionDelayMs * sampleRate) / 1000));
  }

  get mediaMs(): number {
    return (this.playedSamples * 1000) / this.sampleRate;
  }

  get queuedMs(): number {
    return (this.queuedSamples * 1000) / this.sampleRate;
  }

  /**
   * The speech queued on this clock from sample `from` to `to` (samples of `mediaMs` at `sampleRate`), read-only: zeros
   * where none plays, null when no queued speech overlaps. `complete`: the queued audio reaches `to` (speech enqueued
   * later can only land after it). For consumers that send audio ahead of the clock (a client-rendered session's channel
   * audio, `src/sessions/pose-channel.ts`); what leaves when stays this clock's.
   */
  queuedAudio(from: number, to: number): { pcm: Int16Array; complete: boolean } | null {
    const pcm = this.timeline.speechBetween(from, to);
    return pcm && { pcm, complete: to <= this.timeline.endSample };
  }

  get videoDelayMs(): number {
    return (this.videoDelaySamples * 1000) / this.sampleRate;
  }

  /** False while the renderer is suspended after a failure (see `renderFailed`). */
  get rendering(): boolean {
    return this.renderer !== null;
  }

  start(): void {
    if (this.stopTicking || this.closed) return;
    this.startedAt = performance.now();
    this.playedSamples = 0;
    this.stopTicking = onClockTick(() => this.tick());
  }

  /**
   * Queues speech for a turn; the mouth source is indexed in ms from the start of this PCM. `segment` tags the
   * audio (e.g. the index of the sentence it speaks) for `playbackOf`. Returns where this audio starts within
   * the turn's audio, in ms. Audio for a turn that ended or was flushed is dropped. `caption`, given with a
   * segment's first audio, is the text the segment speaks: the clock emits it (`caption`) as it starts to be heard.
   */
  enqueue(playoutTurn: PlayoutTurn, pcm: Int16Array, mouth: MouthSource, segment?: number, caption?: string): number {
    const turn = this.track(playoutTurn);
    const startMs = (turn.enqueuedSamples * 1000) / this.sampleRate;
    if (this.closed || pcm.length === 0 || turn.ended) return startMs;
    const span = this.timeline.append(pcm.length, mouth, playoutTurn, this.playedSamples, pcm);
    // Speech starts: a thinking cue waiting for it is released where it begins (not shown at all if not yet started).
    if (this.timeline.attention.stopThinking((span.start * 1000) / this.sampleRate))
      this.invalidateRenderedFrom(Math.min(span.start, this.playedSamples));
    this.tagSegment(turn, segment ?? turn.segments.at(-1)?.segment ?? 0, pcm, caption);
    turn.enqueuedSamples += pcm.length;
    turn.pendingSamples += pcm.length;
    this.queuedSamples += pcm.length;
    const startsOnSilence = this.queue.length === 0;
    this.queue.push({ turn: playoutTurn, pcm, offset: 0 });
    // Frames rendered ahead before this audio arrived showed silence from its start on (or, for a renderer that
    // reads audio after its frames and for a mouth that looks ahead, from that much earlier); earlier ones stand.
    this.invalidateRenderedFrom(span.start - this.timeline.readsAheadSamples);
    // Speech after silence: its first chunk is due already (the clock sends a chunk as its span begins), so it
    // leaves now rather than at the next tick — up to CLOCK_TICK_MS off the time to first sound.
    if (startsOnSilence && this.stopTicking) this.tick();
    return startMs;
  }

  /** Scales the avatar's motion besides blinks and the mouth (0..1); frames rendered ahead are rendered again. */
  setMotion(motion: number): void {
    this.timeline.motion = Math.min(1, Math.max(0, motion));
    this.invalidateRenderedFrom(this.playedSamples);
  }

  /**
   * Shows an expression from now on (`at: 'now'`, the API), or from the end of the speech already queued
   * (`'after-queued'`, a language model's tag: it goes with the words after it). Frames rendered ahead from then on
   * are rendered again. Returns the cue as placed on the media clock.
   */
  express(expression: ExpressionRequest, at: 'now' | 'after-queued'): ExpressionCue {
    const from = at === 'now' ? this.playedSamples : Math.max(this.playedSamples, this.timeline.endSample);
    const cue = this.timeline.expressions.add({ ...expression, startMs: (from * 1000) / this.sampleRate });
    this.invalidateRenderedFrom(Math.round((cue.startMs * this.sampleRate) / 1000));
    return cue;
  }

  /**
   * An attention cue from now on (`AttentionCue`); frames rendered ahead from then on are rendered again. Thinking waits
   * for the speech already queued: an answer already playing needs no thinking face.
   */
  attend(cue: AttentionCue): void {
    const nowMs = (this.playedSamples * 1000) / this.sampleRate;
    const track = this.timeline.attention;
    if (cue === 'listen') track.listen(nowMs);
    else if (cue === 'stop-listening') track.stopListening(nowMs);
    else if (cue === 'nod') track.nod(nowMs);
    else if (cue === 'stop-thinking') track.stopThinking(nowMs);
    else if (this.timeline.endSample <= this.playedSamples) track.think(nowMs);
    this.invalidateRenderedFrom(this.playedSamples);
  }

  /**
   * How long the answer now awaited has been awaited on this clock, ms: since the end of the user's turn or the chat
   * request (the `think` cue), until its first audio. Null when none is (no cue, or speech was playing when it came).
   */
  answerAwaitedMs(): number | null {
    const from = this.timeline.attention.awaitedFromMs;
    return from === null ? null : Math.max(0, (this.playedSamples * 1000) / this.sampleRate - from);
  }

  /** Marks that no more audio will come for the turn; `whenDrained` resolves once it has all played. */
  endTurn(playoutTurn: PlayoutTurn): void {
    const turn = this.track(playoutTurn);
    turn.ended = true;
    this.settleTurn(playoutTurn);
  }

  whenDrained(playoutTurn: PlayoutTurn): Promise<void> {
    const turn = this.track(playoutTurn);
    return new Promise((resolve) => {
      turn.drained.push(resolve);
      this.settleTurn(playoutTurn);
    });
  }

  /** How much of a turn's audio has played (0 for a turn the clock was never handed). */
  playedMsOf(turn: PlayoutTurn): number {
    return (turn.playout.playedSamples * 1000) / this.sampleRate;
  }

  /** What of a turn was enqueued and played, with its tagged segments. */
  playbackOf({ playout: turn }: PlayoutTurn): TurnPlayback {
    const ms = (samples: number) => (samples * 1000) / this.sampleRate;
    return {
      enqueuedMs: ms(turn.enqueuedSamples),
      playedMs: ms(turn.playedSamples),
      segments: turn.segments.map((s) => ({ segment: s.segment, startMs: ms(s.start), endMs: ms(s.end) })),
    };
  }

  /** Resolves when queued speech is below the high-water mark (or at once if it is). */
  waitForRoom(signal?: AbortSignal): Promise<void> {
    if (this.queuedMs < PLAYOUT_HIGH_WATER_MS || this.closed) return Promise.resolve();
    // An already-aborted signal never fires 'abort': without this the producer would wait for room anyway.
    if (signal?.aborted) return Promise.reject(signal.reason);
    return new Promise((resolve, reject) => {
      const onAbort = () => reject(signal!.reason);
      signal?.addEventListener('abort', onAbort, { once: true });
      this.roomWaiters.push(() => {
        signal?.removeEventListener('abort', onAbort);
        resolve();
      });
    });
  }

  /**
   * Barge-in: drops all queued speech now, and everything scheduled from it: the next 10 ms chunk is silence,
   * the next frame is idle, and speech frames still held for the wire (`videoDelayMs`) are replaced by idle ones.
   */
  flush(): void {
    if (this.closed) return;
    this.dropQueuedAudio();
    // A sentence that started is captioned, cut to what played (`caption`), at once rather than after its delay.
    this.releaseDueCaptions(true);
    this.invalidateRenderedFrom(0, false);
    this.emit('framesVoid', null);
    for (const entry of this.outgoing) {
      if (!entry.request.speaking) continue;
      entry.request = { ...entry.request, mouth: CLOSED_MOUTH, level: 0, speaking: false, turn: null };
      // The replaced frame will not reach the wire: its wire reference goes (its 'video' one is the send chain's).
      void entry.frame.then(releaseFrame);
      entry.frame = this.renderRequest(entry.request);
      entry.version++;
    }
  }

  /** Renders with `renderer` from the next frame on (a reopened renderer after a failure). */
  useRenderer(renderer: FrameRenderer): void {
    if (this.closed) return;
    this.renderer = renderer;
    this.adoptNeeds(renderer);
    this.rendererGeneration++;
    this.invalidateRenderedFrom(0);
  }

  /** What the renderer asks of the clock: audio around its frames, how far ahead and in which bursts. */
  private adoptNeeds(renderer: FrameRenderer): void {
    this.timeline.setAudioWindow(renderer.audioWindow);
    this.renderAheadFrames = Math.max(
      1,
      Math.min(MAX_RENDER_AHEAD_FRAMES, renderer.renderAhead?.frames ?? RENDER_AHEAD_FRAMES),
    );
    this.renderAheadBurst = Math.max(1, Math.min(this.renderAheadFrames, renderer.renderAhead?.burst ?? 1));
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.stopTicking?.();
    this.stopTicking = null;
    this.dropQueuedAudio();
    // Every frame still held goes back now (reused buffers are shared memory, which the garbage collector does
    // not count: one left to it can wait long). Frames already on their way to the wire release in `deliver`.
    for (const entry of this.rendered.values()) void entry.frame.then(releaseFrame);
    this.rendered.clear();
    for (const entry of this.outgoing) if (!entry.released) void entry.frame.then(releaseFrame);
    this.outgoing = [];
    this.pendingCues.length = 0;
    this.renderer = null;
    for (const resolve of this.roomWaiters.splice(0)) resolve();
    this.removeAllListeners();
  }

  private dropQueuedAudio(): void {
    this.queue.length = 0;
    this.queuedSamples = 0;
    this.timeline.clear();
    for (const turn of [...this.unsettled]) {
      turn.playout.pendingSamples = 0;
      turn.playout.ended = true;
      this.settleTurn(turn);
    }
    this.releaseRoom();
  }

  /** The turn's record, the turn kept among the unsettled ones (a flush ends it) until it settles. */
  private track(turn: PlayoutTurn): TurnPlayout {
    if (!turn.playout.settled) this.unsettled.add(turn);
    return turn.playout;
  }

  private tagSegment(turn: TurnPlayout, segment: number, pcm: Int16Array, caption?: string): void {
    let last = turn.segments.at(-1);
    if (!last || last.segment !== segment) {
      last = { segment, start: turn.enqueuedSamples, end: turn.enqueuedSamples, caption };
      turn.segments.push(last);
    }
    if (last.onset === undefined) {
      const loud = speechOnset(pcm);
      if (loud >= 0) last.onset = last.end + loud;
    }
    last.end += pcm.length;
  }

  /**
   * Where a segment starts to be heard: its onset; for one that never grows loud, its first sample once it is
   * known to end there (a later segment, or the turn's end); null while that is still open.
   */
  private onsetOf(turn: TurnPlayout, index: number): number | null {
    const segment = turn.segments[index];
    if (segment.onset !== undefined) return segment.onset;
    return index + 1 < turn.segments.length || turn.ended ? segment.start : null;
  }

  /** Schedules the captions of the turn's segments whose speech onset is in the chunk just played. */
  private scheduleCaptions(playoutTurn: PlayoutTurn): void {
    const turn = playoutTurn.playout;
    while (turn.segmentsStarted < turn.segments.length) {
      const onset = this.onsetOf(turn, turn.segmentsStarted);
      if (onset === null || onset >= turn.playedSamples) break;
      const segment = turn.segments[turn.segmentsStarted++];
      if (!segment.caption?.trim() || turn.startSample === null) continue;
      // A turn's audio plays without gaps, so its segment's onset left at the turn's start plus its offset.
      const dueSample = turn.startSample + onset + this.captionDelaySamples;
      this.pendingCues.push({ dueSample, turn: playoutTurn, segment, onset });
    }
  }

  /**
   * Emits the captions whose audio reaches viewers within the next chunk; `all`: every waiting one now (a flush: the
   * turn ends here, so its captions go before the turn's closing statuses, never inside the next turn).
   */
  private releaseDueCaptions(all = false): void {
    while (
      this.pendingCues.length > 0 &&
      (all || this.pendingCues[0].dueSample < this.playedSamples + this.chunkSamples)
    ) {
      const { turn: cueTurn, segment, onset } = this.pendingCues.shift()!;
      const turn = cueTurn.playout;
      const ms = (samples: number) => Math.round((samples * 1000) / this.sampleRate);
      // A turn with nothing left to play (drained or flushed) was heard up to its played samples, no further.
      const end = turn.ended && turn.pendingSamples === 0 ? Math.min(segment.end, turn.playedSamples) : segment.end;
      const clockMs = ms((turn.startSample ?? 0) + onset);
      this.emit('caption', {
        turnId: cueTurn.id,
        text: segment.caption!.trim(),
        startMs: ms(onset),
        endMs: ms(end),
        clockMs,
      });
    }
  }

  private settleTurn(playoutTurn: PlayoutTurn): void {
    const turn = playoutTurn.playout;
    if (!turn.ended || turn.pendingSamples > 0) return;
    for (const resolve of turn.drained.splice(0)) resolve();
    turn.settled = true;
    // Its playback stays on the turn, for whoever still holds it; the clock is done with it.
    this.unsettled.delete(playoutTurn);
  }

  private releaseRoom(): void {
    if (this.queuedMs >= PLAYOUT_HIGH_WATER_MS) return;
    for (const resolve of this.roomWaiters.splice(0)) resolve();
  }

  /**
   * Drops frames rendered ahead whose presentation time is at or after `sample`: they assumed older audio. `report`:
   * tell `framesVoid` from which frame on (a flush reports all at once instead).
   */
  private invalidateRenderedFrom(sample: number, report = true): void {
    let first: number | null = null;
    // In-flight renders are left to finish and be discarded: aborting could drop a frame already due.
    for (const [idx, entry] of [...this.rendered]) {
      if (this.timeline.frameStart(idx) < sample) continue;
      this.rendered.delete(idx);
      first = first === null ? idx : Math.min(first, idx);
      void entry.frame.then(releaseFrame);
    }
    if (report && first !== null) this.emit('framesVoid', first);
  }

  private tick(): void {
    if (this.closed) return;
    const elapsedMs = performance.now() - this.startedAt;
    // A chunk leaves as its 10 ms span begins, not once it has passed: the same pace, one chunk sooner, so
    // speech that arrives during silence goes out at once instead of waiting out the current chunk.
    let dueSamples = Math.floor((elapsedMs * this.sampleRate) / 1000) + this.chunkSamples;
    if (dueSamples - this.playedSamples > (MAX_CATCH_UP_MS * this.sampleRate) / 1000) {
      // Stalled: re-anchor the clock rather than bursting audio the receiver would drop.
      this.startedAt = performance.now() - (this.playedSamples * 1000) / this.sampleRate;
      dueSamples = this.playedSamples + this.chunkSamples;
    }
    while (this.playedSamples + this.chunkSamples <= dueSamples) {
      this.takeDueFrames();
      this.releaseDueVideo();
      this.releaseDueCaptions();
      this.sendAudioChunk();
    }
    this.renderAhead();
  }

  /** A frame whose presentation time falls inside the next audio chunk leaves together with it. */
  private takeDueFrames(): void {
    while (this.timeline.frameStart(this.frameIdx) < this.playedSamples + this.chunkSamples) {
      const idx = this.frameIdx++;
      // Any change to the audio under this frame since it was rendered ahead dropped it, so its request still holds.
      const { request, frame: renderedFrame } = this.rendered.get(idx) ?? this.renderFrame(idx);
      this.rendered.delete(idx);
      // From here the frame has two readers, each releasing its reference when done (`frame-buffers.ts`): the
      // 'video' emission below and the wire (`deliver`), `videoDelayMs` later.
      const frame = renderedFrame.then((rendered) => {
        if (rendered) retainFrame(rendered);
        return rendered;
      });
      this.timeline.commit(request);
      const ptsSamples = this.timeline.frameStart(idx);
      const ptsMs = request.ptsMs;
      this.outgoing.push({
        frameIdx: idx,
        ptsMs,
        dueSample: ptsSamples + this.videoDelaySamples,
        request,
        frame,
        version: 0,
        released: false,
      });
      const frameTurn = request.turn;
      this.sendChain = this.sendChain
        .then(() => frame)
        .then((rendered) => {
          if (!rendered) {
            // A renderer that makes no picture (a client-rendered session's `PoseFrames`: the browser draws the
            // frame from its pose) still plays the frame: the turn's SSE `frame` goes as for a picture. A suspended
            // renderer (it failed) plays none.
            if (this.renderer) this.emitTurnFrame(idx, ptsMs, frameTurn);
            return;
          }
          try {
            this.sendFrame(rendered, idx, ptsMs, frameTurn);
          } finally {
            releaseFrame(rendered);
          }
        })
        .catch((error: unknown) => this.tapFailed(error));
    }
  }

  /** A frame at its presentation time: late-frame accounting, the 'video' tap and the turn's SSE `frame`. */
  private sendFrame(rendered: I420Frame, idx: number, ptsMs: number, frameTurn: PlayoutTurn | null): void {
    if (this.closed) return;
    const lateMs = this.mediaMs - ptsMs;
    if (lateMs > 1000 / this.fps) {
      this.lateFrames++;
      this.emit('late', lateMs);
    }
    this.sentFrames++;
    this.emit('video', rendered, idx, ptsMs);
    this.emitTurnFrame(idx, ptsMs, frameTurn);
  }

  /** The turn's SSE `frame` for a frame that plays now. */
  private emitTurnFrame(idx: number, ptsMs: number, frameTurn: PlayoutTurn | null): void {
    if (this.closed) return;
    // Only while the turn plays: once its audio is out the turn is over for clients (status idle follows).
    const start = frameTurn && !frameTurn.playout.settled ? frameTurn.playout.startSample : null;
    if (frameTurn && start !== null) {
      this.emit('frame', {
        turnId: frameTurn.id,
        frameIdx: idx,
        ptsMs: Math.max(0, Math.round(ptsMs - (start * 1000) / this.sampleRate)),
      });
    }
  }

  /** Hands frames whose wire time falls inside the next audio chunk to the output, in index order. */
  private releaseDueVideo(): void {
    for (const entry of this.outgoing) {
      if (entry.dueSample >= this.playedSamples + this.chunkSamples) break;
      if (entry.released) continue;
      entry.released = true;
      this.wireChain = this.wireChain.then(() => this.deliver(entry)).catch((error: unknown) => this.tapFailed(error));
    }
  }

  private async deliver(entry: OutgoingFrame): Promise<void> {
    let frame: I420Frame | null;
    let version: number;
    do {
      version = entry.version;
      frame = await entry.frame;
    } while (version !== entry.version);
    const at = this.outgoing.indexOf(entry);
    if (at >= 0) this.outgoing.splice(at, 1);
    try {
      if (frame && !this.closed) this.emit('videoOut', frame, entry.frameIdx, entry.ptsMs);
    } finally {
      releaseFrame(frame);
    }
  }

  private sendAudioChunk(): void {
    // One buffer for every chunk: 100 fresh 960-byte buffers a second per session were garbage for nothing.
    const out = this.audioChunk;
    out.fill(0);
    let filled = 0;
    const startedTurns = new Set<PlayoutTurn>();
    while (filled < out.length && this.queue.length > 0) {
      const seg = this.queue[0];
      const turn = seg.turn.playout;
      if (turn.startSample === null) {
        turn.startSample = this.playedSamples + filled;
        this.emit('turnStarted', seg.turn.id);
      }
      const take = Math.min(out.length - filled, seg.pcm.length - seg.offset);
      out.set(seg.pcm.subarray(seg.offset, seg.offset + take), filled);
      seg.offset += take;
      filled += take;
      turn.pendingSamples -= take;
      turn.playedSamples += take;
      this.queuedSamples -= take;
      startedTurns.add(seg.turn);
      if (seg.offset >= seg.pcm.length) {
        this.queue.shift();
        this.settleTurn(seg.turn);
      }
    }
    const mediaMs = this.mediaMs;
    this.playedSamples += this.chunkSamples;
    for (const turn of startedTurns) this.scheduleCaptions(turn);
    this.timeline.forgetBefore(this.playedSamples);
    this.emit('audio', out, this.sampleRate, mediaMs);
    this.releaseRoom();
  }

  private renderFrame(frameIdx: number): RenderedFrame {
    const request = this.timeline.requestFor(frameIdx);
    return { request, frame: this.renderRequest(request) };
  }

  private renderRequest(request: TimedFrameRequest): Promise<I420Frame | null> {
    const renderer = this.renderer;
    if (!renderer) return Promise.resolve(null);
    const generation = this.rendererGeneration;
    const { turn: _turn, ...frameRequest } = request;
    try {
      // No per-frame AbortSignal: frames are cheap and a shared signal would collect a listener per task. The failure
      // handler is an inline arrow: one bound to a name is wrapped by tsx's keepNames (`__name`) on every frame.
      return renderer.render([frameRequest]).then(
        (frames) => frames[0] ?? null,
        (error: unknown) => {
          this.rendererFailed(generation, error);
          return null;
        },
      );
    } catch (error) {
      this.rendererFailed(generation, error);
      return Promise.resolve(null);
    }
  }

  private tapFailed(error: unknown): void {
    if (!this.closed && this.listenerCount('tapFailed') > 0) this.emit('tapFailed', error);
  }

  private rendererFailed(generation: number, error: unknown): void {
    if (this.closed || generation !== this.rendererGeneration) return;
    if (this.listenerCount('renderFailed') === 0) return;
    // Suspend this renderer: one report per failure, not one per frame rendered while it stays broken.
    this.renderer = null;
    this.rendererGeneration++;
    this.emit('renderFailed', error);
  }

  private renderAhead(): void {
    const end = this.frameIdx + this.renderAheadFrames;
    if (this.renderAheadBurst > 1) {
      // A batching renderer gets its frames in bursts; the next frame due is asked for whatever the burst.
      let missing = 0;
      for (let idx = this.frameIdx; idx < end; idx++) if (!this.rendered.has(idx)) missing++;
      if (missing < this.renderAheadBurst && this.rendered.has(this.frameIdx)) return;
    }
    for (let idx = this.frameIdx; idx < end; idx++) {
      if (!this.rendered.has(idx)) this.rendered.set(idx, this.renderFrame(idx));
    }
  }
}
