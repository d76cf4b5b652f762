import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from 'pino';
import {
  PlayoutClock,
  type AttentionCue,
  type ExpressionRequest,
  type FrameRenderer,
  type MouthSource,
} from '../../actors/media/playout.ts';
import type { ExpressionCue } from '../../actors/expression.ts';
import { WebRtcOutput, type IceServer } from '../../actors/media/webrtc.ts';
import { WhepViewers } from '../../actors/media/whep.ts';
import { RecoverableStageError, UnrecoverableStageError } from '../../actors/stage/errors.ts';
import type { StageMedia, TurnHandle } from '../../actors/stage/ports.ts';
import { errorForLog } from '../logger.ts';
import type { SessionBus } from './session-bus.ts';
import type { ClientRendering } from './client-render.ts';
import type { PoseChannelFigures } from './pose-channel.ts';

/** Renderer failures within `RENDERER_FAILURE_WINDOW_MS` that end the session: a renderer this broken will not recover. */
export const RENDERER_MAX_FAILURES = 3;
export const RENDERER_FAILURE_WINDOW_MS = 60_000;
/** Bound on reopening the renderer after a failure (a worker prepares the avatar in ~0.1–2 s); longer counts as another failure. */
export const RENDERER_REOPEN_TIMEOUT_MS = 10_000;
/** Pause before retrying a reopen that failed, so a broken backend is not hammered. */
const RENDERER_REOPEN_RETRY_MS = 500;

export type SessionRenderer = FrameRenderer & { close(): void | Promise<void> };
/** Opens a fresh renderer for the session's avatar and model (the render pool's `open`). */
export type RendererOpener = (signal: AbortSignal) => Promise<SessionRenderer>;

/** One renderer failure: the session goes on with a reopened renderer. */
export class RendererFailedError extends RecoverableStageError {
  constructor(cause: unknown) {
    super('render_failed', `renderer failed and was restarted: ${errorForLog(cause)}`, { cause });
    this.name = 'RendererFailedError';
  }
}

/** The renderer failed `RENDERER_MAX_FAILURES` times within a minute: the session cannot show its avatar. */
export class RendererGaveUpError extends UnrecoverableStageError {
  constructor(cause: unknown) {
    super(
      'render_failed_repeatedly',
      `renderer failed ${RENDERER_MAX_FAILURES} times within ${RENDERER_FAILURE_WINDOW_MS / 1000} s: ${errorForLog(cause)}`,
      { cause },
    );
    this.name = 'RendererGaveUpError';
  }
}

export interface SessionMediaOptions {
  renderer: SessionRenderer;
  /** How to get a new renderer after one failed; without it a failure is fatal at once. */
  reopenRenderer?: RendererOpener;
  sampleRate: number;
  iceServers: IceServer[];
  /** SERVICE_VIDEO_DELAY_MS: video held behind audio on the wire, scheduled by the clock. */
  videoDelayMs: number;
  bus: SessionBus;
  logger: Logger;
  /**
   * A client-rendered session (`render: "client"`, issue 47): `renderer` is this, the peer gets audio and the pose
   * channel instead of video, and a server renderer runs only for server-side outputs (`client-render.ts`).
   */
  clientRendering?: ClientRendering;
}

/**
 * A session's media: the media clock (`actors/media/playout.ts`, the one owner of timing) feeding the WebRTC
 * output, and the renderer's lifecycle. Recording taps the same clock (`playout.on('audio' | 'video')`), so a
 * recording holds the audio and frames a viewer gets, on the clock's own timeline (without the wire's video delay). The clock stays still until `start()` (the session's start): a
 * created session renders nothing and sends nothing, however many are waiting.
 *
 * Renderer failures: the clock stops using a renderer that failed a frame and reports it; this class reopens it
 * (the viewer sees the last frame meanwhile) and reports `media.failed` on the bus with a recoverable
 * `RendererFailedError`, or — on the `RENDERER_MAX_FAILURES`th failure within `RENDERER_FAILURE_WINDOW_MS` —
 * a fatal `RendererGaveUpError`. Closing is not done here but by the session's close cascade (`session-close.ts`).
 */
export class SessionMedia implements StageMedia {
  readonly playout: PlayoutClock;
  readonly output: WebRtcOutput;
  /** WHEP viewers: send-only peers fed by the output's sources; they close with it. */
  readonly viewers: WhepViewers;
  private renderer: SessionRenderer;
  private readonly failures: number[] = [];
  private reopening = false;
  private gaveUp = false;
  /** Aborts a reopen in progress when the session closes. */
  private readonly closing = new AbortController();
  private readonly bus: SessionBus;
  private readonly logger: Logger;
  private readonly reopenRenderer?: RendererOpener;
  private stopWatchingBackend: (() => void) | undefined;
  private readonly clientRendering: ClientRendering | undefined;

  constructor(options: SessionMediaOptions) {
    const { bus, clientRendering } = options;
    this.bus = bus;
    this.logger = options.logger;
    this.renderer = options.renderer;
    this.reopenRenderer = options.reopenRenderer;
    this.clientRendering = clientRendering;
    this.playout = new PlayoutClock(options.renderer, options.sampleRate, { videoDelayMs: options.videoDelayMs });
    this.output = new WebRtcOutput(options.iceServers, {
      audioRate: options.sampleRate,
      ...(clientRendering && {
        video: false,
        onPoseChannel: (channel) => clientRendering.poses.attach(channel),
        onFeedsChanged: () => clientRendering.outputsChanged(),
      }),
    });
    clientRendering?.attach(this.playout, this.output);
    this.viewers = new WhepViewers(this.output, options.iceServers);
    this.playout.on('audio', (samples, rate) => this.output.pushAudio(samples, rate));
    this.playout.on('videoOut', (frame) => this.output.pushVideo(frame));
    bus.on('turn.started', () => this.output.turnStarted());
    bus.on('turn.finished', () => this.output.turnEnded());
    this.playout.on('frame', ({ frameIdx, ptsMs }) => bus.publish('frame', { frame_idx: frameIdx, pts_ms: ptsMs }));
    this.playout.on('turnStarted', (turnId) => bus.emit('media.firstSample', { turnId }));
    this.playout.on('caption', (cue) =>
      bus.publish('caption', { turn_id: cue.turnId, text: cue.text, start_ms: cue.startMs, end_ms: cue.endMs }),
    );
    this.playout.on('renderFailed', (error) => this.rendererFailed(error));
    this.playout.on('tapFailed', (error) =>
      this.logger.error({ err: errorForLog(error) }, 'media tap failed; the clock goes on'),
    );
    this.watchBackend(options.renderer);
  }

  /**
   * A neural renderer with a fallback (lipsync_c) survives its backend failing: it tells us once, renders the
   * rest of the turn on the CPU renderer and goes back to the backend when it answers again. Clients get an
   * `error` event (the turn goes on; its `status idle` follows as usual). An overloaded backend costs single frames
   * (rendered on the CPU renderer, the turn stays on the backend): only logged, clients see nothing failing.
   */
  private watchBackend(renderer: SessionRenderer): void {
    this.stopWatchingBackend?.();
    this.stopWatchingBackend = undefined;
    this.stopWatchingBackend = renderer.watchBackend?.({
      failed: (error) => {
        this.logger.warn({ err: errorForLog(error) }, 'lip-sync backend failed, rendering on the CPU fallback');
        this.bus.publish('error', {
          code: 'render_backend_failed',
          message: `lip-sync inference backend failed (${errorForLog(error)}); this turn goes on with the CPU lipsync renderer`,
        });
      },
      recovered: () => this.logger.info('lip-sync backend answers again'),
      overloaded: (error) =>
        this.logger.warn(
          { err: errorForLog(error) },
          'lip-sync backend overloaded, some frames render on the CPU fallback',
        ),
    });
  }

  /** Starts the media clock (idempotent; a no-op once closed). */
  start(): void {
    if (this.closing.signal.aborted) return;
    this.playout.start();
  }

  get width(): number {
    return this.renderer.width;
  }

  get height(): number {
    return this.renderer.height;
  }

  /** Barge-in: everything queued or scheduled goes (audio, frames rendered ahead, video held for the wire). */
  flush(): void {
    this.playout.flush();
    this.bus.emit('media.flushed', {});
  }

  /**
   * Queues a turn's audio. `segment` tags it (e.g. the index of the text segment it speaks); the return value is
   * where it starts in the turn's audio, ms. With `playedMsOf` this tells what of a turn the listener heard.
   */
  enqueue(turn: TurnHandle, pcm: Int16Array, mouth: MouthSource, segment?: number, caption?: string): number {
    return this.playout.enqueue(turn, pcm, mouth, segment, caption);
  }

  /** Resolves once the playout queue is below its high-water mark (back-pressure for whoever feeds it). */
  waitForRoom(signal?: AbortSignal): Promise<void> {
    return this.playout.waitForRoom(signal);
  }

  /** No more audio comes for this turn: its end plays out after what is queued. */
  endTurn(turn: TurnHandle): void {
    this.playout.endTurn(turn);
  }

  /** How much the avatar moves besides blinks and the mouth, 0..1, from the next frame rendered on. */
  setMotion(motion: number): void {
    this.playout.setMotion(motion);
  }

  /**
   * Pictures for an output about to start (a recording, a WHEP viewer): on a client-rendered session the server
   * renderer is opened and its first picture awaited (`ClientRendering.holdPictures`); a server-rendered session
   * draws already. Call the returned function once the output is attached.
   */
  async holdPictures(signal?: AbortSignal): Promise<() => void> {
    return (await this.clientRendering?.holdPictures(signal)) ?? (() => undefined);
  }

  /** Listening and thinking on the avatar (`PlayoutClock.attend`, followed from the bus by `attention.ts`). */
  attend(cue: AttentionCue): void {
    this.playout.attend(cue);
  }

  /** How long the answer now awaited has been awaited, ms, or null (`PlayoutClock.answerAwaitedMs`). */
  answerAwaitedMs(): number | null {
    return this.playout.answerAwaitedMs();
  }

  /** Shows an expression on the avatar, now or after the speech already queued (`PlayoutClock.express`). */
  express(expression: ExpressionRequest, at: 'now' | 'after-queued'): ExpressionCue {
    return this.playout.express(expression, at);
  }

  /** Resolves once everything queued for the turn has been played. */
  whenDrained(turn: TurnHandle): Promise<void> {
    return this.playout.whenDrained(turn);
  }

  /** Ms of speech queued for playout and not yet played. */
  get queuedMs(): number {
    return this.playout.queuedMs;
  }

  /**
   * Ms of a turn's audio that left for WebRTC: after an interrupt, what the listener heard (plus the ~80 ms already
   * in the WebRTC path). Compare with the start ms `enqueue` returned for each text segment to trim a reply.
   */
  playedMsOf(turn: TurnHandle): number {
    return this.playout.playedMsOf(turn);
  }

  /** Answers a viewer's WebRTC offer: its peer replaces the previous one (`PeerGoneError` when superseded or closed). */
  answer(offerSdp: string, signal?: AbortSignal): Promise<{ sdp: string; type: 'answer' }> {
    return this.output.answer(offerSdp, signal);
  }

  /** Calls `listener` with each renderer failure (`media.failed`): recoverable or fatal, see `actors/stage/errors.ts`. */
  onFailure(listener: (error: Error) => void): () => void {
    return this.bus.on('media.failed', ({ error }) => listener(error));
  }

  /** Step of the close cascade (after the clock and WebRTC): stops any reopen and releases the renderer. */
  async releaseRenderer(): Promise<void> {
    if (this.closing.signal.aborted) return;
    this.closing.abort();
    await (this.clientRendering?.release() ?? this.renderer.close());
  }

  /** A client-rendered session's pose stream figures (sent, late, skipped); null for a server-rendered one. */
  get poseFigures(): Readonly<PoseChannelFigures> | null {
    return this.clientRendering?.poses.counts ?? null;
  }

  /** Whether a server renderer draws frames now: always for a server-rendered session, for outputs only otherwise. */
  get rendersOnServer(): boolean {
    return this.clientRendering ? this.clientRendering.rendersOnServer : true;
  }

  private rendererFailed(error: unknown): void {
    if (this.closing.signal.aborted || this.gaveUp) return;
    if (!this.countFailure(error)) return;
    if (!this.reopening) void this.reopen();
  }

  /** Records a failure and reports it; false when it was one too many (the session is told it cannot go on). */
  private countFailure(error: unknown): boolean {
    const now = performance.now();
    while (this.failures.length > 0 && now - this.failures[0] > RENDERER_FAILURE_WINDOW_MS) this.failures.shift();
    this.failures.push(now);
    if (this.failures.length >= RENDERER_MAX_FAILURES || !this.reopenRenderer) {
      this.gaveUp = true;
      this.logger.error({ err: errorForLog(error), failures: this.failures.length }, 'renderer failed repeatedly');
      this.bus.emit('media.failed', { error: new RendererGaveUpError(error) });
      return false;
    }
    this.logger.warn({ err: errorForLog(error), failures: this.failures.length }, 'renderer failed, reopening');
    this.bus.emit('media.failed', { error: new RendererFailedError(error) });
    return true;
  }

  /** Replaces the failed renderer; a reopen that fails counts as one more failure and is retried. */
  private async reopen(): Promise<void> {
    const open = this.reopenRenderer!;
    this.reopening = true;
    try {
      await Promise.resolve(this.renderer.close()).catch(() => undefined);
      while (!this.closing.signal.aborted && !this.gaveUp) {
        try {
          const renderer = await open(
            AbortSignal.any([this.closing.signal, AbortSignal.timeout(RENDERER_REOPEN_TIMEOUT_MS)]),
          );
          if (this.closing.signal.aborted) {
            await renderer.close();
            return;
          }
          this.renderer = renderer;
          this.watchBackend(renderer);
          this.playout.useRenderer(renderer);
          this.logger.info('renderer reopened');
          return;
        } catch (error) {
          if (this.closing.signal.aborted || !this.countFailure(error)) return;
          await sleep(RENDERER_REOPEN_RETRY_MS, undefined, { signal: this.closing.signal }).catch(() => undefined);
        }
      }
    } finally {
      this.reopening = false;
    }
  }
}
