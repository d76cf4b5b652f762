import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { RenderPool } from '../actors/render/pool.ts';
import type { FrameRequest, I420Frame, ModelType } from '../actors/render/types.ts';
import type { CatalogEntry } from '../src/catalog/catalog.ts';
import { RENDERER_MAX_FAILURES } from '../src/sessions/media.ts';
import type { RenderOpener } from '../src/sessions/session-factory.ts';
import { json, post, startTestApp, type TestApp } from './helpers/app.ts';
import { labels, openSession, type LiveSession } from './helpers/conversation.ts';

/**
 * Opens real pool renderers, each wrapped so that the test can make its `render` throw, as a renderer whose
 * worker crashed mid-frame does (the pool rejects that task).
 */
class FailingRenderers implements RenderOpener {
  opens = 0;
  /** Renders that still throw; Infinity: every one, on every renderer opened. */
  failuresLeft = 0;
  constructor(private readonly pool: RenderPool) {}

  async open(avatar: CatalogEntry, model: ModelType, signal?: AbortSignal) {
    const handle = await this.pool.open(avatar, model, signal);
    this.opens++;
    return {
      width: handle.width,
      height: handle.height,
      fps: handle.fps,
      render: async (requests: FrameRequest[], renderSignal?: AbortSignal): Promise<I420Frame[]> => {
        if (this.failuresLeft > 0) {
          this.failuresLeft--;
          throw new Error('render worker exited mid-task');
        }
        return handle.render(requests, renderSignal);
      },
      close: () => handle.close(),
    };
  }
}

describe('renderer failures have consequences (spec 6.1 rule 5)', () => {
  const pool = new RenderPool({ threads: 1 });
  const renderers = new FailingRenderers(pool);
  let t: TestApp;
  let s: LiveSession | undefined;
  beforeAll(async () => {
    t = await startTestApp({ overrides: { render: renderers } });
  });
  afterEach(() => {
    s?.close();
    s = undefined;
    renderers.failuresLeft = 0;
  });
  afterAll(async () => {
    await t?.close();
    await pool.close();
  });

  it('a renderer that throws: SSE error then status idle, the renderer is reopened, the session lives on and speaks', async () => {
    s = await openSession(t);
    const opensBefore = renderers.opens;
    const from = s.sse.events.length;
    renderers.failuresLeft = 1;
    const error = await s.sse.waitFor((e) => e.type === 'error', 5_000, 'error event', from);
    expect(error.data).toMatchObject({ code: 'render_failed' });
    expect(error.data.message).toMatch(/render worker exited mid-task/);
    await s.sse.waitFor((e) => e.type === 'status' && e.data.stage === 'idle', 5_000, 'status idle', from);
    expect(labels(s.sse.events.slice(from)).filter((l) => l !== 'frame')).toEqual([
      'error',
      'status:error',
      'status:idle',
    ]);
    await expect.poll(() => renderers.opens, { timeout: 5_000 }).toBe(opensBefore + 1);

    // Renders again: new frames reach the receiver, and a turn plays through.
    const framesAfter = s.peer.frames.length;
    await s.peer.until(() => s!.peer.frames.length > framesAfter + 10, 10_000, 'frames after the reopen');
    const turnFrom = s.sse.events.length;
    expect((await post(t.baseUrl, `/sessions/${s.sessionId}/speak`, { text: 'Still here.' })).status).toBe(200);
    await s.sse.waitFor((e) => e.type === 'status' && e.data.stage === 'idle', 20_000, 'turn idle', turnFrom);
    expect(labels(s.sse.events.slice(turnFrom))).toContain('frame');
    expect((await json(await fetch(`${t.baseUrl}/sessions/${s.sessionId}`))).state).toBe('running');
  }, 60_000);

  it(`${RENDERER_MAX_FAILURES} failures within a minute: error, then session.terminated, and the session is gone`, async () => {
    s = await openSession(t);
    const from = s.sse.events.length;
    renderers.failuresLeft = Infinity;
    await s.sse.waitFor((e) => e.type === 'session.terminated', 10_000, 'session.terminated', from);
    const seen = s.sse.events.slice(from).filter((e) => e.type !== 'frame');
    const errors = seen.filter((e) => e.type === 'error').map((e) => e.data.code);
    expect(errors).toEqual([...Array(RENDERER_MAX_FAILURES - 1).fill('render_failed'), 'render_failed_repeatedly']);
    // Recoverable ones are followed by idle; the fatal one by session.terminated, the last event.
    expect(labels(seen)).toEqual([
      ...Array(RENDERER_MAX_FAILURES - 1)
        .fill(['error', 'status:error', 'status:idle'])
        .flat(),
      'error',
      'session.terminated',
    ]);
    await expect.poll(() => s!.sse.closed, { timeout: 5_000 }).toBe(true);
    await expect
      .poll(async () => (await fetch(`${t.baseUrl}/sessions/${s!.sessionId}/metrics`)).status, { timeout: 5_000 })
      .toBe(409);
  }, 60_000);
});
