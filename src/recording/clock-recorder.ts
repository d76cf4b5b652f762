import type { I420Frame } from '../../actors/render/types.ts';
import { Mp4Encoder, type Mp4EncoderOptions } from './encoder.ts';
import { isPooledFrame } from '../../actors/render/frame-buffers.ts';
import type { CaptionCue } from '../../actors/media/playout.ts';

/**
 * What a recording taps: the session's media clock and its frame size. It records the frames and audio chunks the
 * clock sends, at their presentation time (`video`), so audio and video share one timeline in the file; the wire
 * copy of a frame (`videoOut`) only leaves SERVICE_VIDEO_DELAY_MS later to meet its audio at the viewer.
 */
export interface RecordableClock {
  readonly fps: number;
  readonly sampleRate: number;
  on(event: 'audio', listener: (samples: Int16Array, sampleRate: number, mediaMs: number) => void): unknown;
  on(event: 'video', listener: (frame: I420Frame, frameIdx: number, mediaMs: number) => void): unknown;
  off(event: 'audio', listener: (samples: Int16Array, sampleRate: number, mediaMs: number) => void): unknown;
  off(event: 'video', listener: (frame: I420Frame, frameIdx: number, mediaMs: number) => void): unknown;
  /** Captions as they start to be heard (`captions.ts` writes them beside the MP4 as WebVTT). */
  on(event: 'caption', listener: (cue: CaptionCue) => void): unknown;
  off(event: 'caption', listener: (cue: CaptionCue) => void): unknown;
}

export interface RecordableMedia {
  readonly playout: RecordableClock;
  readonly width: number;
  readonly height: number;
  /**
   * Resolves once the clock sends pictures (a client-rendered session opens a server renderer for its outputs, which
   * takes 0.1–2 s), bounded by the media; the returned function is called once the recorder (or a push) is attached.
   * Absent: the clock draws already.
   */
  holdPictures?(signal?: AbortSignal): Promise<() => void>;
}

/**
 * Video may lag audio by render latency; past this much audio without a frame (a stalled or failed
 * renderer) the last frame is repeated, as a viewer would see it frozen, so buffered audio stays bounded.
 */
const MAX_VIDEO_LAG_MS = 500;
/** On stop, how long to wait for the very first frame (renderer warm-up) before giving up on the recording. */
const FIRST_FRAME_WAIT_MS = 2_000;
/** If the clock emits no audio for this long it has been closed (it emits silence while idle). */
const CLOCK_SILENT_MS = 1_500;
const WATCHDOG_EVERY_MS = 250;

export class NoFramesError extends Error {
  constructor() {
    super('no video frame was rendered while recording');
    this.name = 'NoFramesError';
  }
}

interface PendingAudio {
  /** Clock sample index of pcm[0]. */
  start: number;
  pcm: Int16Array;
}

/**
 * Records one stretch of a session's playout clock into an MP4.
 *
 * Sync rule: the file starts at the presentation time of the first clock frame at or after the first audio
 * chunk heard (the origin); audio before it is trimmed. Output frame j is clock frame k0+j — a frame the
 * clock dropped (failed render) is filled by repeating the previous one — and audio is written only up to
 * the end of the frames written so far, with gaps filled by silence. So both streams share one origin and
 * one timeline, and at stop the audio is cut to the video's length.
 */
export class ClockRecorder {
  private readonly encoder: Mp4Encoder;
  private readonly sampleRate: number;
  private readonly fps: number;
  private origin: number | null = null;
  private firstIdx = 0;
  private firstAudioSample: number | null = null;
  private lastIdx = -1;
  private lastFrame: Uint8Array | null = null;
  /** Next clock sample to write. */
  private audioCursor = 0;
  private readonly pendingAudio: PendingAudio[] = [];
  private lastAudioAt = performance.now();
  private readonly watchdog: NodeJS.Timeout;
  private detached = false;
  private stopping: Promise<number> | null = null;
  private firstFrameWaiters: Array<() => void> = [];
  private readonly onAudio = (samples: Int16Array, sampleRate: number, mediaMs: number) =>
    this.handleAudio(samples, sampleRate, mediaMs);
  private readonly onVideo = (frame: I420Frame, frameIdx: number, mediaMs: number) =>
    this.handleVideo(frame, frameIdx, mediaMs);

  constructor(
    private readonly media: RecordableMedia,
    outPath: string,
    /** Called once if the clock goes quiet (session closed without telling us). */
    private readonly onClockGone: () => void,
    /** A live stream (RTMP, `Mp4EncoderOptions.live`) instead of an MP4 file at `outPath`. */
    live?: Mp4EncoderOptions['live'],
  ) {
    this.sampleRate = media.playout.sampleRate;
    this.fps = media.playout.fps;
    this.encoder = new Mp4Encoder({
      outPath,
      width: media.width,
      height: media.height,
      fps: this.fps,
      sampleRate: this.sampleRate,
      live,
    });
    media.playout.on('audio', this.onAudio);
    media.playout.on('video', this.onVideo);
    this.watchdog = setInterval(() => {
      if (!this.detached && performance.now() - this.lastAudioAt > CLOCK_SILENT_MS) this.onClockGone();
    }, WATCHDOG_EVERY_MS);
    this.watchdog.unref();
  }

  /** Resolves when the encoder's ffmpeg exits (a live stream: its server refused or dropped it). */
  whenEncoderExited(): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
    return this.encoder.whenExited();
  }

  /** A live stream: resolves once ffmpeg wrote to its output (the RTMP handshake and publish completed). */
  whenEncoderOutputWritten(): Promise<void> {
    return this.encoder.whenOutputWritten();
  }

  /** Bytes queued for ffmpeg and not yet read (it stalls when a live stream's server does). */
  get bufferedBytes(): number {
    return this.encoder.bufferedBytes;
  }

  get framesWritten(): number {
    return this.encoder.framesWritten;
  }

  /** Where the file starts on the media clock, ms (null until the first frame is recorded). */
  get originMs(): number | null {
    return this.origin === null ? null : (this.origin * 1000) / this.sampleRate;
  }

  /** Length of what is recorded so far (the video timeline), ms. */
  get durationMs(): number {
    return Math.round((this.encoder.framesWritten * 1000) / this.fps);
  }

  /** Stops tapping, cuts the audio to the video and finalises the file; resolves with the duration in ms. */
  stop(): Promise<number> {
    this.stopping ??= this.finalise();
    return this.stopping;
  }

  /** Drops the recording and its partial file. */
  async abort(): Promise<void> {
    this.detach();
    await this.encoder.abort();
  }

  private async finalise(): Promise<number> {
    if (this.origin === null) await this.waitForFirstFrame();
    this.detach();
    if (this.origin === null) {
      await this.encoder.abort();
      throw new NoFramesError();
    }
    this.writeAudioUpTo(this.videoEndSample(), true);
    await this.encoder.finish();
    return this.durationMs;
  }

  private waitForFirstFrame(): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, FIRST_FRAME_WAIT_MS);
      this.firstFrameWaiters.push(() => {
        clearTimeout(timer);
        resolve();
      });
    });
  }

  private detach(): void {
    if (this.detached) return;
    this.detached = true;
    clearInterval(this.watchdog);
    this.media.playout.off('audio', this.onAudio);
    this.media.playout.off('video', this.onVideo);
  }

  private toSamples(ms: number): number {
    return Math.round((ms * this.sampleRate) / 1000);
  }

  private videoEndSample(): number {
    return (this.origin ?? 0) + Math.round((this.encoder.framesWritten * this.sampleRate) / this.fps);
  }

  private handleAudio(samples: Int16Array, sampleRate: number, mediaMs: number): void {
    if (this.detached || sampleRate !== this.sampleRate) return;
    this.lastAudioAt = performance.now();
    const start = this.toSamples(mediaMs);
    this.firstAudioSample ??= start;
    // Copy: the clock rewrites its chunk buffer for the next chunk, and this one may be held until its video arrives.
    this.pendingAudio.push({ start, pcm: samples.slice() });
    if (this.origin === null) return;
    const lagSamples = start + samples.length - this.videoEndSample();
    if (lagSamples > this.toSamples(MAX_VIDEO_LAG_MS) && this.lastFrame) {
      const behindFrames = Math.ceil((lagSamples * this.fps) / this.sampleRate);
      for (let i = 0; i < behindFrames; i++) this.pushFrame(this.lastFrame);
      this.lastIdx += behindFrames;
    }
    this.writeAudioUpTo(this.videoEndSample(), false);
  }

  private handleVideo(frame: I420Frame, frameIdx: number, mediaMs: number): void {
    if (this.detached) return;
    const pts = this.toSamples(mediaMs);
    if (this.origin === null) {
      // A frame whose time was before we started listening belongs to the past; wait for one in our window.
      if (this.firstAudioSample === null || pts < this.firstAudioSample) return;
      this.origin = pts;
      this.firstIdx = frameIdx;
      this.lastIdx = frameIdx - 1;
      this.audioCursor = pts;
      for (const wake of this.firstFrameWaiters.splice(0)) wake();
    }
    if (frameIdx <= this.lastIdx) return; // already covered by a repeated frame
    // A live frame's buffer is reused once the clock is done with it (`frame-buffers.ts`), while the recorder keeps
    // this one as its last frame and on the encoder's pipe: keep a copy.
    const fits = frame.width === this.media.width && frame.height === this.media.height;
    const data = fits ? (isPooledFrame(frame) ? frame.data.slice() : frame.data) : this.lastFrame;
    if (!data) return;
    // Frames the clock dropped (failed renders) were never shown; the viewer kept the previous one.
    while (this.lastIdx < frameIdx - 1 && this.lastFrame) {
      this.pushFrame(this.lastFrame);
      this.lastIdx++;
    }
    this.lastFrame = data;
    this.pushFrame(data);
    this.lastIdx = frameIdx;
    this.writeAudioUpTo(this.videoEndSample(), false);
  }

  private pushFrame(data: Uint8Array): void {
    this.encoder.pushFrame(data);
  }

  /** Writes contiguous audio from the cursor up to `end` (clock samples); pads with silence where the clock had no chunk. */
  private writeAudioUpTo(end: number, padToEnd: boolean): void {
    while (this.audioCursor < end) {
      const next = this.pendingAudio[0];
      if (!next) {
        if (padToEnd) this.pushAudio(new Int16Array(end - this.audioCursor));
        if (padToEnd) this.audioCursor = end;
        return;
      }
      const chunkEnd = next.start + next.pcm.length;
      if (chunkEnd <= this.audioCursor) {
        this.pendingAudio.shift();
        continue;
      }
      if (next.start > this.audioCursor) {
        const gap = Math.min(next.start, end) - this.audioCursor;
        this.pushAudio(new Int16Array(gap));
        this.audioCursor += gap;
        continue;
      }
      const from = this.audioCursor - next.start;
      const to = Math.min(next.pcm.length, end - next.start);
      this.pushAudio(next.pcm.subarray(from, to));
      this.audioCursor += to - from;
      if (to >= next.pcm.length) this.pendingAudio.shift();
    }
  }

  private pushAudio(pcm: Int16Array): void {
    this.encoder.pushAudio(pcm);
  }
}
