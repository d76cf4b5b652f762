import { EventEmitter } from 'node:events';
import { CLOSED_MOUTH, type FrameRequest, type I420Frame, type MouthPose } from '../render/types.ts';

/** WebRTC audio sources take exactly 10 ms of PCM per call. */
export const AUDIO_CHUNK_MS = 10;
/** How often the clock wakes; catching up by wall time keeps it exact even when a tick is late. */
const TICK_MS = 5;
/** Frames rendered ahead of the clock: enough to hide worker latency, small enough that an interrupt shows within ~2 frames. */
const RENDER_AHEAD_FRAMES = 2;
/** Above this much queued speech, `waitForRoom` blocks producers (WebSocket back-pressure, TTS pacing). */
export const PLAYOUT_HIGH_WATER_MS = 2_000;
/** If the machine stalls longer than this (GC pause, suspended laptop), restart the timeline instead of bursting. */
const MAX_CATCH_UP_MS = 500;

export interface MouthSource {
  durationMs: number;
  poseAt(ms: number): MouthPose;
  levelAt(ms: number): number;
}

export interface FrameRenderer {
  readonly width: number;
  readonly height: number;
  readonly fps: number;
  render(requests: FrameRequest[], signal?: AbortSignal): Promise<I420Frame[]>;
}

interface QueuedSegment {
  turnId: string;
  pcm: Int16Array;
  /** Next sample of `pcm` to play. */
  offset: number;
  mouth: MouthSource;
}

interface RenderedFrame {
  turnId: string | null;
  frame: Promise<I420Frame | null>;
}

interface TurnClock {
  turnId: string;
  /** Media time (samples) of the turn's first sample, once it started playing. */
  startSample: number | null;
  /** Samples of the turn enqueued but not yet played. */
  pendingSamples: number;
  ended: boolean;
  drained: Array<() => void>;
}

export interface PlayoutEvents {
  audio: [samples: Int16Array, sampleRate: number, mediaMs: number];
  video: [frame: I420Frame, frameIdx: number, mediaMs: number];
  frame: [info: { turnId: string; frameIdx: number; ptsMs: number }];
  turnStarted: [turnId: string];
  late: [lateMs: number];
}

/**
 * One media clock per session. Audio leaves in 10 ms chunks and video frames leave when the clock
 * passes their presentation time, both from the same sample counter, so they cannot drift apart.
 * When nothing is queued the avatar keeps rendering idle frames (blink, breathing) and audio is silence.
 */
export class PlayoutClock extends EventEmitter<PlayoutEvents> {
  readonly chunkSamples: number;
  private readonly queue: QueuedSegment[] = [];
  private readonly turns = new Map<string, TurnClock>();
  private playedSamples = 0;
  private frameIdx = 0;
  private startedAt = 0;
  private timer: NodeJS.Timeout | null = null;
  private closed = false;
  /** Frames rendered ahead, with the turn whose audio they show (both follow from the queue at render time). */
  private readonly rendered = new Map<number, RenderedFrame>();
  /** Frames leave strictly in index order even when workers finish out of order. */
  private sendChain: Promise<void> = Promise.resolve();
  private roomWaiters: Array<() => void> = [];
  private queuedSamples = 0;
  /** Frames that left later than one frame period after their presentation time. */
  lateFrames = 0;
  sentFrames = 0;

  constructor(
    private readonly renderer: FrameRenderer,
    readonly sampleRate: number,
  ) {
    super();
    this.chunkSamples = (sampleRate * AUDIO_CHUNK_MS) / 1000;
  }

  get fps(): number {
    return this.renderer.fps;
  }

  get mediaMs(): number {
    return (this.playedSamples * 1000) / this.sampleRate;
  }

  get queuedMs(): number {
    return (this.queuedSamples * 1000) / this.sampleRate;
  }

  start(): void {
    if (this.timer || this.closed) return;
    this.startedAt = performance.now();
    this.playedSamples = 0;
    this.timer = setInterval(() => this.tick(), TICK_MS);
  }

  /** Queues speech for a turn; the mouth source is indexed in ms from the start of this PCM. */
  enqueue(turnId: string, pcm: Int16Array, mouth: MouthSource): void {
    if (this.closed || pcm.length === 0) return;
    const turn = this.turnOf(turnId);
    turn.pendingSamples += pcm.length;
    this.queuedSamples += pcm.length;
    this.queue.push({ turnId, pcm, offset: 0, mouth });
    this.invalidateRenderAhead();
  }

  /** Marks that no more audio will come for the turn; `whenDrained` resolves once it has all played. */
  endTurn(turnId: string): void {
    const turn = this.turnOf(turnId);
    turn.ended = true;
    this.settleTurn(turn);
  }

  whenDrained(turnId: string): Promise<void> {
    const turn = this.turnOf(turnId);
    return new Promise((resolve) => {
      turn.drained.push(resolve);
      this.settleTurn(turn);
    });
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

  /** Barge-in: drops all queued speech now; the next 10 ms chunk is silence and the next frame is idle. */
  flush(): void {
    this.queue.length = 0;
    this.queuedSamples = 0;
    for (const turn of this.turns.values()) {
      turn.pendingSamples = 0;
      turn.ended = true;
      this.settleTurn(turn);
    }
    this.invalidateRenderAhead();
    this.releaseRoom();
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    this.flush();
    this.removeAllListeners();
  }

  private turnOf(turnId: string): TurnClock {
    let turn = this.turns.get(turnId);
    if (!turn) {
      turn = { turnId, startSample: null, pendingSamples: 0, ended: false, drained: [] };
      this.turns.set(turnId, turn);
    }
    return turn;
  }

  private settleTurn(turn: TurnClock): void {
    if (!turn.ended || turn.pendingSamples > 0) return;
    for (const resolve of turn.drained.splice(0)) resolve();
    this.turns.delete(turn.turnId);
  }

  private releaseRoom(): void {
    if (this.queuedMs >= PLAYOUT_HIGH_WATER_MS) return;
    for (const resolve of this.roomWaiters.splice(0)) resolve();
  }

  private invalidateRenderAhead(): void {
    // Frames already rendered for future times assumed the old queue; render them again. In-flight
    // renders are left to finish and be discarded: aborting could drop a frame already due.
    for (const idx of [...this.rendered.keys()]) if (idx > this.frameIdx) this.rendered.delete(idx);
    this.rendered.delete(this.frameIdx);
  }

  private tick(): void {
    if (this.closed) return;
    const elapsedMs = performance.now() - this.startedAt;
    let dueSamples = Math.floor((elapsedMs * this.sampleRate) / 1000);
    if (dueSamples - this.playedSamples > (MAX_CATCH_UP_MS * this.sampleRate) / 1000) {
      // Stalled: re-anchor the clock rather than bursting audio the receiver would drop.
      this.startedAt = performance.now() - (this.playedSamples * 1000) / this.sampleRate;
      dueSamples = this.playedSamples + this.chunkSamples;
    }
    while (this.playedSamples + this.chunkSamples <= dueSamples) {
      this.maybeSendFrame();
      this.sendAudioChunk();
    }
    this.renderAhead();
  }

  private framePtsSamples(frameIdx: number): number {
    return Math.round((frameIdx * this.sampleRate) / this.renderer.fps);
  }

  private maybeSendFrame(): void {
    // A frame whose presentation time falls inside the next audio chunk leaves together with it.
    while (this.framePtsSamples(this.frameIdx) < this.playedSamples + this.chunkSamples) {
      const idx = this.frameIdx++;
      // Any change to the queue since this frame was rendered ahead dropped it, so its turn is still current.
      const { turnId: frameTurn, frame: pending } = this.rendered.get(idx) ?? this.renderFrame(idx);
      this.rendered.delete(idx);
      const ptsMs = (this.framePtsSamples(idx) * 1000) / this.sampleRate;
      this.sendChain = this.sendChain.then(() => pending).then((frame) => {
        if (!frame || this.closed) return;
        const lateMs = this.mediaMs - ptsMs;
        if (lateMs > 1000 / this.renderer.fps) {
          this.lateFrames++;
          this.emit('late', lateMs);
        }
        this.sentFrames++;
        this.emit('video', frame, idx, ptsMs);
        if (frameTurn) {
          const turn = this.turns.get(frameTurn);
          const start = turn?.startSample;
          if (start !== null && start !== undefined) {
            this.emit('frame', {
              turnId: frameTurn,
              frameIdx: idx,
              ptsMs: Math.max(0, Math.round(ptsMs - (start * 1000) / this.sampleRate)),
            });
          }
        }
      });
    }
  }

  private sendAudioChunk(): void {
    const out = new Int16Array(this.chunkSamples);
    let filled = 0;
    while (filled < out.length && this.queue.length > 0) {
      const seg = this.queue[0];
      const turn = this.turnOf(seg.turnId);
      if (turn.startSample === null) {
        turn.startSample = this.playedSamples + filled;
        this.emit('turnStarted', seg.turnId);
      }
      const take = Math.min(out.length - filled, seg.pcm.length - seg.offset);
      out.set(seg.pcm.subarray(seg.offset, seg.offset + take), filled);
      seg.offset += take;
      filled += take;
      turn.pendingSamples -= take;
      this.queuedSamples -= take;
      if (seg.offset >= seg.pcm.length) {
        this.queue.shift();
        this.settleTurn(turn);
      }
    }
    const mediaMs = this.mediaMs;
    this.playedSamples += this.chunkSamples;
    this.emit('audio', out, this.sampleRate, mediaMs);
    this.releaseRoom();
  }

  /** What the mouth does at a media sample: look into the queue, since it holds exactly the future audio. */
  private requestFor(frameIdx: number): FrameRequest & { turnId: string | null } {
    const pts = this.framePtsSamples(frameIdx);
    let cursor = this.playedSamples;
    for (const seg of this.queue) {
      const remaining = seg.pcm.length - seg.offset;
      if (pts < cursor + remaining) {
        if (pts < cursor) break;
        const ms = ((seg.offset + (pts - cursor)) * 1000) / this.sampleRate;
        return {
          frameIdx,
          ptsMs: (pts * 1000) / this.sampleRate,
          mouth: seg.mouth.poseAt(ms),
          level: seg.mouth.levelAt(ms),
          speaking: true,
          turnId: seg.turnId,
        };
      }
      cursor += remaining;
    }
    return { frameIdx, ptsMs: (pts * 1000) / this.sampleRate, mouth: CLOSED_MOUTH, level: 0, speaking: false, turnId: null };
  }

  private renderFrame(frameIdx: number): RenderedFrame {
    const { turnId, ...request } = this.requestFor(frameIdx);
    // No per-frame AbortSignal: frames are cheap and a shared signal would collect a listener per task.
    const frame = this.renderer.render([request]).then(
      (frames) => frames[0] ?? null,
      () => null,
    );
    return { turnId, frame };
  }

  private renderAhead(): void {
    for (let idx = this.frameIdx; idx < this.frameIdx + RENDER_AHEAD_FRAMES; idx++) {
      if (!this.rendered.has(idx)) this.rendered.set(idx, this.renderFrame(idx));
    }
  }
}
