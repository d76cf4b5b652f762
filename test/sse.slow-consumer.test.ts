import { PassThrough, Writable } from 'node:stream';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { SSE_MAX_LAG_MS, SessionEventHub } from '../src/sessions/event-hub.ts';

/** A consumer that never reads: its socket buffer fills and stays full. */
function stalledConsumer(): Writable {
  return new Writable({ highWaterMark: 64, write: () => undefined });
}

function collectingConsumer(): { stream: PassThrough; text: () => string } {
  const stream = new PassThrough();
  let text = '';
  stream.on('data', (chunk) => (text += chunk.toString()));
  return { stream, text: () => text };
}

describe('SSE event hub', () => {
  afterEach(() => vi.useRealTimers());

  it('frames events as `event:`/`data:` lines separated by a blank line', () => {
    const hub = new SessionEventHub();
    const consumer = collectingConsumer();
    hub.attach(consumer.stream, () => undefined);
    hub.publish('status', { stage: 'thinking' });
    hub.publish('frame', { frame_idx: 3, pts_ms: 40 });
    expect(consumer.text()).toBe(
      'event: status\ndata: {"stage":"thinking"}\n\nevent: frame\ndata: {"frame_idx":3,"pts_ms":40}\n\n',
    );
  });

  it('disconnects a consumer more than ~5 s behind without affecting the others', () => {
    vi.useFakeTimers({ now: 1_000_000 });
    const hub = new SessionEventHub();
    const slow = stalledConsumer();
    const fast = collectingConsumer();
    let slowDropped = 0;
    let fastDropped = 0;
    hub.attach(slow, () => slowDropped++);
    hub.attach(fast.stream, () => fastDropped++);
    // Fill the stalled consumer's buffer, then keep publishing while time passes.
    for (let i = 0; i < 10; i++) hub.publish('llm', { delta: 'x'.repeat(100) });
    expect(slowDropped).toBe(0);
    vi.advanceTimersByTime(SSE_MAX_LAG_MS - 500);
    hub.publish('status', { stage: 'speaking' });
    expect(slowDropped).toBe(0);
    vi.advanceTimersByTime(1_000);
    hub.publish('status', { stage: 'idle' });
    expect(slowDropped).toBe(1);
    expect(slow.destroyed).toBe(true);
    expect(fastDropped).toBe(0);
    expect(fast.text()).toContain('event: status\ndata: {"stage":"idle"}');
    expect(hub.subscriberCount).toBe(1);
  });

  it('delivers the backlog of a consumer that catches up in time', async () => {
    const hub = new SessionEventHub();
    let release!: () => void;
    const received: string[] = [];
    let blocked = true;
    const consumer = new Writable({
      highWaterMark: 16,
      write(chunk, _enc, callback) {
        received.push(chunk.toString());
        if (blocked) release = callback;
        else callback();
      },
    });
    hub.attach(consumer, () => undefined);
    for (let i = 0; i < 5; i++) hub.publish('frame', { frame_idx: i, pts_ms: i * 40 });
    blocked = false;
    release();
    await new Promise((r) => setImmediate(r));
    const frames = received.join('').match(/"frame_idx":\d+/g);
    expect(frames).toEqual([0, 1, 2, 3, 4].map((i) => `"frame_idx":${i}`));
  });

  it('ends every stream on close, and publishes nothing afterwards', () => {
    const hub = new SessionEventHub();
    const consumer = collectingConsumer();
    let closed = 0;
    hub.attach(consumer.stream, () => closed++);
    hub.publish('session.terminated', {});
    hub.close();
    hub.close();
    hub.publish('status', { stage: 'idle' });
    expect(closed).toBe(1);
    expect(consumer.stream.writableEnded).toBe(true);
    expect(consumer.text()).toBe('event: session.terminated\ndata: {}\n\n');
  });
});
