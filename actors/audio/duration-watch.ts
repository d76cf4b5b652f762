/**
 * Tells, while an upload is still arriving, that it will decode past a duration bound, so the HTTP edge can refuse
 * it at once instead of reading megabytes only to refuse them after the decode (issue 25: 3.6 MB of 8 kb/s MP3 is
 * an hour). It reads containers, never samples, so each chunk costs the event loop a few header reads:
 *
 * - WAV: the fmt and data chunk headers give the byte rate and the data size; a streamed WAV without a size
 *   is counted as its data arrives;
 * - MP3: a Xing/Info (or VBRI) frame count refuses at the first frame; otherwise the frame headers are walked
 *   as they arrive (each frame holds a fixed number of samples, whatever its bitrate), so a lying or missing
 *   count cannot hide the length;
 * - anything else (raw PCM, a format the decoder will refuse): no opinion; the byte bound and the decoder's own
 *   duration bound still hold.
 *
 * It only refuses what is certainly too long; whatever it lets through is still bounded by the decoder.
 */
import {
  afterId3v2,
  AudioTooLongError,
  looksLikeMp3,
  maxFramesAt,
  mp3DeclaredDuration,
  mpegFrameLength,
  mpegFrameTiming,
} from './decode.ts';
import { InvalidAudioError, isWav, readWavHeader } from './wav.ts';

/**
 * Leading bytes kept to read a container's header: a WAV's fmt and data chunk headers behind any LIST/bext
 * chunks, an MP3's ID3v2 header and first frames. 16 KiB holds those in every real file; a header that is still
 * incomplete past it (e.g. an ID3 tag with cover art) leaves the file to the decoder's bound.
 */
export const DURATION_WATCH_HEAD_BYTES = 16 * 1024;
/** RIFF + fmt + data headers of the smallest WAV, and the ID3v2 header or two MPEG frame headers of an MP3. */
const MIN_HEAD_BYTES = 44;
const MPEG_HEADER_BYTES = 4;
/** What a WAV's data size field holds when the writer streamed it and did not know it (`wav.ts`). */
const UNKNOWN_WAV_DATA_SIZES = new Set([0, 0xffffffff]);

type Watching =
  | { kind: 'head' }
  | { kind: 'off' }
  | { kind: 'wav'; dataEndLimit: number }
  | { kind: 'mp3'; nextFrameAt: number; frames: number; samples: number; sampleRate: number };

export class DecodedDurationWatch {
  private state: Watching = { kind: 'head' };
  private head: Uint8Array = new Uint8Array(0);
  private received = 0;
  /** The last bytes before `received`, for a frame header that straddles two chunks. */
  private tail: Uint8Array = new Uint8Array(0);
  private readonly header = new Uint8Array(MPEG_HEADER_BYTES);

  constructor(private readonly maxDurationMs: number) {}

  /** Takes the upload's next bytes; throws `AudioTooLongError` once they show it decodes past the bound. */
  push(chunk: Uint8Array): void {
    const chunkAt = this.received;
    this.received += chunk.length;
    if (this.state.kind === 'head') {
      const taken = chunk.subarray(0, DURATION_WATCH_HEAD_BYTES - this.head.length);
      this.head = concat(this.head, taken);
      this.state = this.readHead();
      if (this.state.kind === 'mp3') {
        // Frames from the start: the head holds every byte so far, then the rest of this chunk follows it.
        const rest = chunk.subarray(taken.length);
        this.walkFrames(this.head, 0);
        this.tail = lastBytes(new Uint8Array(0), this.head);
        this.walkFrames(rest, this.head.length);
        this.tail = lastBytes(this.tail, rest);
        return;
      }
    } else if (this.state.kind === 'mp3') {
      this.walkFrames(chunk, chunkAt);
      this.tail = lastBytes(this.tail, chunk);
      return;
    }
    if (this.state.kind === 'wav' && this.received > this.state.dataEndLimit)
      throw new AudioTooLongError(this.maxDurationMs);
  }

  private readHead(): Watching {
    const complete = this.head.length >= DURATION_WATCH_HEAD_BYTES;
    if (this.head.length < MIN_HEAD_BYTES) return { kind: 'head' };
    if (isWav(this.head)) return this.readWavHead(complete);
    // Two MPEG frame headers (or an ID3v2 one) may need a few more chunks; past the head bound it is not MP3.
    if (!looksLikeMp3(this.head)) return complete ? { kind: 'off' } : { kind: 'head' };
    const start = afterId3v2(this.head);
    const firstFrame = mpegFrameLength(this.head, start);
    const firstFrameIncomplete =
      start + MPEG_HEADER_BYTES > this.head.length ||
      (firstFrame !== undefined && start + firstFrame > this.head.length);
    // Its Xing/Info count sits in the first frame: wait for all of it (within the head bound).
    if (firstFrameIncomplete && !complete) return { kind: 'head' };
    const declared = mp3DeclaredDuration(this.head);
    if (declared && declared.samples > maxFramesAt(declared.sampleRate, this.maxDurationMs))
      throw new AudioTooLongError(this.maxDurationMs);
    return { kind: 'mp3', nextFrameAt: start, frames: 0, samples: 0, sampleRate: 0 };
  }

  private readWavHead(complete: boolean): Watching {
    let header;
    try {
      header = readWavHeader(this.head);
    } catch (error) {
      // No data chunk header yet: wait for more, up to the head bound.
      if (error instanceof InvalidAudioError && !complete) return { kind: 'head' };
      return { kind: 'off' };
    }
    const maxFrames = maxFramesAt(header.sampleRate, this.maxDurationMs);
    if (UNKNOWN_WAV_DATA_SIZES.has(header.declaredDataBytes)) {
      return { kind: 'wav', dataEndLimit: header.dataOffset + maxFrames * Math.max(1, header.blockAlign) };
    }
    if (Math.floor(header.declaredDataBytes / Math.max(1, header.blockAlign)) > maxFrames)
      throw new AudioTooLongError(this.maxDurationMs);
    // A declared size inside the bound: the decoder refuses a file that holds more or less than it declares.
    return { kind: 'off' };
  }

  /** Counts the frames whose headers end in `chunk` (byte `chunkAt` of the upload onwards). */
  private walkFrames(chunk: Uint8Array, chunkAt: number): void {
    const mp3 = this.state;
    if (mp3.kind !== 'mp3') return;
    while (mp3.nextFrameAt + MPEG_HEADER_BYTES <= chunkAt + chunk.length) {
      for (let i = 0; i < MPEG_HEADER_BYTES; i++) this.header[i] = this.byteAt(mp3.nextFrameAt + i, chunk, chunkAt);
      const length = mpegFrameLength(this.header, 0);
      if (length === undefined) {
        // Not a clean run of frames (junk between frames, a trailing tag): the decoder's own bound decides.
        this.state = { kind: 'off' };
        return;
      }
      const { sampleRate, samplesPerFrame } = mpegFrameTiming(this.header, 0);
      if (mp3.sampleRate !== 0 && sampleRate !== mp3.sampleRate) {
        this.state = { kind: 'off' };
        return;
      }
      mp3.sampleRate = sampleRate;
      mp3.frames++;
      // The first frame may be an Info frame without audio; it is not counted, so this never refuses what decodes inside the bound.
      if (mp3.frames > 1) mp3.samples += samplesPerFrame;
      if (mp3.samples > maxFramesAt(sampleRate, this.maxDurationMs)) throw new AudioTooLongError(this.maxDurationMs);
      mp3.nextFrameAt += length;
    }
  }

  /** Byte `at` of the upload: in `chunk`, or (for a header straddling the seam) in the tail of the chunks before it. */
  private byteAt(at: number, chunk: Uint8Array, chunkAt: number): number {
    if (at >= chunkAt) return chunk[at - chunkAt];
    return this.tail[this.tail.length - (chunkAt - at)];
  }
}

/** The last few bytes of `before` followed by `chunk` (a copy: enough for a frame header across the seam). */
function lastBytes(before: Uint8Array, chunk: Uint8Array): Uint8Array {
  const keep = MPEG_HEADER_BYTES - 1;
  if (chunk.length >= keep) return chunk.slice(chunk.length - keep);
  return concat(before, chunk).slice(-keep);
}

function concat(a: Uint8Array, b: Uint8Array): Uint8Array {
  if (a.length === 0) return b;
  if (b.length === 0) return a;
  const joined = new Uint8Array(a.length + b.length);
  joined.set(a);
  joined.set(b, a.length);
  return joined;
}
