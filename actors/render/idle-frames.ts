/**
 * Idle frames rendered once per avatar and shared by every session showing it. An idle `rt` avatar only
 * breathes and blinks: 5 breathing steps × 4 eyelid steps = 20 distinct pictures, which the media clock used
 * to ask a render worker for 25 times a second per session — a worker round trip, a fresh 384 KiB buffer and
 * the garbage collection behind it for a picture it had made many times before (docs/performance.md). The
 * render pool answers requests whose look is known from here without a worker, with the very same frame
 * object each time, which also lets the WebRTC output recognise a repeat by identity.
 *
 * Frames handed out from here are shared: nobody may write into them (no consumer does: WebRTC copies, the
 * recorder only reads, the clock only passes them on). They are never leased (`frame-buffers.ts`).
 */
import { rtLookKey } from './renderers/drawn.ts';
import { attentionMovesHead } from '../attention.ts';
import { CLOSED_MOUTH, type FrameRequest, type I420Frame, type ModelType } from './types.ts';

/**
 * Shared idle frames kept, over all avatars (least recently used go first): an `rt` avatar's idle loop is
 * 20 frames (7.5 MiB at 512²), so this holds the loops of three avatars in use at once in ~23 MiB.
 */
export const MAX_SHARED_IDLE_FRAMES = 60;

/**
 * The look of an idle frame, when the model's frames are a pure function of a few quantised steps and the
 * request shows no speech; null when the frame must be rendered (speech, or a model whose idle frames
 * carry more, e.g. the mock's timecode or rt_head's continuous head motion).
 */
export function idleLookKey(modelType: ModelType, request: FrameRequest, fps: number): string | null {
  if (request.speaking) return null;
  const { mouth } = request;
  if (mouth.open !== CLOSED_MOUTH.open || mouth.wide !== CLOSED_MOUTH.wide || mouth.round !== CLOSED_MOUTH.round)
    return null;
  // A listening nod or a thinking glance moves rt's head continuously: rendered, like speech.
  if (modelType === 'rt' && !attentionMovesHead(request.attention))
    return `rt:${rtLookKey(request, fps > 0 ? fps : 25)}`;
  return null;
}

/** The shared frames, by prepared avatar (the render pool's cache key) and look. */
export class SharedIdleFrames {
  private readonly frames = new Map<string, I420Frame>();
  hits = 0;
  misses = 0;

  constructor(private readonly capacity = MAX_SHARED_IDLE_FRAMES) {}

  get size(): number {
    return this.frames.size;
  }

  get(avatarKey: string, look: string): I420Frame | undefined {
    const key = `${avatarKey}|${look}`;
    const frame = this.frames.get(key);
    if (!frame) {
      this.misses++;
      return undefined;
    }
    this.hits++;
    // Refresh its place in the LRU order.
    this.frames.delete(key);
    this.frames.set(key, frame);
    return frame;
  }

  set(avatarKey: string, look: string, frame: I420Frame): void {
    this.frames.set(`${avatarKey}|${look}`, frame);
    while (this.frames.size > this.capacity) this.frames.delete(this.frames.keys().next().value as string);
  }

  clear(): void {
    this.frames.clear();
  }
}
