import fs from 'node:fs/promises';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { RenderPool } from '../actors/render/pool.ts';
import { SharedIdleFrames, idleLookKey } from '../actors/render/idle-frames.ts';
import { createRenderer } from '../actors/render/renderers/index.ts';
import type { AvatarManifest, AvatarSource, I420Frame } from '../actors/render/types.ts';
import { request } from './render.fixtures.ts';

async function avatar(id: string): Promise<AvatarSource> {
  const dir = path.join(import.meta.dirname, '..', 'avatars', id);
  const manifest: AvatarManifest = JSON.parse(await fs.readFile(path.join(dir, 'manifest.json'), 'utf8'));
  return { id, dir, manifest };
}

describe('idle frames rendered once per avatar and shared by its sessions', () => {
  const pool = new RenderPool({ threads: 1 });
  afterAll(() => pool.close());

  it('two sessions of one rt avatar get the same frame object for the same idle look, identical to a fresh render', async () => {
    const source = await avatar('demo-rt');
    const a = await pool.open(source, 'rt');
    const b = await pool.open(source, 'rt');
    // 10 s of idle frames: every breathing step and blink step of the loop.
    const requests = Array.from({ length: 250 }, (_, i) => request(i));
    const fromA = await a.render(requests);
    const looks = new Set(requests.map((r) => idleLookKey('rt', r, 25)));
    expect(looks.size).toBeLessThanOrEqual(20);
    expect(pool.idleFrames.size).toBe(looks.size);
    const hitsBefore = pool.idleFrames.hits;
    const fromB = await b.render(requests.map((r) => ({ ...r })));
    expect(pool.idleFrames.hits - hitsBefore).toBe(250);
    for (let i = 0; i < requests.length; i++) expect(fromB[i]).toBe(fromA[i]);

    const inline = createRenderer('rt');
    await inline.prepare(source);
    for (const i of [0, 37, 113, 249])
      expect(Buffer.compare(Buffer.from(fromB[i].data), Buffer.from(inline.render(requests[i]).data))).toBe(0);
  });

  it('speech frames and models without a quantised idle loop are rendered every time', async () => {
    const source = await avatar('demo-rt');
    const rt = await pool.open(source, 'rt');
    const speaking = request(3, { speaking: true, mouth: { open: 0.6, wide: 0.2, round: 0 }, level: 0.5 });
    expect(idleLookKey('rt', speaking, 25)).toBeNull();
    const [first] = await rt.render([speaking]);
    const [second] = await rt.render([speaking]);
    expect(second).not.toBe(first);
    expect(Buffer.compare(Buffer.from(first.data), Buffer.from(second.data))).toBe(0);
    expect(idleLookKey('mock', request(3), 25)).toBeNull();
    expect(idleLookKey('rt_head', request(3), 25)).toBeNull();
    const mock = await pool.open(source, 'mock');
    const [m1] = await mock.render([request(5)]);
    const [m2] = await mock.render([request(5)]);
    expect(m2).not.toBe(m1);
  });

  it('a mixed batch keeps request order: cached idle frames and rendered speech frames in place', async () => {
    const source = await avatar('demo-rt');
    const rt = await pool.open(source, 'rt');
    const idle = await rt.render([request(0)]);
    const batch = [
      request(0),
      request(1, { speaking: true, mouth: { open: 1, wide: 0, round: 0 }, level: 0.8 }),
      request(0),
    ];
    const frames = await rt.render(batch);
    expect(frames[0]).toBe(idle[0]);
    expect(frames[2]).toBe(idle[0]);
    expect(Buffer.compare(Buffer.from(frames[1].data), Buffer.from(idle[0].data))).not.toBe(0);
  });
});

describe('SharedIdleFrames', () => {
  it('keeps at most its capacity, dropping the least recently used', () => {
    const cache = new SharedIdleFrames(2);
    const frame = (n: number): I420Frame => ({ width: 2, height: 2, data: new Uint8Array(6).fill(n) });
    cache.set('avatar', 'a', frame(1));
    cache.set('avatar', 'b', frame(2));
    expect(cache.get('avatar', 'a')?.data[0]).toBe(1);
    cache.set('avatar', 'c', frame(3));
    expect(cache.size).toBe(2);
    expect(cache.get('avatar', 'b')).toBeUndefined();
    expect(cache.get('avatar', 'a')?.data[0]).toBe(1);
    expect(cache.get('other', 'a')).toBeUndefined();
  });
});
