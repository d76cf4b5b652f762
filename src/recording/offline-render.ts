import { CLOSED_MOUTH, type FrameRequest, type MouthPose } from '../../actors/render/types.ts';
import type { FrameRenderer } from '../../actors/media/playout.ts';
import { Mp4Encoder } from './encoder.ts';

/** One stretch of the offline timeline: speech with its mouth track, or a pause (`mouth` null). */
export interface TimelinePiece {
  pcm: Int16Array;
  mouth: { poseAt(ms: number): MouthPose; levelAt(ms: number): number } | null;
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

interface Span {
  start: number;
  end: number;
  mouth: TimelinePiece['mouth'];
}

/** Total samples and where each piece sits, in samples from the start of the video. */
export function layoutTimeline(pieces: TimelinePiece[]): { spans: Span[]; totalSamples: number } {
  const spans: Span[] = [];
  let cursor = 0;
  for (const piece of pieces) {
    if (piece.pcm.length === 0) continue;
    spans.push({ start: cursor, end: cursor + piece.pcm.length, mouth: piece.mouth });
    cursor += piece.pcm.length;
  }
  return { spans, totalSamples: cursor };
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
  const { spans, totalSamples } = layoutTimeline(pieces);
  const frameCount = Math.max(1, Math.ceil((totalSamples * fps) / sampleRate));
  const frameStart = (idx: number) => Math.round((idx * sampleRate) / fps);
  const batch = Math.max(1, options.batchFrames ?? DEFAULT_BATCH_FRAMES);

  const requestFor = (frameIdx: number): FrameRequest => {
    const pts = frameStart(frameIdx);
    const ptsMs = (pts * 1000) / sampleRate;
    const span = spans.find((s) => pts >= s.start && pts < s.end);
    if (!span?.mouth) return { frameIdx, ptsMs, mouth: CLOSED_MOUTH, level: 0, speaking: false };
    const ms = ((pts - span.start) * 1000) / sampleRate;
    return { frameIdx, ptsMs, mouth: span.mouth.poseAt(ms), level: span.mouth.levelAt(ms), speaking: true };
  };
  const renderBatch = (from: number) => {
    const requests: FrameRequest[] = [];
    for (let idx = from; idx < Math.min(frameCount, from + batch); idx++) requests.push(requestFor(idx));
    return renderer.render(requests, signal);
  };

  const audio = new AudioReader(pieces);
  const encoder = new Mp4Encoder({ outPath, width: renderer.width, height: renderer.height, fps, sampleRate });
  try {
    let next: Promise<unknown> | null = renderBatch(0);
    for (let from = 0; from < frameCount; from += batch) {
      signal.throwIfAborted();
      const frames = (await next) as Array<{ data: Uint8Array }>;
      const upTo = Math.min(frameCount, from + batch);
      next = upTo < frameCount ? renderBatch(upTo) : null;
      // A rejected look-ahead is reported when awaited; this keeps it from counting as unhandled meanwhile.
      (next as Promise<unknown> | null)?.catch(() => undefined);
      if (frames.length !== upTo - from) throw new Error(`renderer returned ${frames.length} frames for ${upTo - from} requests`);
      for (let i = 0; i < frames.length; i++) {
        const idx = from + i;
        // Both writes are handed over before waiting: awaiting one pipe's drain while ffmpeg waits on
        // the other would deadlock.
        await Promise.all([encoder.writeFrame(frames[i].data), encoder.writeAudio(audio.read(frameStart(idx + 1) - frameStart(idx)))]);
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
