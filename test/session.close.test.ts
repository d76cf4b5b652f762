import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RenderPool } from '../actors/render/pool.ts';
import type { ModelType } from '../actors/render/types.ts';
import type { CatalogEntry } from '../src/catalog/catalog.ts';
import type { RenderOpener } from '../src/sessions/session-factory.ts';
import { post, startTestApp, type TestApp } from './helpers/app.ts';
import { openSession } from './helpers/conversation.ts';
import { sessionParts } from '../src/sessions/session.ts';

/** What happened when, across the parts a session closes. */
const order: string[] = [];

/** Real pool renderers whose release is noted in `order`. */
class NotedRenderers implements RenderOpener {
  constructor(private readonly pool: RenderPool) {}
  async open(avatar: CatalogEntry, model: ModelType, signal?: AbortSignal) {
    const handle = await this.pool.open(avatar, model, signal);
    return {
      width: handle.width,
      height: handle.height,
      fps: handle.fps,
      render: handle.render.bind(handle),
      close: () => {
        order.push('renderer');
        handle.close();
      },
    };
  }
}

/** Replaces `target[method]` with a version that notes `label` first. */
function note<T extends object, K extends keyof T>(
  target: T,
  method: K,
  label: string | ((...args: never[]) => string | null),
): void {
  const original = (target[method] as (...args: unknown[]) => unknown).bind(target);
  (target as Record<K, unknown>)[method] = (...args: unknown[]) => {
    const text = typeof label === 'string' ? label : label(...(args as never[]));
    if (text) order.push(text);
    return original(...args);
  };
}

describe('one close cascade: clock → WebRTC → renderer → recording → events', () => {
  const pool = new RenderPool({ threads: 1 });
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp({ overrides: { render: new NotedRenderers(pool) } });
  });
  afterAll(async () => {
    await t?.close();
    await pool.close();
  });

  it('closing twice (and DELETE twice at once) is safe, and every part closes once, in the stated order', async () => {
    const s = await openSession(t);
    const id = s.sessionId;
    expect((await post(t.baseUrl, `/sessions/${id}/rt-recording/start`)).status).toBe(200);
    await post(t.baseUrl, `/sessions/${id}/speak`, { text: 'Closing while I still speak.' });
    await s.sse.waitFor((e) => e.type === 'status' && e.data.stage === 'speaking', 20_000, 'speaking');

    const session = t.services.supervisor.liveSession(id)!;
    note(sessionParts(session).media.playout, 'close', 'clock');
    note(sessionParts(session).media.output, 'close', 'webrtc');
    note(t.services.recordings, 'stop', 'recording');
    note(sessionParts(session).events, 'publish', (type: string) =>
      type === 'session.terminated' ? 'event session.terminated' : null,
    );
    note(sessionParts(session).events, 'close', 'streams ended');
    order.length = 0;

    const deletes = await Promise.all([
      fetch(`${t.baseUrl}/sessions/${id}`, { method: 'DELETE' }),
      fetch(`${t.baseUrl}/sessions/${id}`, { method: 'DELETE' }),
    ]);
    expect(deletes.map((r) => r.status)).toEqual([200, 200]);
    await session.close();
    await session.close();
    expect((await fetch(`${t.baseUrl}/sessions/${id}`, { method: 'DELETE' })).status).toBe(200);

    expect(order).toEqual(['clock', 'webrtc', 'renderer', 'recording', 'event session.terminated', 'streams ended']);
    await expect.poll(() => s.sse.closed, { timeout: 5_000 }).toBe(true);
    expect(s.sse.of('session.terminated')).toHaveLength(1);
    expect(s.sse.events.at(-1)?.type).toBe('session.terminated');
    // The recording was finalised from what the clock produced before it stopped.
    const recording = await t.services.recordings.status(id);
    expect(recording.state).toBe('complete');
    expect(recording.duration_ms).toBeGreaterThan(0);
    s.close();
  }, 60_000);

  it('a session being torn down already reads as terminated, and a second DELETE answers once the tombstone is stored', async () => {
    const s = await openSession(t);
    const id = s.sessionId;
    const session = t.services.supervisor.liveSession(id)!;
    // Hold the close cascade open, as a slow encoder or peer would.
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    const close = session.close.bind(session);
    session.close = async () => {
      await held;
      await close();
    };

    const first = fetch(`${t.baseUrl}/sessions/${id}`, { method: 'DELETE' });
    await expect.poll(() => t.services.supervisor.liveSession(id), { timeout: 5_000 }).toBeUndefined();
    const during = await (await fetch(`${t.baseUrl}/sessions/${id}`)).json();
    expect(during).toMatchObject({ state: 'terminated', terminated_reason: 'deleted by client' });
    expect((await post(t.baseUrl, `/sessions/${id}/speak`, { text: 'Too late.' })).status).toBe(409);

    let secondAnswered = false;
    const second = fetch(`${t.baseUrl}/sessions/${id}`, { method: 'DELETE' }).then((r) => {
      secondAnswered = true;
      return r;
    });
    await new Promise((r) => setTimeout(r, 200));
    expect(secondAnswered).toBe(false);
    release();
    expect((await first).status).toBe(200);
    expect((await second).status).toBe(200);
    // Now answered from the stored tombstone.
    expect(await (await fetch(`${t.baseUrl}/sessions/${id}`)).json()).toMatchObject({
      state: 'terminated',
      terminated_reason: 'deleted by client',
    });
    s.close();
  }, 30_000);
});
