import fs from 'node:fs/promises';
import path from 'node:path';
import { afterAll, describe, expect, it, vi } from 'vitest';
import { MAX_FRAMES_PER_TASK, RenderPool } from '../actors/render/pool.ts';
import { createRenderer } from '../actors/render/renderers/index.ts';
import { decodeTimecode } from '../actors/render/timecode.ts';
import type { AvatarManifest, AvatarSource } from '../actors/render/types.ts';
import type { RenderTask } from '../actors/render/tasks.ts';
import { request } from './render.fixtures.ts';

async function avatar(id: string): Promise<AvatarSource> {
  const dir = path.join(import.meta.dirname, '..', 'avatars', id);
  const manifest: AvatarManifest = JSON.parse(await fs.readFile(path.join(dir, 'manifest.json'), 'utf8'));
  return { id, dir, manifest };
}

describe('render pool', () => {
  const pool = new RenderPool({ threads: 2 });
  afterAll(() => pool.close());

  it('renders in worker threads, identical to inline rendering, in request order', async () => {
    const source = await avatar('demo-rt');
    const handle = await pool.open(source, 'rt');
    expect([handle.width, handle.height, handle.fps]).toEqual([512, 512, 25]);
    const requests = Array.from({ length: 12 }, (_, i) =>
      request(i, { mouth: { open: (i % 3) / 2, wide: 0, round: 0 } }),
    );
    const frames = await handle.render(requests);
    expect(frames).toHaveLength(12);
    const inline = createRenderer('rt');
    await inline.prepare(source);
    for (let i = 0; i < 12; i++)
      expect(Buffer.compare(Buffer.from(frames[i].data), Buffer.from(inline.render(requests[i]).data))).toBe(0);
    expect(pool.workers.length).toBe(2);
    handle.close();
    await expect(handle.render(requests)).rejects.toThrow(/closed/);
  });

  it('mock frames from workers carry their own timecode (order kept across split batches)', async () => {
    const handle = await pool.open(await avatar('demo-rt'), 'mock');
    const frames = await handle.render(Array.from({ length: 20 }, (_, i) => request(1000 + i)));
    expect(frames.map((frame) => decodeTimecode(frame)?.frameIdx)).toEqual(
      Array.from({ length: 20 }, (_, i) => 1000 + i),
    );
  });

  it('an aborted signal rejects without killing the workers', async () => {
    const handle = await pool.open(await avatar('demo-rt'), 'rt');
    const controller = new AbortController();
    controller.abort();
    await expect(handle.render([request(1)], controller.signal)).rejects.toThrow();
    expect(await handle.render([request(1)])).toHaveLength(1);
  });

  it('fails fast on a bundle it cannot prepare', async () => {
    const source = await avatar('demo-rt');
    await expect(pool.open({ ...source, dir: '/nonexistent' }, 'mock')).rejects.toThrow();
  });

  it('close() terminates the worker threads and is idempotent', async () => {
    const own = new RenderPool({ threads: 1 });
    await own.open(await avatar('demo-rt'), 'mock');
    const workers = [...own.workers];
    expect(workers.length).toBe(1);
    const exited = Promise.all(workers.map((worker) => new Promise((resolve) => worker.once('exit', resolve))));
    await own.close();
    await own.close();
    await exited;
    expect(own.workers.length).toBe(0);
    await expect(own.open(await avatar('demo-rt'), 'mock')).rejects.toThrow(/closed/);
  });

  it("a live session's frames asked for while its task is with the worker go to it together, in pts order, each to its own caller", async () => {
    const own = new RenderPool({ threads: 1 });
    try {
      const handle = await own.open(await avatar('demo-rt'), 'mock');
      const tasks: number[][] = [];
      const run = own.run.bind(own);
      vi.spyOn(own, 'run').mockImplementation((task: RenderTask, ...rest) => {
        if (task.op === 'render') tasks.push(task.requests.map((r) => r.frameIdx));
        return run(task, ...rest);
      });
      // As the media clock asks: one frame per call, the first while nothing of this session is with the worker.
      const asked = [0, 3, 1, 2, ...Array.from({ length: MAX_FRAMES_PER_TASK }, (_, i) => 4 + i)];
      const frames = await Promise.all(asked.map((idx) => handle.render([request(idx)])));
      expect(frames.map(([frame]) => decodeTimecode(frame)?.frameIdx)).toEqual(asked);
      // The first frame waited for nothing; the rest went in as few tasks as the bound allows, each in pts order.
      expect(tasks[0]).toEqual([0]);
      expect(tasks.slice(1)).toEqual([
        [1, 2, 3, ...Array.from({ length: MAX_FRAMES_PER_TASK - 3 }, (_, i) => 4 + i)],
        Array.from({ length: 3 }, (_, i) => MAX_FRAMES_PER_TASK + 1 + i),
      ]);
      handle.close();
    } finally {
      await own.close();
    }
  });
});
