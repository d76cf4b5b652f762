/** A render worker thread that dies costs the task it was running, never the service or the pool. */
import fs from 'node:fs/promises';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { RenderPool } from '../actors/render/pool.ts';
import type { AvatarManifest, AvatarSource } from '../actors/render/types.ts';
import { request } from './render.fixtures.ts';

async function avatar(id: string): Promise<AvatarSource> {
  const dir = path.join(import.meta.dirname, '..', 'avatars', id);
  const manifest: AvatarManifest = JSON.parse(await fs.readFile(path.join(dir, 'manifest.json'), 'utf8'));
  return { id, dir, manifest };
}

describe('render pool: a worker thread that dies', () => {
  const logged: Array<{ obj: object; msg?: string }> = [];
  const pool = new RenderPool({ threads: 1, logger: { error: (obj, msg) => logged.push({ obj, msg }) } });
  afterAll(() => pool.close());

  it('mid-render rejects that render with an error; the pool renders on a replacement thread', async () => {
    const handle = await pool.open(await avatar('demo-rt'), 'rt');
    const [worker] = pool.workers;
    const rendering = handle.render(Array.from({ length: 200 }, (_, i) => request(i))).catch((error: Error) => error);
    await worker.terminate();
    const outcome = await rendering;
    expect(outcome).toBeInstanceOf(Error);
    expect((outcome as Error).message).toMatch(/worker exited/);

    const frames = await handle.render([request(1), request(2)]);
    expect(frames).toHaveLength(2);
    expect(pool.workers).toHaveLength(1);
    expect(pool.workers[0]).not.toBe(worker);
  });

  it('between tasks is logged instead of crashing the service; the pool keeps rendering', async () => {
    const handle = await pool.open(await avatar('demo-rt'), 'mock');
    const [worker] = pool.workers;
    // What Node reports for an exception thrown inside an idle worker thread: piscina re-emits it on the pool.
    expect(() => worker.emit('error', new Error('uncaught inside the worker'))).not.toThrow();
    expect(logged.map((entry) => entry.msg)).toContain('render worker failed between tasks');
    expect(await handle.render([request(3)])).toHaveLength(1);
  });
});
