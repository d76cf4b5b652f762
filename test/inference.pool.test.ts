import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SILERO_VAD_MODEL } from '../actors/inference/models.ts';
import { InferencePool, InferencePoolClosedError, InferenceQueueFullError } from '../actors/inference/pool.ts';
import { concatAlongAxis, splitAlongAxis, tensor, type TensorMap } from '../actors/inference/tensors.ts';
import { random } from './helpers/vad-fixture.ts';

/** One Silero item with `rows` frames of deterministic pseudo-speech and a non-zero recurrent state. */
function sileroItem(seed: number, rows = 1): TensorMap {
  const next = random(seed);
  const input = Float32Array.from(
    { length: rows * 576 },
    (_, i) => 0.3 * Math.sin(i / (3 + seed)) + 0.05 * (next() - 0.5),
  );
  const state = Float32Array.from({ length: 2 * rows * 128 }, () => next() - 0.5);
  return { input: tensor('float32', input, [rows, 576]), state: tensor('float32', state, [2, rows, 128]) };
}

function rowOf(item: TensorMap, row: number): TensorMap {
  const rows = item.input.dims[0];
  return {
    input: splitAlongAxis(
      item.input,
      0,
      Array.from({ length: rows }, () => 1),
    )[row],
    state: splitAlongAxis(
      item.state,
      1,
      Array.from({ length: rows }, () => 1),
    )[row],
  };
}

async function until(condition: () => boolean, timeoutMs = 5_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((resolve) => setTimeout(resolve, 1));
  }
}

describe('inference pool (piscina + onnxruntime-node, Silero VAD v5)', () => {
  let pool: InferencePool;

  beforeAll(async () => {
    // A window wider than the default 3 ms: "arrive together" must not depend on how fast a cold, loaded fork runs the loop.
    pool = new InferencePool({ batchWindowMs: 50 });
    await pool.warmUp(SILERO_VAD_MODEL);
  });

  afterAll(() => pool.close());

  it('runs items that arrive together as one batch and gives each its own answer', async () => {
    const items = [1, 2, 3, 4, 5].map((seed) => sileroItem(seed));
    const before = pool.stats;
    const together = await Promise.all(items.map((item) => pool.infer(SILERO_VAD_MODEL, item)));
    const after = pool.stats;
    expect(after.batches - before.batches).toBe(1);
    expect(after.largestBatch).toBeGreaterThanOrEqual(5);

    for (const [index, item] of items.entries()) {
      const alone = await pool.infer(SILERO_VAD_MODEL, item);
      expect(together[index].output.dims).toEqual([1, 1]);
      expect(together[index].stateN.dims).toEqual([2, 1, 128]);
      expect(together[index].output.data[0]).toBeCloseTo(alone.output.data[0] as number, 5);
      for (let i = 0; i < 256; i += 17)
        expect(together[index].stateN.data[i]).toBeCloseTo(alone.stateN.data[i] as number, 5);
    }
    // Different inputs, different answers: the split did not hand one item's result to another.
    expect(new Set(together.map((answer) => answer.output.data[0])).size).toBe(items.length);
  });

  it('splits more items than the model allows in one run over several batches', async () => {
    const items = Array.from({ length: 70 }, (_, seed) => sileroItem(seed));
    const before = pool.stats;
    const answers = await Promise.all(items.map((item) => pool.infer(SILERO_VAD_MODEL, item)));
    expect(pool.stats.batches - before.batches).toBeGreaterThanOrEqual(3);
    expect(pool.stats.largestBatch).toBeLessThanOrEqual(32);
    const last = await pool.infer(SILERO_VAD_MODEL, items[69]);
    expect(answers[69].output.data[0]).toBeCloseTo(last.output.data[0] as number, 5);
  });

  it('returns all rows of an item that brings several, next to single-row items', async () => {
    const triple = sileroItem(7, 3);
    const [tripleAnswer] = await Promise.all([
      pool.infer(SILERO_VAD_MODEL, triple),
      pool.infer(SILERO_VAD_MODEL, sileroItem(8)),
      pool.infer(SILERO_VAD_MODEL, sileroItem(9)),
    ]);
    expect(tripleAnswer.output.dims).toEqual([3, 1]);
    expect(tripleAnswer.stateN.dims).toEqual([2, 3, 128]);
    for (let row = 0; row < 3; row++) {
      const alone = await pool.infer(SILERO_VAD_MODEL, rowOf(triple, row));
      expect(tripleAnswer.output.data[row]).toBeCloseTo(alone.output.data[0] as number, 5);
    }
  });

  it('rejects an aborted item with its reason and still answers the rest of its batch', async () => {
    const controller = new AbortController();
    const aborted = pool.infer(SILERO_VAD_MODEL, sileroItem(10), controller.signal);
    const kept = pool.infer(SILERO_VAD_MODEL, sileroItem(11));
    controller.abort(new Error('caller left'));
    await expect(aborted).rejects.toThrow('caller left');
    expect((await kept).output.dims).toEqual([1, 1]);
    await expect(pool.infer(SILERO_VAD_MODEL, sileroItem(12), AbortSignal.abort())).rejects.toThrow(/abort/i);
  });

  it('rejects unknown models and items that do not fit the model', async () => {
    await expect(pool.infer('no-such-model', sileroItem(1))).rejects.toThrow(/unknown inference model/);
    await expect(pool.infer(SILERO_VAD_MODEL, { input: sileroItem(1).input })).rejects.toThrow(/missing input state/);
    const mismatched = { input: sileroItem(1, 2).input, state: sileroItem(1, 1).state };
    await expect(pool.infer(SILERO_VAD_MODEL, mismatched)).rejects.toThrow(/rows/);
  });

  it('refuses new items once the queue is full', async () => {
    const small = new InferencePool({ threads: 1, maxPendingItems: 4, batchWindowMs: 1_000 }); // a long window: nothing leaves before the fifth call, however slow a cold fork is
    try {
      const queued = [1, 2, 3, 4].map((seed) => small.infer(SILERO_VAD_MODEL, sileroItem(seed)));
      await expect(small.infer(SILERO_VAD_MODEL, sileroItem(5))).rejects.toBeInstanceOf(InferenceQueueFullError);
      expect(await Promise.all(queued)).toHaveLength(4);
      // Room again once the batch has gone out.
      expect((await small.infer(SILERO_VAD_MODEL, sileroItem(6))).output.dims).toEqual([1, 1]);
    } finally {
      await small.close();
    }
  });

  it('fails only the batch whose worker died; the next batch runs on a fresh worker', async () => {
    const single = new InferencePool({ threads: 1 });
    try {
      // Not warmed up: the first batch is still loading the model when its worker is killed.
      const doomed = single.infer(SILERO_VAD_MODEL, sileroItem(1));
      await until(() => single.stats.batches === 1);
      const waiting = single.infer(SILERO_VAD_MODEL, sileroItem(2));
      await single.workers[0].terminate();
      await expect(doomed).rejects.toThrow();
      const survivor = await waiting;
      expect(survivor.output.dims).toEqual([1, 1]);
      expect(single.stats).toMatchObject({ batches: 2, failedBatches: 1 });
    } finally {
      await single.close();
    }
  });

  it('rejects waiting items and later calls once closed, and closes twice without harm', async () => {
    const closing = new InferencePool({ threads: 1 });
    const waiting = closing.infer(SILERO_VAD_MODEL, sileroItem(1));
    const closed = closing.close();
    await expect(waiting).rejects.toBeInstanceOf(InferencePoolClosedError);
    await closed;
    await closing.close();
    await expect(closing.infer(SILERO_VAD_MODEL, sileroItem(1))).rejects.toBeInstanceOf(InferencePoolClosedError);
  });
});

describe('batch tensors', () => {
  it('split undoes concat along any axis', () => {
    const shape = fc.array(fc.integer({ min: 1, max: 4 }), { minLength: 1, maxLength: 4 });
    fc.assert(
      fc.property(
        shape,
        fc.array(fc.integer({ min: 1, max: 3 }), { minLength: 1, maxLength: 4 }),
        fc.nat(),
        (dims, rows, axisSeed) => {
          const axis = axisSeed % dims.length;
          let counter = 0;
          const parts = rows.map((size) => {
            const partDims = dims.map((length, index) => (index === axis ? size : length));
            const count = partDims.reduce((product, length) => product * length, 1);
            return tensor(
              'float32',
              Float32Array.from({ length: count }, () => counter++),
              partDims,
            );
          });
          const whole = concatAlongAxis(parts, axis);
          expect(whole.dims[axis]).toBe(rows.reduce((sum, size) => sum + size, 0));
          const back = splitAlongAxis(whole, axis, rows);
          back.forEach((piece, index) => {
            expect(piece.dims).toEqual(parts[index].dims);
            expect(Array.from(piece.data as Float32Array)).toEqual(Array.from(parts[index].data as Float32Array));
          });
        },
      ),
    );
  });

  it('stacks along the middle axis the way Silero lays out its state', () => {
    const a = tensor('float32', Float32Array.from([1, 2, 3, 4]), [2, 1, 2]);
    const b = tensor('float32', Float32Array.from([5, 6, 7, 8]), [2, 1, 2]);
    const stacked = concatAlongAxis([a, b], 1);
    expect(stacked.dims).toEqual([2, 2, 2]);
    expect(Array.from(stacked.data as Float32Array)).toEqual([1, 2, 5, 6, 3, 4, 7, 8]);
  });
});
