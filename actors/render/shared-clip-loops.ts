/**
 * Video avatars' loops, decoded once per avatar and shared by every session and render worker showing it.
 *
 * A session opening a video avatar acquires its loop here (`RenderPool.open`, before the session reports ready):
 * the first reads the bundle's PNGs and has one render worker decode them to I420 into a SharedArrayBuffer; every
 * later session on the same avatar gets the same loop without reading or decoding anything, and every render
 * worker renders from views of that memory (`clipLoopView`), so a worker that never prepared the avatar renders
 * its first frame without decoding. The PNGs are dropped once decoded. The last session to close releases the
 * loop: it leaves the accounting at once, and each worker drops what it built on it at its next task (the
 * `released` flag), which frees the memory.
 */
import {
  CLIP_LOOP_AVATAR_BYTES,
  CLIP_LOOP_TOTAL_BYTES,
  loopLayout,
  loopTrack,
  newSharedLoop,
  readClipSource,
  type ClipSource,
} from './clip-loop.ts';
import { i420Size } from './i420.ts';
import type { AvatarSource, SharedClipLoopData } from './types.ts';
import { abortReasonAsError, untilAborted } from '../upstream/abort.ts';

/** Decodes `clip`'s held frames into `loop.frames` off the main thread (the render pool's `decode_loop` task). */
export type DecodeLoop = (clip: ClipSource, loop: SharedClipLoopData, avatar: AvatarSource) => Promise<void>;

/** One session's hold on a loop; `release` is idempotent. `loop` is undefined when not one frame fitted the bound. */
export interface ClipLoopLease {
  readonly loop: SharedClipLoopData | undefined;
  release(): void;
}

interface Entry {
  refs: number;
  /** Decoded bytes reserved for it (counted from the moment it is asked for, so concurrent opens cannot overbook). */
  bytes: number;
  ready: Promise<SharedClipLoopData | undefined>;
}

export class SharedClipLoops {
  private readonly loops = new Map<string, Entry>();
  /** Loops decoded so far (tests and diagnostics: sessions on one avatar decode it once). */
  decodes = 0;

  constructor(
    private readonly decode: DecodeLoop,
    private readonly totalBytes = CLIP_LOOP_TOTAL_BYTES,
  ) {}

  /** Decoded bytes held (or being decoded) for open sessions. */
  get bytes(): number {
    let total = 0;
    for (const entry of this.loops.values()) total += entry.bytes;
    return total;
  }

  /** Avatars whose loop is held. */
  get size(): number {
    return this.loops.size;
  }

  /**
   * The loop of video avatar `source` (its content identified by `key`), decoded if no session holds it yet.
   * `signal` stops this caller waiting; the decode itself goes on for the others waiting on it.
   */
  async acquire(key: string, source: AvatarSource, signal?: AbortSignal): Promise<ClipLoopLease> {
    let entry = this.loops.get(key);
    if (!entry) entry = this.start(key, source);
    entry.refs++;
    const held = entry;
    let released = false;
    const release = () => {
      if (released) return;
      released = true;
      this.releaseRef(key, held);
    };
    try {
      const loop = await (signal
        ? untilAborted(held.ready, signal, (s) => abortReasonAsError(s, 'render aborted'))
        : held.ready);
      return { loop, release };
    } catch (error) {
      release();
      throw error;
    }
  }

  private start(key: string, source: AvatarSource): Entry {
    const { width, height } = source.manifest;
    const frameCount = source.manifest.metadata.clip?.frame_count ?? 0;
    const layout = loopLayout(
      frameCount,
      width,
      height,
      Math.min(CLIP_LOOP_AVATAR_BYTES, this.totalBytes - this.bytes),
    );
    const entry: Entry = {
      refs: 0,
      bytes: layout ? layout.held * i420Size(width, height) : 0,
      ready: Promise.resolve(undefined),
    };
    entry.ready = this.load(source, entry);
    this.loops.set(key, entry);
    // A failed decode is not kept: the next session tries again.
    entry.ready.catch(() => {
      if (this.loops.get(key) === entry) this.loops.delete(key);
    });
    return entry;
  }

  private async load(source: AvatarSource, entry: Entry): Promise<SharedClipLoopData | undefined> {
    const { width, height } = source.manifest;
    if (entry.bytes === 0) return undefined;
    const clip = source.clip ?? (await readClipSource(source.dir, source.manifest));
    if (!clip) return undefined;
    const track = loopTrack(clip);
    const layout = loopLayout(track.length, width, height, entry.bytes);
    if (!layout) throw new Error('video avatar has no loop frames');
    entry.bytes = layout.held * i420Size(width, height);
    const loop = newSharedLoop(clip, track.length, width, height, layout);
    this.decodes++;
    const { clip: _pngs, ...avatar } = source;
    await this.decode(clip, loop, avatar);
    return loop;
  }

  private releaseRef(key: string, entry: Entry): void {
    entry.refs--;
    if (entry.refs > 0) return;
    if (this.loops.get(key) === entry) this.loops.delete(key);
    // Workers drop their views at their next task; one still decoding into it finishes first.
    entry.ready.then((loop) => loop && Atomics.store(loop.released, 0, 1)).catch(() => undefined);
  }
}
