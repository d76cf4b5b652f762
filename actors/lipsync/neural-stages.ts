/**
 * The neural lip-sync renderer's CPU stages around the model: the mel window of each frame's audio (before) and
 * the paste-back of the generated face into the avatar frame (after). Together ~1.5–3 ms per frame, which in the
 * main thread delays the media clocks of every session (docs/renderers.md, measured with 3 live sessions), so the
 * service runs them in the render pool's workers (`RenderPoolStages`): one task per render call for the mel
 * windows, one for the paste-back, the prepared face cached per worker. `inlineStages` runs them in the calling
 * thread (unit tests, benches, and a renderer opened without a render pool).
 */
import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { readClipSource } from '../render/clip-loop.ts';
import { BUNDLE_FRAME_PATH } from '../render/image.ts';
import type { RenderPool } from '../render/pool.ts';
import {
  CLOSED_MOUTH,
  type AvatarSource,
  type FrameAudio,
  type FrameRequest,
  type I420Frame,
} from '../render/types.ts';
import type { NeuralTask, TaskOutcome } from '../render/tasks.ts';
import { composeFace, faceAt, prepareFace, type PreparedFace } from './face-crop.ts';
import { MEL_STREAM_LEAD_SAMPLES, MEL_STREAM_WINDOW_SAMPLES, WAV2LIP_MEL, melWindowFromStream } from './mel.ts';

export interface NeuralStages {
  /** Mel windows `[1, 80, 16]` of frames that carry audio, in order. */
  mel(audio: FrameAudio[], signal: AbortSignal): Promise<Float32Array[]>;
  /**
   * The model's outputs `[3, S, S]` pasted into the avatar frame shown at each of `frameIdxs` (a video avatar's
   * loop frame, else the still), in order. The outputs may be transferred away.
   */
  compose(outputs: Float32Array[], frameIdxs: number[], signal: AbortSignal): Promise<I420Frame[]>;
}

/**
 * Converts the frame's session audio to the 16 kHz stream window the mel front end reads: sample for sample at
 * 16 kHz, a box average over each output sample's span above it (a crude low-pass against aliasing), linear
 * interpolation below it.
 */
export function streamWindowOf(audio: FrameAudio, out = new Float32Array(MEL_STREAM_WINDOW_SAMPLES)): Float32Array {
  const { pcm, sampleRate, leadSamples } = audio;
  const ratio = sampleRate / WAV2LIP_MEL.sampleRate;
  const at = (i: number): number => (i >= 0 && i < pcm.length ? pcm[i] : 0);
  for (let i = 0; i < out.length; i++) {
    const position = leadSamples + (i - MEL_STREAM_LEAD_SAMPLES) * ratio;
    if (ratio === 1) {
      out[i] = at(position) / 32768;
    } else if (ratio > 1) {
      const from = Math.round(position - ratio / 2);
      const to = Math.round(position + ratio / 2);
      let sum = 0;
      for (let k = from; k < to; k++) sum += at(k);
      out[i] = sum / Math.max(1, to - from) / 32768;
    } else {
      const i0 = Math.floor(position);
      const frac = position - i0;
      out[i] = (at(i0) + (at(i0 + 1) - at(i0)) * frac) / 32768;
    }
  }
  return out;
}

export function melOfAudio(audio: FrameAudio): Float32Array {
  return melWindowFromStream(streamWindowOf(audio));
}

/** Both stages in the calling thread. */
export function inlineStages(face: PreparedFace): NeuralStages {
  return {
    mel: async (audio) => audio.map(melOfAudio),
    compose: async (outputs, frameIdxs) => outputs.map((output, k) => composeFace(faceAt(face, frameIdxs[k]), output)),
  };
}

/** Worker-side: prepared faces per worker thread, by avatar content and S (a few: the live sessions' avatars). */
const MAX_WORKER_FACES = 6;
const workerFaces = new Map<string, Promise<PreparedFace>>();

function workerFace(task: NeuralTask): Promise<PreparedFace> {
  let entry = workerFaces.get(task.cacheKey);
  if (entry) {
    workerFaces.delete(task.cacheKey);
    workerFaces.set(task.cacheKey, entry);
    return entry;
  }
  entry = prepareFace(task.avatar, task.faceSize);
  entry.catch(() => workerFaces.delete(task.cacheKey));
  workerFaces.set(task.cacheKey, entry);
  while (workerFaces.size > MAX_WORKER_FACES) workerFaces.delete(workerFaces.keys().next().value as string);
  return entry;
}

/** Runs a `neural_*` render task in a render worker (`actors/render-backends/worker.ts`); returns the result and what to transfer. */
export async function runNeuralStage(task: NeuralTask): Promise<TaskOutcome> {
  if (task.op === 'neural_mel') {
    const mels = task.requests.map((request) => melOfAudio(request.audio!));
    return { frames: [], mels, transfer: mels.map((mel) => mel.buffer as ArrayBuffer) };
  }
  const face = await workerFace(task);
  if (task.op === 'neural_prepare') return { frames: [], transfer: [] };
  const frames = task.outputs.map((output, k) => composeFace(faceAt(face, task.requests[k]?.frameIdx ?? 0), output));
  return { frames, transfer: frames.map((frame) => frame.data.buffer as ArrayBuffer) };
}

/** The stages in the render pool's workers, for one avatar and face size. */
export class RenderPoolStages implements NeuralStages {
  private readonly cacheKey: string;
  private readonly avatar: AvatarSource;

  /** Stages for `avatar` at face size `size`, its face prepared in one worker before this resolves. */
  static async open(
    pool: RenderPool,
    avatar: AvatarSource,
    size: number,
    signal?: AbortSignal,
  ): Promise<RenderPoolStages> {
    const framePng = avatar.framePng ?? new Uint8Array(await readFile(join(avatar.dir, BUNDLE_FRAME_PATH)));
    // A video avatar's loop goes along in shared memory too (read now: deleting the avatar later changes nothing).
    const clip = avatar.clip ?? (await readClipSource(avatar.dir, avatar.manifest));
    const stages = new RenderPoolStages(pool, { ...avatar, framePng, ...(clip ? { clip } : {}) }, size);
    await stages.prepare(signal);
    return stages;
  }

  private constructor(
    private readonly pool: RenderPool,
    avatar: AvatarSource & { framePng: Uint8Array },
    private readonly size: number,
  ) {
    // The photo goes to the workers in shared memory, so a task does not copy it.
    const shared = new Uint8Array(new SharedArrayBuffer(avatar.framePng.length));
    shared.set(avatar.framePng);
    this.avatar = { ...avatar, framePng: shared };
    const hash = createHash('sha1')
      .update(JSON.stringify(avatar.manifest))
      .update(avatar.framePng)
      .digest('hex')
      .slice(0, 16);
    this.cacheKey = `neural|${avatar.id}|${size}|${hash}`;
  }

  /** Prepares the face in one worker now (the others prepare it on their first paste-back). */
  async prepare(signal?: AbortSignal): Promise<void> {
    await this.pool.run(this.task('neural_prepare', []), signal);
  }

  async mel(audio: FrameAudio[], signal: AbortSignal): Promise<Float32Array[]> {
    if (audio.length === 0) return [];
    const requests = audio.map(
      (a, i): FrameRequest => ({ frameIdx: i, ptsMs: 0, mouth: CLOSED_MOUTH, level: 0, speaking: true, audio: a }),
    );
    const result = await this.pool.run(this.task('neural_mel', requests), signal);
    return result.mels ?? [];
  }

  async compose(outputs: Float32Array[], frameIdxs: number[], signal: AbortSignal): Promise<I420Frame[]> {
    if (outputs.length === 0) return [];
    const requests = frameIdxs.map(
      (frameIdx): FrameRequest => ({ frameIdx, ptsMs: 0, mouth: CLOSED_MOUTH, level: 0, speaking: true }),
    );
    const task: NeuralTask = { ...this.task('neural_mel', requests), op: 'neural_compose', outputs };
    // Each answer owns its buffer (the pool and the KServe client cut them out of the batch), so they move uncopied.
    const transfer = new Set<ArrayBuffer>();
    for (const output of outputs)
      if (output.byteOffset === 0 && output.byteLength === output.buffer.byteLength)
        transfer.add(output.buffer as ArrayBuffer);
    const result = await this.pool.run(task, signal, [...transfer]);
    return result.frames;
  }

  private task(op: 'neural_prepare' | 'neural_mel', requests: FrameRequest[]): NeuralTask {
    return { op, cacheKey: this.cacheKey, avatar: this.avatar, modelType: 'lipsync', requests, faceSize: this.size };
  }
}
