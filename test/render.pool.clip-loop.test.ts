import { rmSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { decodeClipFramesInto, decodeClipLoop, loopFrameAt } from '../actors/render/clip-loop.ts';
import { i420Size } from '../actors/render/i420.ts';
import { RenderPool } from '../actors/render/pool.ts';
import { SharedClipLoops } from '../actors/render/shared-clip-loops.ts';
import type { AvatarSource } from '../actors/render/types.ts';
import { OPEN_STEPS, SHAPE_STEPS } from '../actors/render/renderers/warp.ts';
import type { RenderTask, RenderTaskResult } from '../actors/render/tasks.ts';
import { CLIP_BUNDLE_FRAMES as FRAMES, makeClipBundle } from './helpers/clip-bundle.ts';
import { request } from './render.fixtures.ts';

const FRAME_BYTES = i420Size(512, 512);

describe('render pool: a video avatar loop is decoded once and shared', () => {
  let bundle: { source: AvatarSource; dir: string };
  const pool = new RenderPool({ threads: 2 });
  beforeAll(async () => {
    bundle = await makeClipBundle();
  });
  afterAll(async () => {
    await pool.close();
    rmSync(bundle.dir, { recursive: true, force: true });
  });

  it('two sessions on one clip avatar share one decoded loop, released (idempotently) when the last closes', async () => {
    const first = await pool.open(bundle.source, 'lipsync');
    const second = await pool.open(bundle.source, 'lipsync');
    expect(pool.clipLoops.decodes).toBe(1);
    expect(pool.clipLoops.size).toBe(1);
    expect(pool.clipLoops.bytes).toBe(FRAMES * FRAME_BYTES);
    first.close();
    first.close();
    expect(pool.clipLoops.size).toBe(1);
    expect((await second.render([request(3)]))[0].data.length).toBe(FRAME_BYTES);
    second.close();
    expect(pool.clipLoops.size).toBe(0);
    expect(pool.clipLoops.bytes).toBe(0);
    // Nothing holds it any more: the next session decodes it again.
    const third = await pool.open(bundle.source, 'lipsync');
    expect(pool.clipLoops.decodes).toBe(2);
    third.close();
  });

  it('a render worker that did not decode the loop renders its frames from the shared memory, decoding nothing', async () => {
    // A pool of its own, so the decode counts are this loop's alone.
    const own = new RenderPool({ threads: 2 });
    try {
      const lease = await own.clipLoops.acquire('other-worker', bundle.source);
      const { clip: _pngs, ...rest } = bundle.source;
      const avatar: AvatarSource = { ...rest, loop: lease.loop };
      const expected = await decodeClipLoop(bundle.source.clip!, 512, 512);
      const requests = [0, 5, 11, 17].map((i) => request(i));
      // Two tasks at once go to the two workers once both have started; until then one may take both.
      const byThread = new Map<number, RenderTaskResult>();
      for (let round = 0; round < 20 && byThread.size < 2; round++) {
        const results = await Promise.all(
          [0, 1].map(() =>
            own.run({ op: 'render', cacheKey: 'other-worker|lipsync', avatar, modelType: 'lipsync', requests }),
          ),
        );
        for (const result of results) byThread.set(result.threadId, result);
      }
      expect(byThread.size).toBe(2);
      expect([...byThread.values()].map((result) => result.loopFramesDecoded).sort((a, b) => a - b)).toEqual([
        0,
        FRAMES,
      ]);
      for (const result of byThread.values()) {
        result.frames.forEach((frame, k) =>
          expect(
            Buffer.compare(
              Buffer.from(frame.data),
              Buffer.from(loopFrameAt(expected, requests[k].frameIdx).frame.data),
            ),
          ).toBe(0),
        );
      }
      lease.release();
    } finally {
      await own.close();
    }
  });

  it('a video avatar builds no cached mouth pose, neither when its session opens nor at its first speech: each speaking frame warps the loop frame it shows', async () => {
    // One thread, so every task of the session lands on the worker that prepared it.
    const own = new RenderPool({ threads: 1 });
    try {
      const results: Array<{ op: RenderTask['op']; result: RenderTaskResult }> = [];
      const run = own.run.bind(own);
      vi.spyOn(own, 'run').mockImplementation(async (task: RenderTask, ...rest) => {
        const result = await run(task, ...rest);
        results.push({ op: task.op, result });
        return result;
      });
      const handle = await own.open(bundle.source, 'lipsync');
      const builtAtOpen = results.find((r) => r.op === 'prepare')!.result.mouthPosesBuilt;
      expect(builtAtOpen).toBe(0);
      // Speech through every pose the renderer quantises to.
      const poses = [];
      for (let open = 0; open < OPEN_STEPS; open++) {
        for (let wide = 0; wide < SHAPE_STEPS; wide++) {
          for (let round = 0; round < SHAPE_STEPS; round++)
            poses.push({
              open: open / (OPEN_STEPS - 1),
              wide: wide / (SHAPE_STEPS - 1),
              round: round / (SHAPE_STEPS - 1),
            });
        }
      }
      await handle.render(poses.map((mouth, i) => request(i, { mouth, speaking: true, level: 0.3 })));
      const renders = results.filter((r) => r.op === 'render');
      expect(renders.length).toBeGreaterThan(0);
      for (const { result } of renders) expect(result.mouthPosesBuilt).toBe(builtAtOpen);
      handle.close();
    } finally {
      await own.close();
    }
  });

  it('loops past the total bound hold fewer frames, and none once not one frame fits', async () => {
    const decode = (
      clip: Parameters<typeof decodeClipFramesInto>[0],
      loop: Parameters<typeof decodeClipFramesInto>[1],
    ) => decodeClipFramesInto(clip, loop);
    const loops = new SharedClipLoops(decode, (FRAMES + FRAMES / 2) * FRAME_BYTES);
    const whole = await loops.acquire('a', bundle.source);
    const half = await loops.acquire('b', bundle.source);
    const none = await loops.acquire('c', bundle.source);
    expect([whole.loop?.held, whole.loop?.stride]).toEqual([FRAMES, 1]);
    expect([half.loop?.held, half.loop?.stride]).toEqual([FRAMES / 2, 2]);
    expect(none.loop).toBeUndefined();
    expect(loops.bytes).toBeLessThanOrEqual((FRAMES + FRAMES / 2) * FRAME_BYTES);
    // Room made by a closed avatar goes to the next one opened.
    whole.release();
    none.release();
    const again = await loops.acquire('c', bundle.source);
    expect(again.loop?.held).toBe(FRAMES);
    for (const lease of [half, again]) lease.release();
    expect(loops.size).toBe(0);
  });
});
