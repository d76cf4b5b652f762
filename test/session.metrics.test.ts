import { Writable } from 'node:stream';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { json, post, startTestApp, type TestApp } from './helpers/app.ts';
import { openSession, type LiveSession } from './helpers/conversation.ts';
import { DEFAULT_VIDEO_DELAY_MS } from '../actors/media/playout.ts';

/** One service for the file, logging at info into `lines`; each describe opens a session of its own on it. */
let t: TestApp;
const lines: Array<Record<string, unknown>> = [];
beforeAll(async () => {
  const capture = new Writable({
    write(chunk, _encoding, done) {
      for (const line of String(chunk).split('\n')) if (line.trim()) lines.push(JSON.parse(line));
      done();
    },
  });
  t = await startTestApp({ logger: pino({ level: 'info' }, capture) });
});
afterAll(async () => {
  await t?.close();
});

describe('GET /sessions/{id}/metrics', () => {
  let s: LiveSession;
  beforeAll(async () => {
    s = await openSession(t);
  });
  afterAll(() => {
    s?.close();
  });

  const metrics = async () => json(await fetch(`${t.baseUrl}/sessions/${s.sessionId}/metrics`));

  it('times each turn from request to first audio and first sample sent, and interrupts to the flush', async () => {
    let from = s.sse.events.length;
    await post(t.baseUrl, `/sessions/${s.sessionId}/speak`, { text: 'Measure me.' });
    await s.sse.waitFor((e) => e.type === 'status' && e.data.stage === 'idle', 20_000, 'idle', from);
    from = s.sse.events.length;
    await post(t.baseUrl, `/sessions/${s.sessionId}/speak`, {
      text: 'A longer sentence that will be interrupted before it can finish playing.',
    });
    await s.sse.waitFor((e) => e.type === 'status' && e.data.stage === 'speaking', 20_000, 'speaking', from);
    await post(t.baseUrl, `/sessions/${s.sessionId}/interrupt`);
    await s.sse.waitFor((e) => e.type === 'status' && e.data.stage === 'idle', 5_000, 'idle', from);

    const body = await metrics();
    expect(body.session_id).toBe(s.sessionId);
    expect(body.state).toBe('running');
    expect(body.turns).toHaveLength(2);
    const [done, cut] = body.turns;
    expect(done).toMatchObject({ mode: 'speak', outcome: 'completed', llm_first_token_ms: null });
    expect(done.first_audio_queued_ms).toBeGreaterThan(0);
    expect(done.first_sample_sent_ms).toBeGreaterThanOrEqual(done.first_audio_queued_ms);
    expect(done.duration_ms).toBeGreaterThan(done.first_sample_sent_ms);
    expect(cut.outcome).toBe('interrupted');
    expect(cut.interrupt_to_flush_ms).toBeGreaterThanOrEqual(0);
    expect(cut.interrupt_to_flush_ms).toBeLessThan(1_000);
    expect(body.summary.first_sample_sent_ms_p50).toBeGreaterThan(0);
    expect(body.media).toMatchObject({
      fps: 25,
      peer_connected: true,
      video_delay_ms: DEFAULT_VIDEO_DELAY_MS,
      sse_consumers: 1,
    });
    expect(body.media.frames_sent).toBeGreaterThan(10);
    expect(body.media.media_ms).toBeGreaterThan(500);
  });

  it('answers 404 for unknown sessions and 409 for terminated ones', async () => {
    expect((await fetch(`${t.baseUrl}/sessions/00000000-0000-4000-8000-000000000000/metrics`)).status).toBe(404);
    const { session_id } = await json(await post(t.baseUrl, '/sessions', { avatar_id: 'demo-rt', model: 'rt' }));
    await fetch(`${t.baseUrl}/sessions/${session_id}`, { method: 'DELETE' });
    expect((await fetch(`${t.baseUrl}/sessions/${session_id}/metrics`)).status).toBe(409);
  });
});

describe('turns follow the session machine, not what SSE says', () => {
  let s: LiveSession;
  beforeAll(async () => {
    s = await openSession(t);
  });
  afterAll(() => {
    s?.close();
  });

  it('a pause mid-turn says status idle to clients but is no completed turn: outcome paused; turn started/finished are logged', async () => {
    const from = s.sse.events.length;
    await post(t.baseUrl, `/sessions/${s.sessionId}/speak`, {
      text: 'This sentence is cut short by a pause, long before it could finish playing out loud.',
    });
    await s.sse.waitFor((e) => e.type === 'status' && e.data.stage === 'speaking', 20_000, 'speaking', from);
    expect((await post(t.baseUrl, `/sessions/${s.sessionId}/pause`)).status).toBe(200);
    // Clients see the turn end as idle (spec 3.2) …
    await s.sse.waitFor((e) => e.type === 'status' && e.data.stage === 'idle', 5_000, 'idle after pause', from);

    const [turn] = (await json(await fetch(`${t.baseUrl}/sessions/${s.sessionId}/metrics`))).turns;
    // … but the turn did not complete: its audio never played out.
    expect(turn).toMatchObject({ mode: 'speak', outcome: 'paused' });
    expect(turn.duration_ms).toBeGreaterThan(0);

    // This session's turn lines (the service is shared with the other describe's session).
    const turnLogs = lines.filter(
      (l) => (l.msg === 'turn started' || l.msg === 'turn finished') && l.sessionId === s.sessionId,
    );
    expect(turnLogs.map((l) => [l.msg, l.sessionId, l.turnId, l.kind, l.outcome])).toEqual([
      ['turn started', s.sessionId, turn.turn_id, 'speak', undefined],
      ['turn finished', s.sessionId, turn.turn_id, 'speak', 'paused'],
    ]);
    expect((await post(t.baseUrl, `/sessions/${s.sessionId}/resume`)).status).toBe(200);
  }, 60_000);
});
