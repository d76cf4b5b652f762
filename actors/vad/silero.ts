/**
 * Streaming voice activity detection with Silero VAD v5 on the shared inference pool. One `SileroVadStream`
 * per audio stream keeps what the model needs between frames — its recurrent `state` [2,1,128] and the last
 * 64 samples as context (without them v5 detects nothing) — feeds 512-sample frames at 16 kHz, and reports a
 * speech probability per 32 ms frame plus `speech_start` / `speech_end` from a hysteresis tracker
 * (`turns.ts`). Frames of concurrent streams meet in the pool's micro-batcher and run as one batch. A stream
 * that has fallen behind (a loaded host: each frame's round trip to a worker thread costs more than its 32 ms)
 * catches up with one `scan` task over all its waiting frames instead of one round trip per frame.
 */
import { SILERO_VAD_MODEL } from '../inference/models.ts';
import { MAX_SCAN_STEPS, type InferencePool } from '../inference/pool.ts';
import { tensor, type TensorData } from '../inference/tensors.ts';
import { pcm16ToFloat32, resamplePcm16 } from '../audio/resample.ts';
import { TurnTracker, type TurnEvent } from './turns.ts';

export const SILERO_SAMPLE_RATE = 16_000;
/** v5 accepts exactly 512 samples (32 ms) per frame at 16 kHz. */
export const SILERO_FRAME_SAMPLES = 512;
/** The tail of the previous frame prepended to each frame, as the reference implementation does. */
export const SILERO_CONTEXT_SAMPLES = 64;
const STATE_SIZE = 2 * 128;
export const SILERO_FRAME_MS = (SILERO_FRAME_SAMPLES / SILERO_SAMPLE_RATE) * 1000;

/** Silero's own recommended speech threshold. */
export const DEFAULT_START_THRESHOLD = 0.5;
/** 0.15 below the start (the reference implementation's hysteresis), so a turn does not flicker on soft syllables. */
export const DEFAULT_END_THRESHOLD = 0.35;
/**
 * A cough, click or knock lasts < 150 ms, but the model's probability decays ~100–130 ms after a sound ends:
 * 100 ms cut out of real speech stayed above the end threshold for up to 7 frames (224 ms) on the fixture.
 * A short word ("yes", ≈ 250 ms of sound) stays above it for ≈ 350 ms and still starts a turn.
 */
export const DEFAULT_MIN_SPEECH_MS = 250;
/** Pauses between words and breaths inside a sentence stay under this; a longer silence ends the turn. */
export const DEFAULT_MIN_SILENCE_MS = 500;

export interface SileroVadOptions {
  /** Rate of the PCM pushed into the stream; other rates than 16 kHz are resampled. */
  sampleRate?: number;
  startThreshold?: number;
  endThreshold?: number;
  minSpeechMs?: number;
  /** Silence that ends a turn (end-of-turn latency vs. cutting the speaker off mid-sentence). */
  minSilenceMs?: number;
  /** Dips inside a turn reported as `speech_pause` (the user's pauses), shortest and longest; none without. */
  pauseMs?: { min: number; max: number };
}

/** Positions are on the pushed audio's timeline: `sample` at the stream's input rate, `ms` from its start. */
export type VadEvent =
  | { type: 'speech_start'; sample: number; ms: number }
  | { type: 'speech_end'; sample: number; ms: number; startSample: number; startMs: number }
  | { type: 'speech_pause'; sample: number; ms: number; endSample: number; endMs: number };

export interface VadFrame {
  /** Start of the 32 ms frame on the stream's timeline. */
  ms: number;
  probability: number;
}

export interface VadResult {
  frames: VadFrame[];
  events: VadEvent[];
}

export class SileroVadStream {
  private readonly inputRate: number;
  private readonly turns: TurnTracker;
  private state: Float32Array = new Float32Array(STATE_SIZE);
  private context = new Float32Array(SILERO_CONTEXT_SAMPLES);
  /** 16 kHz samples received but not yet analysed (less than one frame between pushes). */
  private buffered = new Float32Array(0);
  /** 16 kHz audio pushed while earlier pushes were still being analysed: the next analysis takes it all at once. */
  private incoming: Float32Array[] = [];
  /** 16 kHz position of `buffered[0]` on the stream's timeline. */
  private position = 0;
  /** Pushes run one after another: each frame needs the state the previous one produced. */
  private queue: Promise<unknown> = Promise.resolve();
  private closed = false;

  constructor(
    private readonly pool: InferencePool,
    options: SileroVadOptions = {},
  ) {
    this.inputRate = options.sampleRate ?? SILERO_SAMPLE_RATE;
    const samplesOf = (ms: number): number => Math.round((ms / 1000) * SILERO_SAMPLE_RATE);
    this.turns = new TurnTracker({
      startThreshold: options.startThreshold ?? DEFAULT_START_THRESHOLD,
      endThreshold: options.endThreshold ?? DEFAULT_END_THRESHOLD,
      minSpeechSamples: samplesOf(options.minSpeechMs ?? DEFAULT_MIN_SPEECH_MS),
      minSilenceSamples: samplesOf(options.minSilenceMs ?? DEFAULT_MIN_SILENCE_MS),
      ...(options.pauseMs
        ? { pauseSamples: { min: samplesOf(options.pauseMs.min), max: samplesOf(options.pauseMs.max) } }
        : {}),
    });
  }

  /** Starts the pool's workers and loads the model in each (seconds on a loaded host), ahead of the first frame. */
  warmUp(signal?: AbortSignal): Promise<void> {
    return this.pool.warmUp(SILERO_VAD_MODEL, signal);
  }

  /** True between `speech_start` and `speech_end`. */
  get speaking(): boolean {
    return this.turns.speaking;
  }

  /**
   * Analyses every whole frame the audio completes. On abort the audio not yet analysed is dropped (the
   * timeline still counts it, so later positions stay aligned with the caller's audio).
   */
  push(pcm: Int16Array, signal?: AbortSignal): Promise<VadResult> {
    // 16 kHz audio joins the waiting audio now, so the push whose turn comes first analyses everything that has
    // arrived (later pushes then find their frames done); other rates are resampled in order, in the queue.
    if (this.inputRate === SILERO_SAMPLE_RATE && !this.closed) this.incoming.push(pcm16ToFloat32(pcm));
    return this.serialised(async () => {
      if (this.inputRate !== SILERO_SAMPLE_RATE)
        this.incoming.push(pcm16ToFloat32(await resamplePcm16(pcm, this.inputRate, SILERO_SAMPLE_RATE)));
      this.takeIncoming();
      return this.analyseBuffered(signal);
    });
  }

  private takeIncoming(): void {
    if (this.incoming.length === 0) return;
    const joined = new Float32Array(this.incoming.reduce((sum, part) => sum + part.length, this.buffered.length));
    joined.set(this.buffered);
    let offset = this.buffered.length;
    for (const part of this.incoming) {
      joined.set(part, offset);
      offset += part.length;
    }
    this.incoming = [];
    this.buffered = joined;
  }

  /** End of the audio: closes an open turn. The partial frame left over is too short to analyse and is dropped. */
  end(signal?: AbortSignal): Promise<VadEvent[]> {
    return this.serialised(async () => {
      signal?.throwIfAborted();
      this.takeIncoming();
      this.position += this.buffered.length;
      this.buffered = new Float32Array(0);
      return this.turns.finish(this.position).map((event) => this.toVadEvent(event));
    });
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.buffered = new Float32Array(0);
    this.incoming = [];
  }

  private serialised<T>(work: () => Promise<T>): Promise<T> {
    if (this.closed) return Promise.reject(new Error('VAD stream is closed'));
    const run = this.queue.then(() => {
      if (this.closed) throw new Error('VAD stream is closed');
      return work();
    });
    // The next push waits for this one, whether it succeeded or not.
    this.queue = run.catch(() => undefined);
    return run;
  }

  private async analyseBuffered(signal: AbortSignal | undefined): Promise<VadResult> {
    const result: VadResult = { frames: [], events: [] };
    try {
      while (this.buffered.length >= SILERO_FRAME_SAMPLES) {
        signal?.throwIfAborted();
        const count = Math.min(MAX_SCAN_STEPS, Math.floor(this.buffered.length / SILERO_FRAME_SAMPLES));
        const frames = this.buffered.subarray(0, count * SILERO_FRAME_SAMPLES);
        const probabilities =
          count === 1 ? [await this.analyseFrame(frames, signal)] : await this.analyseFrames(frames, count, signal);
        for (const probability of probabilities) {
          const frameStart = this.position;
          this.position += SILERO_FRAME_SAMPLES;
          result.frames.push({ ms: (frameStart / SILERO_SAMPLE_RATE) * 1000, probability });
          for (const event of this.turns.next(frameStart, this.position, probability))
            result.events.push(this.toVadEvent(event));
        }
        this.buffered = this.buffered.subarray(count * SILERO_FRAME_SAMPLES);
      }
    } catch (error) {
      this.position += this.buffered.length;
      this.buffered = new Float32Array(0);
      throw error;
    }
    this.buffered = this.buffered.slice();
    return result;
  }

  private async analyseFrame(frame: Float32Array, signal: AbortSignal | undefined): Promise<number> {
    const input = withContext(this.context, frame, 1);
    const outputs = await this.pool.infer(
      SILERO_VAD_MODEL,
      { input: tensor('float32', input, [1, input.length]), state: tensor('float32', this.state, [2, 1, 128]) },
      signal,
    );
    // State and context advance only once the frame's answer is in: an aborted frame leaves them untouched.
    this.state = floats(outputs.stateN);
    this.context = frame.slice(frame.length - SILERO_CONTEXT_SAMPLES);
    return floats(outputs.output)[0];
  }

  /** `count` consecutive frames in one scan task; state and context advance only once every answer is in. */
  private async analyseFrames(frames: Float32Array, count: number, signal: AbortSignal | undefined): Promise<number[]> {
    const inputs = withContext(this.context, frames, count);
    const outputs = await this.pool.scan(
      SILERO_VAD_MODEL,
      {
        steps: { input: tensor('float32', inputs, [count, SILERO_INPUT_SAMPLES]) },
        carried: { state: tensor('float32', this.state, [2, 1, 128]) },
        carry: { stateN: 'state' },
      },
      signal,
    );
    this.state = floats(outputs.state);
    this.context = frames.slice(frames.length - SILERO_CONTEXT_SAMPLES);
    return Array.from(floats(outputs.output));
  }

  private toVadEvent(event: TurnEvent): VadEvent {
    const at = (sample16k: number) => ({
      sample: Math.round((sample16k * this.inputRate) / SILERO_SAMPLE_RATE),
      ms: (sample16k / SILERO_SAMPLE_RATE) * 1000,
    });
    if (event.type === 'speech_start') return { type: 'speech_start', ...at(event.sample) };
    if (event.type === 'speech_pause') {
      const resumed = at(event.endSample);
      return { type: 'speech_pause', ...at(event.sample), endSample: resumed.sample, endMs: resumed.ms };
    }
    const start = at(event.startSample);
    return { type: 'speech_end', ...at(event.sample), startSample: start.sample, startMs: start.ms };
  }
}

function floats(value: TensorData): Float32Array {
  if (!(value.data instanceof Float32Array)) throw new TypeError(`expected a float32 tensor, got ${value.type}`);
  return value.data;
}

/** One model input row: the context samples, then the frame. */
const SILERO_INPUT_SAMPLES = SILERO_CONTEXT_SAMPLES + SILERO_FRAME_SAMPLES;

/**
 * `count` consecutive frames as model input rows of [context | frame]: each frame's context is the tail of the
 * frame before it, the first's is `context` (the tail of the last frame analysed).
 */
function withContext(context: Float32Array, frames: Float32Array, count: number): Float32Array {
  const rows = new Float32Array(count * SILERO_INPUT_SAMPLES);
  for (let k = 0; k < count; k++) {
    const frameStart = k * SILERO_FRAME_SAMPLES;
    rows.set(
      k === 0 ? context : frames.subarray(frameStart - SILERO_CONTEXT_SAMPLES, frameStart),
      k * SILERO_INPUT_SAMPLES,
    );
    rows.set(
      frames.subarray(frameStart, frameStart + SILERO_FRAME_SAMPLES),
      k * SILERO_INPUT_SAMPLES + SILERO_CONTEXT_SAMPLES,
    );
  }
  return rows;
}
