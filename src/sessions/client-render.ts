/**
 * A client-rendered session's renderer (issue 47): the media clock's frame requests go to the pose channel, and to a
 * server renderer only while a server-side output wants pictures. Those outputs are the clock's `video` tap
 * (recording, RTMP push) and the WebRTC output's send-only feeds (WHEP viewers, WHIP pushes): the server renderer is
 * opened when the first of them starts and closed with the last. Offline bundles open a renderer of their own.
 */
import type { Logger } from 'pino';
import { PoseFrames } from '../../actors/media/pose-frames.ts';
import type { PlayoutClock } from '../../actors/media/playout.ts';
import { frameStartSample } from '../../actors/media/timeline.ts';
import type { WebRtcOutput } from '../../actors/media/webrtc.ts';
import { errorForLog } from '../logger.ts';
import type { RendererOpener, SessionRenderer } from './media.ts';
import { PoseChannel, type PoseChannelHello } from './pose-channel.ts';

/**
 * How long an output about to start on a client-rendered session (a recording, a WHEP viewer) waits for the server
 * renderer's first picture: opening one prepares the avatar's renderer in a render worker, measured at 0.1–2 s (a
 * clip's loop decode the longest), more on a loaded host. Bounded so that a failing or stalled renderer delays the
 * output but never blocks it: past this the output starts anyway and gets pictures when they come.
 */
export const OUTPUT_PICTURES_WAIT_MS = 5_000;

export interface ClientRenderOptions {
  /** The avatar and model as the browser asks for the render kit. */
  avatarId: string;
  model: string;
  width: number;
  height: number;
  fps: number;
  /** The session's sample rate (its media clock's): channel audio is encoded at it. */
  sampleRate: number;
  /** Opens a server renderer for the session's avatar and model (the render pool's `open`). */
  openServerRenderer: RendererOpener;
  logger: Logger;
}

/** Where the browser fetches the avatar's render kit (the route may redirect to a content-hashed URL). */
export function renderKitPath(avatarId: string, model: string): string {
  return `/avatars/${encodeURIComponent(avatarId)}/render-kit?model=${encodeURIComponent(model)}`;
}

export class ClientRendering implements SessionRenderer {
  readonly poses: PoseChannel;
  private readonly frames: PoseFrames;
  private server: SessionRenderer | null = null;
  private opening: Promise<void> | null = null;
  private playout: PlayoutClock | null = null;
  private output: WebRtcOutput | null = null;
  private closed = false;
  /** Outputs about to start that asked for pictures ahead (`holdPictures`). */
  private holds = 0;
  private readonly closing = new AbortController();
  private logger: Logger;

  constructor(private readonly options: ClientRenderOptions) {
    this.logger = options.logger;
    const hello: PoseChannelHello = {
      kitUrl: renderKitPath(options.avatarId, options.model),
      model: options.model,
      fps: options.fps,
      width: options.width,
      height: options.height,
    };
    this.poses = new PoseChannel(hello, () => this.playout?.mediaMs ?? 0, {
      sampleRate: options.sampleRate,
      queuedAudio: (from, to) => this.playout?.queuedAudio(from, to) ?? null,
      routeToChannel: (channel) => this.output?.audioToChannel(channel) ?? false,
    });
    this.frames = new PoseFrames(options.width, options.height, options.fps, (request) => this.poses.pose(request));
  }

  get width(): number {
    return this.frames.width;
  }
  get height(): number {
    return this.frames.height;
  }
  get fps(): number {
    return this.frames.fps;
  }
  get renderAhead(): { frames: number; burst: number } {
    return this.frames.renderAhead;
  }

  /** True while a server renderer draws the poses for server-side outputs. */
  get rendersOnServer(): boolean {
    return this.frames.rendersOnServer;
  }

  render(...args: Parameters<PoseFrames['render']>): ReturnType<PoseFrames['render']> {
    return this.frames.render(...args);
  }

  /** Logs with the session's logger from now on (the session's id is chosen after its renderer). */
  useLogger(logger: Logger): void {
    this.logger = logger;
  }

  /** Binds the clock and the WebRTC output once they exist (they are built with this renderer). */
  attach(playout: PlayoutClock, output: WebRtcOutput): void {
    this.playout = playout;
    this.output = output;
    playout.on('framesVoid', (fromFrameIdx) =>
      this.poses.flush(
        fromFrameIdx === null
          ? null
          : (frameStartSample(fromFrameIdx, playout.sampleRate, playout.fps) * 1000) / playout.sampleRate,
      ),
    );
    playout.on('audio', (_samples, _rate, mediaMs) => this.poses.audioLeft(mediaMs));
    // The clock's `video` tap comes and goes with recordings and RTMP pushes (EventEmitter's own listener events).
    const onTapChange = (event: string | symbol) => {
      if (event === 'video') queueMicrotask(() => this.outputsChanged());
    };
    (playout as unknown as NodeJS.EventEmitter).on('newListener', onTapChange);
    (playout as unknown as NodeJS.EventEmitter).on('removeListener', onTapChange);
  }

  /** The send-only feeds changed (`WebRtcOutputOptions.onFeedsChanged`). */
  outputsChanged(): void {
    if (this.closed || !this.playout) return;
    const wanted = this.outputsWantPictures();
    if (wanted && !this.server) this.opening ??= this.openServer().finally(() => (this.opening = null));
    else if (!wanted && this.server) void this.closeServer();
  }

  /**
   * Drops the server renderer (a failed one, before `SessionMedia` reopens; or the session's release). Poses go on;
   * `reopen` opens a server renderer again if outputs still want one.
   */
  async close(): Promise<void> {
    await this.closeServer();
  }

  /** After a failure: this renderer again, with a fresh server renderer if outputs want one (`RendererOpener`). */
  async reopen(): Promise<SessionRenderer> {
    this.outputsChanged();
    await this.opening;
    return this;
  }

  /**
   * For an output about to start (a recording, a WHEP viewer): opens the server renderer now and resolves once the
   * clock sends its first picture (at once when it draws already; at the latest after `OUTPUT_PICTURES_WAIT_MS`), so
   * the output begins with the face instead of missing its first 0.1–2 s. The output attaches after this resolves and
   * then keeps the renderer itself; the returned function ends the hold (idempotent). Rejects when `signal` aborts.
   */
  async holdPictures(signal?: AbortSignal): Promise<() => void> {
    this.holds++;
    let held = true;
    const release = () => {
      if (!held) return;
      held = false;
      this.holds--;
      this.outputsChanged();
    };
    try {
      if (!this.server) {
        this.outputsChanged();
        await this.firstPicture(signal);
      }
    } catch (error) {
      release();
      throw error;
    }
    return release;
  }

  /** The session's end: the server renderer goes and no new one opens. */
  async release(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.closing.abort();
    this.poses.close();
    await this.opening?.catch(() => undefined);
    await this.closeServer();
  }

  /** Whether a server-side output (the clock's `video` tap, a send-only WebRTC feed) wants pictures now. */
  private outputsWantPictures(): boolean {
    return this.holds > 0 || (this.playout?.listenerCount('video') ?? 0) > 0 || (this.output?.feedCount ?? 0) > 0;
  }

  /** Resolves at the clock's next picture, after `OUTPUT_PICTURES_WAIT_MS`, or when the session ends. */
  private firstPicture(signal?: AbortSignal): Promise<void> {
    const playout = this.playout;
    if (!playout || this.closed) return Promise.resolve();
    signal?.throwIfAborted();
    return new Promise((resolve, reject) => {
      const settle = (error?: unknown) => {
        clearTimeout(timer);
        playout.off('video', onPicture);
        signal?.removeEventListener('abort', onAbort);
        this.closing.signal.removeEventListener('abort', onPicture);
        if (error === undefined) resolve();
        else reject(error);
      };
      const onPicture = () => settle();
      const onAbort = () => settle(signal?.reason);
      // Listening to the clock's `video` tap is itself a want for pictures: it cannot close the renderer it waits on.
      playout.on('video', onPicture);
      const timer = setTimeout(() => {
        this.logger.warn({ waitedMs: OUTPUT_PICTURES_WAIT_MS }, 'output started before the server renderer drew');
        settle();
      }, OUTPUT_PICTURES_WAIT_MS);
      signal?.addEventListener('abort', onAbort, { once: true });
      this.closing.signal.addEventListener('abort', onPicture, { once: true });
    });
  }

  private async openServer(): Promise<void> {
    try {
      const renderer = await this.options.openServerRenderer(this.closing.signal);
      const stillWanted = !this.closed && this.outputsWantPictures();
      if (!stillWanted) {
        await renderer.close();
        return;
      }
      this.server = renderer;
      this.frames.renderOnServer(renderer);
      // Frames asked for already carried no picture: the clock asks for them again (their poses go again too).
      this.playout!.useRenderer(this);
      this.logger.info('server renderer opened for outputs of a client-rendered session');
    } catch (error) {
      if (!this.closed) this.logger.error({ err: errorForLog(error) }, 'server renderer for outputs failed to open');
    }
  }

  private async closeServer(): Promise<void> {
    const server = this.server;
    if (!server) return;
    this.server = null;
    this.frames.renderOnServer(null);
    await server.close();
    if (!this.closed) this.logger.info('server renderer closed: no output of the client-rendered session left');
  }
}
