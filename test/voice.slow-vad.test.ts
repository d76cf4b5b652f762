/**
 * Hands-free voice input on a host where the VAD is slow: its worker threads start (load onnxruntime and the
 * model) when the first microphone attaches, seconds on a loaded host, while the microphone already sends in
 * real time. Real Silero VAD on a real inference pool whose start is held back; the session side is a recording
 * host. What the user said in that time must reach recognition whole: not dropped as "behind", and its beginning
 * not trimmed away before the VAD had judged it.
 */
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { InferencePool, type ScanRequest } from '../actors/inference/pool.ts';
import type { TensorMap } from '../actors/inference/tensors.ts';
import type { SessionEvent } from '../machines/session.machine.ts';
import { SessionBus } from '../src/sessions/session-bus.ts';
import { POST_ROLL_MS, PRE_ROLL_MS, VoiceInput, type VoiceHost } from '../src/sessions/voice-input.ts';
import { loadVadFixture } from './helpers/vad-fixture.ts';

const fixture = loadVadFixture();
const firstSpeech = fixture.labels.segments.filter((segment) => segment.kind === 'speech')[0];
/** Longer than the VAD's normal backlog bound (2 s) and its idle retention (2 s): both used to lose audio here. */
const SLOW_START_MS = 3_000;
const CHUNK_MS = 20;

/** A real pool whose workers answer nothing until `SLOW_START_MS` after the first call, as a loaded host's start-up. */
class SlowStartingPool extends InferencePool {
  private gate: Promise<void> | undefined;
  private started(): Promise<void> {
    return (this.gate ??= new Promise((resolve) => setTimeout(resolve, SLOW_START_MS)));
  }
  override async warmUp(modelKey: string, signal?: AbortSignal): Promise<void> {
    await this.started();
    return super.warmUp(modelKey, signal);
  }
  override async infer(modelKey: string, item: TensorMap, signal?: AbortSignal): Promise<TensorMap> {
    await this.started();
    return super.infer(modelKey, item, signal);
  }
  override async scan(modelKey: string, request: ScanRequest, signal?: AbortSignal): Promise<TensorMap> {
    await this.started();
    return super.scan(modelKey, request, signal);
  }
}

describe('voice input while the VAD is still starting', () => {
  let pool: SlowStartingPool;
  beforeAll(() => {
    pool = new SlowStartingPool({ threads: 1 });
  });
  afterAll(() => pool.close());

  it('speech sent in real time from the first moment reaches recognition whole: nothing dropped, its beginning kept', async () => {
    const offered: SessionEvent[] = [];
    const host: VoiceHost = {
      offerVoice: (event) => {
        offered.push(event);
        return true;
      },
      send: () => undefined,
      state: 'running',
      pipelineStage: 'idle',
      busy: false,
    };
    const input = new VoiceInput({
      host,
      pool: () => pool,
      asr: { status: () => ({ configured: true }) } as never,
      silenceMs: 500,
      minSpeechMs: 250,
      playout: { on: () => undefined, off: () => undefined } as never,
      bus: new SessionBus(),
      logger: pino({ level: 'silent' }),
    });
    const source = input.attach('listen');
    // The fixture from its start through its first utterance and a second of what follows, at real time.
    const audio = fixture.pcm.subarray(0, (firstSpeech.endMs + 1_000) * 16);
    const chunk = (16_000 * CHUNK_MS) / 1000;
    let dropped = 0;
    const startedAt = performance.now();
    for (let offset = 0, index = 0; offset < audio.length; offset += chunk, index++) {
      if (!source.push(audio.subarray(offset, offset + chunk), 16_000)) dropped++;
      const due = startedAt + (index + 1) * CHUNK_MS;
      await new Promise((resolve) => setTimeout(resolve, Math.max(0, due - performance.now())));
    }
    await source.end();
    input.close();

    expect(dropped).toBe(0);
    const end = offered.find(
      (event): event is Extract<SessionEvent, { type: 'VOICE.END' }> => event.type === 'VOICE.END',
    );
    expect(end, JSON.stringify(offered.map((event) => event.type))).toBeDefined();
    const seconds = end!.request.pcm.length / 16_000;
    const spoken = (firstSpeech.endMs - firstSpeech.startMs) / 1000;
    console.log(
      `slow-starting VAD: utterance of ${spoken.toFixed(2)} s went to recognition as ${seconds.toFixed(2)} s, ${dropped} chunks dropped`,
    );
    // The speech itself with its pre- and post-roll (less one VAD frame either way for where the VAD puts the edges).
    expect(seconds).toBeGreaterThan(spoken + (PRE_ROLL_MS + POST_ROLL_MS) / 1000 - 0.1);
    expect(seconds).toBeLessThan(spoken + 1.5);
  }, 30_000);
});
