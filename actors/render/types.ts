/**
 * The shared renderer interface. One renderer per model type (`actors/render/renderers/<model>.ts`);
 * renderers run inside piscina workers (`actors/render-backends/worker.ts`) and are pure functions of
 * (prepared avatar, frame request) → I420 frame, so the same renderer serves the live session,
 * recording and offline MP4 rendering.
 */
import type { ExpressionWeights } from '../expression.ts';
import type { AttentionPose } from '../attention.ts';

export const MODEL_TYPES = ['lipsync', 'lipsync_b', 'lipsync_c', 'rt', 'rt_head', 'mock'] as const;
export type ModelType = (typeof MODEL_TYPES)[number];

/** Mouth pose for one video frame; every field is 0..1. */
export interface MouthPose {
  /** Jaw drop / lip opening. */
  open: number;
  /** Lip spread (ee, s) vs. neutral. */
  wide: number;
  /** Lip rounding (oo, w). */
  round: number;
}

export const CLOSED_MOUTH: MouthPose = Object.freeze({ open: 0, wide: 0, round: 0 });

export interface FrameRequest {
  /** Session-wide monotonic frame index. */
  frameIdx: number;
  /** Presentation time on the session media clock, ms. */
  ptsMs: number;
  mouth: MouthPose;
  /** RMS level of the audio under this frame, 0..1 (drives the mock level bar and rt_head prosody). */
  level: number;
  /** True while speech audio is playing under this frame. */
  speaking: boolean;
  /**
   * Smoothed speech prosody up to this frame (see `actors/render/prosody.ts`); filled in by the render
   * pool / inline batch so head motion (rt_head) stays continuous when frames are spread over workers.
   */
  prosody?: Prosody;
  /**
   * Expression weights at this frame (`actors/expression.ts`), a pure function of the session's cues and
   * `ptsMs` filled in by the media timeline like `prosody`; absent means neutral. Renderers read them through
   * `faceExpression` (mouth curve, brow raise, brow knit).
   */
  expression?: ExpressionWeights;
  /**
   * Listening and thinking at this frame (`actors/attention.ts`): a pure function of the session's attention cues and
   * `ptsMs`, filled in by the media timeline like `expression`; absent means neither. Renderers move their head layer
   * by it (a nod, a glance aside or up, a tilt), scaled by `motion`, and damp their idle drift while listening.
   */
  attention?: AttentionPose;
  /**
   * The session's `motion` option, 0..1 (absent: 1): scales idle sway, breathing, nods and head motion with speech;
   * at 0 only blinks and the mouth move.
   */
  motion?: number;
  /**
   * The audio around this frame, only for renderers that ask for it (`FrameRenderer.audioWindow`, neural
   * lip-sync) and only when speech plays somewhere in that window; silence where nothing plays.
   */
  audio?: FrameAudio;
}

/** Session audio around a frame: `pcm[leadSamples]` is the sample at the frame's presentation time. */
export interface FrameAudio {
  sampleRate: number;
  pcm: Int16Array;
  leadSamples: number;
}

/** Level envelopes: `fast` follows syllables (~100 ms), `slow` follows phrases (~1 s); both 0..1. */
export interface Prosody {
  fast: number;
  slow: number;
}

export interface I420Frame {
  width: number;
  height: number;
  /** Y plane then U then V; length width*height*3/2. */
  data: Uint8Array;
}

/** What a renderer needs to prepare an avatar: the bundle directory and its validated manifest. */
export interface AvatarSource {
  id: string;
  dir: string;
  manifest: AvatarManifest;
  /**
   * The bundle's `frames/frame_00000.png`, read once when a session opens the avatar (shared memory, so
   * handing it to every render task copies nothing). Workers prepare from it, so a session keeps
   * rendering after its custom avatar's files are deleted, on any worker, however late it prepares.
   */
  framePng?: Uint8Array;
  /**
   * A video avatar's loop (`metadata.clip`): its frames' PNGs and per-frame face track, read once when a session
   * opens the avatar (shared memory, like `framePng`), so deletion mid-session changes nothing for it either.
   */
  clip?: { framePngs: Uint8Array[]; trackJson: Uint8Array; mouths?: { atlasPng: Uint8Array; indexJson: Uint8Array } };
  /**
   * A video avatar's loop decoded once for every render worker (`actors/render/shared-clip-loops.ts`): what the
   * render pool hands its tasks in place of `clip`, so no worker decodes (or even receives) the loop's PNGs.
   */
  loop?: SharedClipLoopData;
}

/** A decoded loop in shared memory: `held` I420 frames of `width`×`height`, every `stride`th of `count`. */
export interface SharedClipLoopData {
  /** The held frames one after the other, Y then U then V each. */
  frames: SharedArrayBuffer;
  width: number;
  height: number;
  /** Loop frames as listed in the bundle. */
  count: number;
  stride: number;
  held: number;
  /** The per-frame face track's JSON (`CLIP_TRACK_FILE`). */
  trackJson: Uint8Array;
  /** A speaking clip's harvested mouths (`metadata.clip.mouths`), as read into shared memory with the loop. */
  mouths?: { atlasPng: Uint8Array; indexJson: Uint8Array };
  /** One Int32: 1 once the last session on the avatar closed; workers then drop what they built on it. */
  released: Int32Array;
}

/** A video avatar's per-frame face track, next to its manifest: a JSON array of `MouthAnimation`, one per loop frame. */
export const CLIP_TRACK_FILE = 'face_track.json';
/** A video avatar's harvested mouths (`metadata.clip.mouths`, `actors/render/harvested-mouths.ts`): their index and atlas. */
export const MOUTHS_INDEX_FILE = 'mouths/index.json';
export const MOUTHS_ATLAS_FILE = 'mouths/atlas.png';

/** `metadata.clip` of a video avatar (made from a clip by POST /avatars/custom; docs/avatars.md). */
export interface ClipMetadata {
  /** Loop frames `frames/frame_00000.png` … at the manifest's size. */
  frame_count: number;
  fps: number;
  /** Played forwards then backwards, so the loop never jumps. */
  loop: 'ping-pong';
  /** The per-frame face track file in the bundle (`CLIP_TRACK_FILE`). */
  track_file: string;
  /** Share of the sampled frames on which the detector found the face (the rest are interpolated). */
  face_found_fraction: number;
  source: { duration_s: number; width: number; height: number; rotation: number; codec: string; has_audio: boolean };
  /**
   * The person's own mouths harvested from the clip (`actors/faces/mouth-harvest.ts`): absent when the clip shows
   * no speech, and the renderer then warps the reference frame's mouth instead.
   */
  mouths?: HarvestedMouthsMetadata;
}

/** `metadata.clip.mouths`: where the harvested mouths lie in the bundle and how many there are. */
export interface HarvestedMouthsMetadata {
  /** Samples in the atlas (one per opening step and shape the clip showed). */
  count: number;
  /** `mouths/index.json`: each sample's pose (open, wide, round) and cell. */
  index_file: string;
  /** `mouths/atlas.png`: the samples side by side in equal cells. */
  atlas_file: string;
}

export interface AvatarManifest {
  id: string;
  name: string;
  model_type: ModelType;
  fps: number;
  sample_rate: number;
  width: number;
  height: number;
  version: string;
  metadata: AvatarMetadata;
}

export interface AvatarMetadata {
  hidden?: boolean;
  custom_avatar?: boolean;
  base_avatar_id?: string;
  animation?: MouthAnimation;
  /** Present on video avatars: the loop and its face track. */
  clip?: ClipMetadata;
  /** Parameters of a face drawn by the rt renderers (see docs/avatars.md). */
  face?: Record<string, unknown>;
  [key: string]: unknown;
}

export interface Point {
  x: number;
  y: number;
}

/** Result of face-landmark mouth detection, in the bundle frame's pixel coordinates. */
export interface MouthAnimation {
  face_box: { x: number; y: number; width: number; height: number };
  mouth_center: Point;
  mouth_width: number;
  outer_lip: Point[];
  inner_lip: Point[];
  left_eye: Point;
  right_eye: Point;
  /** Eye contours (6 points each) for blinking, when available. */
  left_eye_contour?: Point[];
  right_eye_contour?: Point[];
  /** Tip of the nose (landmark 30), from the detector; not kept in a video avatar's smoothed face track. */
  nose_tip?: Point;
  confidence: number;
  detector: string;
}

export interface Renderer {
  /** Loads and pre-computes everything per avatar (cached mouth regions etc.). */
  prepare(avatar: AvatarSource): Promise<void>;
  /**
   * One frame. With `target` (a live session's reused buffer, `frame-buffers.ts`) the frame is written into it
   * when it fits; without one, or when it does not fit, into a new buffer.
   */
  render(request: FrameRequest, target?: SharedArrayBuffer): I420Frame;
}
