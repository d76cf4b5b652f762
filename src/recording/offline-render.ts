import type { FrameRequest } from '../../actors/render/types.ts';
import type { FrameRenderer } from '../../actors/media/playout.ts';
import { FrameTimeline, framesCovering, type AudioWindow, type MouthSource } from '../../actors/media/timeline.ts';
import { Mp4Encoder } from './encoder.ts';

/** One stretch of the offline timeline: speech with its mouth track, or a pause (`mouth` null). */
export interface TimelinePiece {
  pcm: Int16Array;
  mouth: MouthSource | null;
  /** On a sentence's first piece: the sentence's text, which the bundle's captions show (`offlineCaptions`). */
  caption?: string;
}

export interface OfflineRenderOptions {
  renderer: FrameRenderer;
  sampleRate: number;
  pieces: TimelinePiece[];
  outPath: string;
  signal: AbortSignal;
  /** Fraction of frames encoded so far, 0..1. */
  onProgress?(fraction: number): void;
  /** Frames per render call: big enough to keep every pool worker busy, small enough to keep memory flat. */
  batchFrames?: number;
}

const DEFAULT_BATCH_FRAMES = 16;
/**
 * Batches requested ahead of the one being written: the render workers keep rendering while the main
 * thread hands frames to ffmpeg, and memory stays bounded (3 × 16 frames ≈ 18 MiB at 512²).
 */
const RENDER_AHEAD_BATCHES = 2;
/**
 * x264 preset for offline bundles. Measured on the 2-core machine (docs/performance.md): `superfast` was the
 * fastest end to end for every model (mock 21–23×, lipsync 24–27× real time, against 17–18× / 22–23× with
 * `veryfast`); `ultrafast` encodes faster still but its larger stream made photo avatars slower overall
 * (lipsync 17–18×). Live recordings keep the encoder's default, which only has to keep up with real time.
 */
export const OFFLINE_X264_PRESET = 'superfast';

/**
 * The pieces laid end to end on the same frame timeline live playout uses (`actors/media/timeline.ts`):
 * frame times, mouth poses and prosody come from the same code, so a bundle shows what a live session would.
 */
export function offlineTimeline(
  pieces: TimelinePiece[],
  sampleRate: number,
  fps: number,
  audioWindow?: AudioWindow,
): { timeline: FrameTimeline; totalSamples: number } {
  const timeline = new FrameTimeline(sampleRate, fps);
  // Requests carry the audio around their frame when the renderer asks for it (neural lip-sync reads a mel window).
  timeline.setAudioWindow(audioWindow);
  for (const piece of pieces)
    timeline.append(piece.pcm.length, piece.mouth, null, 0, audioWindow ? piece.pcm : undefined);
  return { timeline, totalSamples: timeline.endSample };
}

/**
 * Renders a whole timeline to MP4 as fast as the renderer allows: frames are requested in batches (the
 * next batch renders while the previous one is written) and audio is written frame-period by frame-period
 * alongside, so the streams share one timeline and memory stays flat. The video is one frame per
 * `1/fps` covering all the audio; the audio is padded with silence to the video's length.
 * Resolves with the video duration in ms.
 */
export async function renderOfflineMp4(options: OfflineRenderOptions): Promise<number> {
  const { renderer, sampleRate, pieces, outPath, signal } = options;
  const fps = renderer.fps;
  const { timeline, totalSamples } = offlineTimeline(pieces, sampleRate, fps, renderer.audioWindow);
  const frameCount = framesCovering(totalSamples, sampleRate, fps);
  const frameStart = (idx: number) => timeline.frameStart(idx);
  const batch = Math.max(1, options.batchFrames ?? DEFAULT_BATCH_FRAMES);

  // Batches are built in frame order, and each frame is committed as it is built, as live playout commits a
  // frame when it leaves: prosody runs on without a break across batches.
  const renderBatch = (from: number) => {
    const requests: FrameRequest[] = [];
    for (let idx = from; idx < Math.min(frameCount, from + batch); idx++) {
      const { turn: _turn, ...request } = timeline.requestFor(idx);
      timeline.commit(request);
      requests.push(request);
    }
    return renderer.render(requests, signal);
  };

  const audio = new AudioReader(pieces);
  const encoder = new Mp4Encoder({
    outPath,
    width: renderer.width,
    height: renderer.height,
    fps,
    sampleRate,
    preset: OFFLINE_X264_PRESET,
  });
  // Batches in flight, in frame order: the one to write next first.
  const ahead: Array<Promise<Array<{ data: Uint8Array }>>> = [];
  let requestedUpTo = 0;
  const requestAhead = () => {
    while (ahead.length <= RENDER_AHEAD_BATCHES && requestedUpTo < frameCount) {
      const next = renderBatch(requestedUpTo);
      // A rejected look-ahead is reported when awaited; this keeps it from counting as unhandled meanwhile.
      next.catch(() => undefined);
      ahead.push(next);
      requestedUpTo = Math.min(frameCount, requestedUpTo + batch);
    }
  };
  try {
    requestAhead();
    for (let from = 0; from < frameCount; from += batch) {
      signal.throwIfAborted();
      const frames = await ahead.shift()!;
      const upTo = Math.min(frameCount, from + batch);
      requestAhead();
      if (frames.length !== upTo - from)
        throw new Error(`renderer returned ${frames.length} frames for ${upTo - from} requests`);
      for (let i = 0; i < frames.length; i++) {
        const idx = from + i;
        // Both writes are handed over before waiting: awaiting one pipe's drain while ffmpeg waits on
        // the other would deadlock.
        await Promise.all([
          encoder.writeFrame(frames[i].data),
          encoder.writeAudio(audio.read(frameStart(idx + 1) - frameStart(idx))),
        ]);
      }
      options.onProgress?.(upTo / frameCount);
    }
    await encoder.finish(signal);
  } catch (error) {
    await encoder.abort();
    throw error;
  }
  return Math.round((frameCount * 1000) / fps);
}

/** Reads the pieces' PCM as one stream, zero-filled past the end. */
class AudioReader {
  private piece = 0;
  private offset = 0;

  constructor(private readonly pieces: TimelinePiece[]) {}

  read(count: number): Int16Array {
    const out = new Int16Array(count);
    let filled = 0;
    while (filled < count && this.piece < this.pieces.length) {
      const pcm = this.pieces[this.piece].pcm;
      const take = Math.min(count - filled, pcm.length - this.offset);
      out.set(pcm.subarray(this.offset, this.offset + take), filled);
      filled += take;
      this.offset += take;
      if (this.offset >= pcm.length) {
        this.piece++;
        this.offset = 0;
      }
    }
    return out;
  }
}
