import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { detectSpeechSegments } from '../actors/audio/vad.ts';
import { resamplePcm16 } from '../actors/audio/resample.ts';
import { SILERO_VAD_MODEL } from '../actors/inference/models.ts';
import { InferencePool, MAX_SCAN_STEPS } from '../actors/inference/pool.ts';
import {
  DEFAULT_START_THRESHOLD,
  SILERO_FRAME_MS,
  SileroVadStream,
  type SileroVadOptions,
  type VadEvent,
} from '../actors/vad/silero.ts';
import { TurnTracker } from '../actors/vad/turns.ts';
import { frameAccuracy, loadVadFixture, spanAccuracy, whiteNoise, type TimeSpan } from './helpers/vad-fixture.ts';

/** 20 ms chunks, as a WebSocket or WebRTC client delivers them. */
const CHUNK_MS = 20;
const fixture = loadVadFixture();
const speechLabels = fixture.labels.segments.filter((segment) => segment.kind === 'speech');

interface Analysis {
  probabilities: number[];
  events: VadEvent[];
  turns: TimeSpan[];
}

async function analyse(pool: InferencePool, pcm: Int16Array, options: SileroVadOptions = {}): Promise<Analysis> {
  const rate = options.sampleRate ?? 16_000;
  const stream = new SileroVadStream(pool, options);
  const probabilities: number[] = [];
  const events: VadEvent[] = [];
  const chunk = (rate * CHUNK_MS) / 1000;
  for (let offset = 0; offset < pcm.length; offset += chunk) {
    const result = await stream.push(pcm.subarray(offset, offset + chunk));
    probabilities.push(...result.frames.map((frame) => frame.probability));
    events.push(...result.events);
  }
  events.push(...(await stream.end()));
  stream.close();
  const turns = events.flatMap((event) =>
    event.type === 'speech_end' ? [{ startMs: event.startMs, endMs: event.ms }] : [],
  );
  return { probabilities, events, turns };
}

function percent(share: number): string {
  return `${(share * 100).toFixed(1)} %`;
}

describe('Silero VAD v5 streaming detector', () => {
  let pool: InferencePool;
  /**
   * The whole fixture analysed with the default options, and with a 250 ms end-of-turn silence: several tests read
   * the same analyses, so they run once, side by side (two streams batched together, each with its own state; the
   * batching test below shows that gives the same probabilities as each alone).
   */
  let fixtureAnalyses: Promise<{ byDefault: Analysis; shortSilence: Analysis }> | undefined;
  const analysesOfFixture = () =>
    (fixtureAnalyses ??= Promise.all([
      analyse(pool, fixture.pcm),
      analyse(pool, fixture.pcm, { minSilenceMs: 250 }),
    ]).then(([byDefault, shortSilence]) => ({
      byDefault,
      shortSilence,
    })));

  beforeAll(async () => {
    pool = new InferencePool();
    await pool.warmUp(SILERO_VAD_MODEL);
  });

  afterAll(() => pool.close());

  it('agrees with the labelled speech/silence timeline of the fixture on at least 90 % of frames', async () => {
    const { probabilities, turns } = (await analysesOfFixture()).byDefault;
    expect(probabilities).toHaveLength(Math.floor(fixture.pcm.length / 512));
    const byProbability = frameAccuracy(
      fixture.labels,
      SILERO_FRAME_MS,
      (frame) => probabilities[frame] >= DEFAULT_START_THRESHOLD,
    );
    const byTurns = spanAccuracy(fixture.labels, turns, SILERO_FRAME_MS);
    console.log(
      `Silero v5 frame accuracy: probability ≥ 0.5 ${percent(byProbability)}, turns (hysteresis) ${percent(byTurns)}`,
    );
    expect(byProbability).toBeGreaterThanOrEqual(0.9);
    expect(byTurns).toBeGreaterThanOrEqual(0.9);
  });

  it('measures the WebRTC VAD (fvad, actors/audio/vad.ts) on the same fixture for comparison', async () => {
    const asUsed = await detectSpeechSegments(fixture.pcm, fixture.sampleRate);
    const unpadded = await detectSpeechSegments(fixture.pcm, fixture.sampleRate, { paddingMs: 0 });
    const asUsedAccuracy = spanAccuracy(fixture.labels, asUsed, SILERO_FRAME_MS);
    const unpaddedAccuracy = spanAccuracy(fixture.labels, unpadded, SILERO_FRAME_MS);
    console.log(
      `fvad frame accuracy: default options (150 ms padding) ${percent(asUsedAccuracy)}, without padding ${percent(unpaddedAccuracy)}`,
    );
    // Stationary noise under clean speech is fvad's home ground; it stays a reasonable detector here.
    expect(asUsedAccuracy).toBeGreaterThanOrEqual(0.85);
    expect(unpaddedAccuracy).toBeGreaterThanOrEqual(0.9);
  });

  it('makes each utterance its own turn when the end-of-turn silence is shorter than the pauses', async () => {
    const { turns } = (await analysesOfFixture()).shortSilence;
    expect(turns).toHaveLength(speechLabels.length);
    turns.forEach((turn, index) => {
      expect(Math.abs(turn.startMs - speechLabels[index].startMs)).toBeLessThanOrEqual(150);
      expect(Math.abs(turn.endMs - speechLabels[index].endMs)).toBeLessThanOrEqual(200);
    });
  });

  it('keeps pauses shorter than the default 500 ms end-of-turn silence inside one turn', async () => {
    const { turns } = (await analysesOfFixture()).byDefault;
    const pauses = fixture.labels.segments.filter(
      (segment, index) => segment.kind === 'silence' && index > 0 && index < fixture.labels.segments.length - 1,
    );
    for (const pause of pauses) {
      const bridged = turns.some((turn) => turn.startMs < pause.startMs && turn.endMs > pause.endMs);
      if (pause.endMs - pause.startMs < 500) expect(bridged, `pause at ${pause.startMs} ms`).toBe(true);
      if (pause.endMs - pause.startMs > 700) expect(bridged, `pause at ${pause.startMs} ms`).toBe(false);
    }
  });

  it('finds no speech in digital silence or in white noise', async () => {
    const threeSeconds = 3 * 16_000;
    // The three streams side by side (batched, each with its own state).
    const results = await Promise.all(
      (
        [
          ['silence', new Int16Array(threeSeconds)],
          ['white noise at -30 dBFS', whiteNoise(threeSeconds, -30, 7)],
          ['white noise at -15 dBFS', whiteNoise(threeSeconds, -15, 8)],
        ] as const
      ).map(async ([name, pcm]) => ({
        name,
        ...(await analyse(pool, pcm)),
        fvad: await detectSpeechSegments(pcm, 16_000),
      })),
    );
    for (const { name, events, probabilities, fvad } of results) {
      console.log(
        `${name}: Silero max probability ${Math.max(...probabilities).toFixed(2)}, fvad segments ${fvad.length}`,
      );
      expect(events, name).toEqual([]);
    }
  });

  it('makes no turn of a 100 ms noise burst (cough-like) in silence', async () => {
    const pcm = whiteNoise(2 * 16_000, -50, 3);
    const burst = whiteNoise(1_600, -10, 4).map((sample, i) => Math.round(sample * Math.exp(-i / 600)));
    pcm.set(burst, 16_000);
    const { events } = await analyse(pool, pcm);
    const fvad = await detectSpeechSegments(pcm, 16_000);
    console.log(`100 ms noise burst: fvad segments ${fvad.length}`);
    expect(events).toEqual([]);
  });

  it('makes no turn of 100 ms cut out of real speech: shorter than the minimum speech duration', async () => {
    // Two cut points per utterance: 400 ms in gave the longest probability tails when measured. The blips are
    // analysed side by side (batched, each stream with its own state).
    const blips = speechLabels.flatMap((speech) => [200, 400].map((offsetMs) => ({ ...speech, offsetMs })));
    const analyses = await Promise.all(
      blips.map((label) => {
        const pcm = whiteNoise(2 * 16_000, -50, 5);
        const from = (label.startMs + label.offsetMs) * 16;
        pcm.set(fixture.pcm.subarray(from, from + 1_600), 16_000);
        return analyse(pool, pcm);
      }),
    );
    const peaks: number[] = [];
    analyses.forEach(({ events, probabilities }, index) => {
      expect(events, `${blips[index].text} +${blips[index].offsetMs} ms`).toEqual([]);
      peaks.push(Math.max(...probabilities));
    });
    // Most of these blips do look like speech to the model, so the duration rule is what rejects them.
    expect(peaks.filter((peak) => peak >= DEFAULT_START_THRESHOLD).length).toBeGreaterThanOrEqual(speechLabels.length);
  });

  it('resamples 48 kHz input and reports positions in 48 kHz samples', async () => {
    const pcm48 = await resamplePcm16(fixture.pcm, 16_000, 48_000);
    const { probabilities, events } = await analyse(pool, pcm48, { sampleRate: 48_000 });
    const accuracy = frameAccuracy(
      fixture.labels,
      SILERO_FRAME_MS,
      (frame) => probabilities[frame] >= DEFAULT_START_THRESHOLD,
    );
    console.log(`Silero v5 frame accuracy at 48 kHz input (resampled per 20 ms chunk): ${percent(accuracy)}`);
    expect(accuracy).toBeGreaterThanOrEqual(0.9);
    expect(events.length).toBeGreaterThan(0);
    for (const event of events) expect(event.sample).toBe(Math.round((event.ms / 1000) * 48_000));
  });

  it('gives two streams batched together the same probabilities as each alone (state kept per stream)', async () => {
    const half = fixture.pcm.length >> 1;
    const first = fixture.pcm.subarray(0, half);
    const second = fixture.pcm.subarray(half);
    const firstAlone = await analyse(pool, first);
    const secondAlone = await analyse(pool, second);
    const before = pool.stats;
    const [firstTogether, secondTogether] = await Promise.all([analyse(pool, first), analyse(pool, second)]);
    const after = pool.stats;
    // Most frames of the two streams shared a run.
    expect(after.items - before.items).toBeGreaterThan(1.5 * (after.batches - before.batches));
    expect(firstTogether.probabilities).toHaveLength(firstAlone.probabilities.length);
    expect(secondTogether.probabilities).toHaveLength(secondAlone.probabilities.length);
    firstAlone.probabilities.forEach((p, frame) => expect(firstTogether.probabilities[frame]).toBeCloseTo(p, 4));
    secondAlone.probabilities.forEach((p, frame) => expect(secondTogether.probabilities[frame]).toBeCloseTo(p, 4));
    expect(firstTogether.events).toEqual(firstAlone.events);
    expect(secondTogether.events).toEqual(secondAlone.events);
  });

  it('a stream that fell behind catches up in a few scan tasks, with the same probabilities and turns as frame by frame', async () => {
    const stepwise = (await analysesOfFixture()).byDefault;
    // A producer far ahead of the analysis (a loaded host): every 20 ms chunk is pushed before any answer is in.
    const stream = new SileroVadStream(pool);
    const chunk = (16_000 * CHUNK_MS) / 1000;
    const before = pool.stats;
    const pushes: Array<Promise<{ frames: { probability: number }[]; events: VadEvent[] }>> = [];
    for (let offset = 0; offset < fixture.pcm.length; offset += chunk)
      pushes.push(stream.push(fixture.pcm.subarray(offset, offset + chunk)));
    const results = await Promise.all(pushes);
    const events = [...results.flatMap((result) => result.events), ...(await stream.end())];
    stream.close();
    const after = pool.stats;
    const probabilities = results.flatMap((result) => result.frames.map((frame) => frame.probability));
    expect(probabilities).toHaveLength(stepwise.probabilities.length);
    stepwise.probabilities.forEach((p, frame) => expect(probabilities[frame]).toBeCloseTo(p, 4));
    expect(events).toEqual(stepwise.events);
    // One task per MAX_SCAN_STEPS frames (plus the first push's own frame-sized one), not one per frame.
    const tasks = after.batches - before.batches;
    console.log(`Silero v5 catching up: ${probabilities.length} frames in ${tasks} worker tasks`);
    expect(tasks).toBeLessThanOrEqual(Math.ceil(probabilities.length / MAX_SCAN_STEPS) + 2);
  });

  it('refuses a scan of no steps or of more than MAX_SCAN_STEPS', async () => {
    const scanOf = (steps: number) =>
      pool.scan(SILERO_VAD_MODEL, {
        steps: { input: { type: 'float32', data: new Float32Array(steps * 576), dims: [steps, 576] } },
        carried: { state: { type: 'float32', data: new Float32Array(256), dims: [2, 1, 128] } },
        carry: { stateN: 'state' },
      });
    await expect(scanOf(0)).rejects.toThrow(RangeError);
    await expect(scanOf(MAX_SCAN_STEPS + 1)).rejects.toThrow(RangeError);
    const two = await scanOf(2);
    expect(two.output.dims).toEqual([2, 1]);
    expect(two.state.dims).toEqual([2, 1, 128]);
  });

  it('measures the cost per 512-sample frame at batch 1 and batch 8', async () => {
    const seconds = 5;
    const audio = fixture.pcm.subarray(16_000, 16_000 * (1 + seconds));
    const measure = async (streams: number) => {
      const before = pool.stats;
      const started = performance.now();
      await Promise.all(
        Array.from({ length: streams }, async () => {
          // Frame by frame, as a real-time stream arrives (pushed all at once it would catch up in scan tasks).
          const stream = new SileroVadStream(pool);
          for (let offset = 0; offset < audio.length; offset += 512)
            await stream.push(audio.subarray(offset, offset + 512));
          stream.close();
        }),
      );
      const wallMs = performance.now() - started;
      const after = pool.stats;
      const frames = after.items - before.items;
      const batches = after.batches - before.batches;
      return {
        frames,
        meanBatch: frames / batches,
        runMsPerFrame: (after.runMs - before.runMs) / frames,
        runMsPerBatch: (after.runMs - before.runMs) / batches,
        wallMsPerFrame: wallMs / frames,
      };
    };
    const single = await measure(1);
    const eight = await measure(8);
    for (const [label, figures] of [
      ['batch 1', single],
      ['batch 8', eight],
    ] as const) {
      console.log(
        `Silero ${label}: mean batch ${figures.meanBatch.toFixed(1)}, onnxruntime ${figures.runMsPerBatch.toFixed(3)} ms per run = ${figures.runMsPerFrame.toFixed(3)} ms per frame, ` +
          `wall ${figures.wallMsPerFrame.toFixed(3)} ms per frame (incl. batching window and messaging)`,
      );
    }
    expect(single.meanBatch).toBe(1);
    expect(eight.meanBatch).toBeGreaterThan(4);
    // Real time with room to spare: a frame is 32 ms of audio.
    expect(single.wallMsPerFrame).toBeLessThan(SILERO_FRAME_MS);
    expect(eight.runMsPerFrame).toBeLessThan(single.runMsPerFrame);
  });

  it('rejects a push aborted before its analysis and carries on with positions aligned to the audio', async () => {
    const stream = new SileroVadStream(pool);
    const controller = new AbortController();
    const oneSecond = fixture.pcm.subarray(16_000, 32_000);
    // Aborted while it waits in the stream's queue (a whole second now runs as one ~10 ms scan task, so a timer
    // could no longer land in the middle of it).
    const aborted = stream.push(oneSecond, controller.signal);
    controller.abort(new Error('caller left'));
    await expect(aborted).rejects.toThrow('caller left');
    const next = await stream.push(fixture.pcm.subarray(32_000, 48_000));
    // The aborted second still counts on the timeline; analysis resumes at 1000 ms.
    expect(next.frames[0].ms).toBe(1_000);
    expect(next.frames).toHaveLength(31);
    stream.close();
  });

  it('refuses audio once closed, and closes twice without harm', async () => {
    const stream = new SileroVadStream(pool);
    stream.close();
    stream.close();
    await expect(stream.push(new Int16Array(512))).rejects.toThrow(/closed/);
    await expect(stream.end()).rejects.toThrow(/closed/);
  });
});

describe('turn hysteresis', () => {
  const FRAME = 512;
  const thresholds = {
    startThreshold: 0.5,
    endThreshold: 0.35,
    minSpeechSamples: 4 * FRAME,
    minSilenceSamples: 3 * FRAME,
  };

  function feed(tracker: TurnTracker, probabilities: number[]) {
    return probabilities.flatMap((probability, frame) => tracker.next(frame * FRAME, (frame + 1) * FRAME, probability));
  }

  it('starts a turn retroactively once speech has lasted the minimum, and ends it where the silence began', () => {
    const events = feed(new TurnTracker(thresholds), [0.1, 0.6, 0.9, 0.4, 0.8, 0.9, 0.2, 0.1, 0.1, 0.1]);
    expect(events).toEqual([
      { type: 'speech_start', sample: 1 * FRAME },
      { type: 'speech_end', sample: 6 * FRAME, startSample: 1 * FRAME },
    ]);
  });

  it('drops a candidate that falls below the end threshold before the minimum speech duration', () => {
    expect(feed(new TurnTracker(thresholds), [0.9, 0.9, 0.9, 0.3, 0.9, 0.9, 0.9, 0.1])).toEqual([]);
  });

  it('keeps a turn open through a dip that recovers above the start threshold', () => {
    const tracker = new TurnTracker(thresholds);
    const events = feed(tracker, [0.9, 0.9, 0.9, 0.9, 0.2, 0.2, 0.9, 0.9]);
    expect(events).toEqual([{ type: 'speech_start', sample: 0 }]);
    expect(tracker.speaking).toBe(true);
    expect(tracker.finish(8 * FRAME)).toEqual([{ type: 'speech_end', sample: 8 * FRAME, startSample: 0 }]);
  });

  it('rejects an end threshold above the start threshold', () => {
    expect(() => new TurnTracker({ ...thresholds, endThreshold: 0.6 })).toThrow(RangeError);
  });
});
