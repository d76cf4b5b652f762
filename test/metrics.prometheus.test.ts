import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { json, post, startTestApp, type TestApp } from './helpers/app.ts';
import { openSession, type LiveSession } from './helpers/conversation.ts';
import { parsePrometheusText, sampleValue, type MetricFamily } from './helpers/prometheus-text.ts';
import { prefersJson } from '../src/routes/metrics.ts';
import { ServiceMetrics } from '../src/metrics/service-metrics.ts';
import { SessionBus } from '../src/sessions/session-bus.ts';
import { SessionMetrics } from '../src/sessions/metrics.ts';
import { TurnPlayout } from '../actors/media/turn-playout.ts';

describe('the strict Prometheus text parser (test helper) rejects what a scraper would', () => {
  const bad: Array<[string, string]> = [
    ['a bad metric name', '1bad 1\n'],
    ['an unterminated label value', 'x{a="b} 1\n'],
    ['a bad escape', 'x{a="\\t"} 1\n'],
    ['a bad value', 'x 1,5\n'],
    ['a duplicate series', 'x{a="1"} 1\nx{a="1"} 2\n'],
    ['a TYPE after samples', 'x 1\n# TYPE x gauge\n'],
    ['two TYPE lines', '# TYPE x gauge\n# TYPE x counter\n'],
    ['a split family', 'x 1\ny 1\nx{a="1"} 1\n'],
    ['a negative counter', '# TYPE c counter\nc -1\n'],
    ['no trailing newline', 'x 1'],
    ['non-cumulative buckets', '# TYPE h histogram\nh_bucket{le="1"} 5\nh_bucket{le="+Inf"} 4\nh_sum 1\nh_count 4\n'],
    ['+Inf bucket ≠ count', '# TYPE h histogram\nh_bucket{le="+Inf"} 4\nh_sum 1\nh_count 5\n'],
  ];
  it.each(bad)('rejects %s', (_why, text) => {
    expect(() => parsePrometheusText(text)).toThrow();
  });

  it('reads labels with escapes, special values and histograms', () => {
    const families = parsePrometheusText(
      '# HELP h A histogram\n# TYPE h histogram\nh_bucket{k="a\\"b",le="0.1"} 1\nh_bucket{k="a\\"b",le="+Inf"} 2\nh_sum{k="a\\"b"} 0.3\nh_count{k="a\\"b"} 2\n' +
        '# TYPE g gauge\ng NaN\ng{x="y"} -Inf 1700000000000\n',
    );
    expect(families.get('h')).toMatchObject({ type: 'histogram', help: 'A histogram' });
    expect(sampleValue(families, 'h_count', { k: 'a"b' })).toBe(2);
    expect(sampleValue(families, 'g', { x: 'y' })).toBe(-Infinity);
  });
});

describe('ServiceMetrics fed by a session bus (no service)', () => {
  it('a hands-free turn is timed from the end of speech; a transcribe turn from its upload; TTS first audio by the turn provider', async () => {
    const metrics = new ServiceMetrics({ version: 'test' });
    const bus = new SessionBus();
    metrics.followSession(bus);
    const turns = new SessionMetrics(metrics.turnObserver());
    turns.follow(bus);
    bus.emit('turn.started', { turnId: 'v1', kind: 'voice', ttsProvider: 'cloud_c', playout: new TurnPlayout() });
    bus.publish('tts', { stage: 'first_audio', ms_elapsed: 120 });
    bus.emit('voice.latency', { turnId: 'v1', transcriptMs: 200, firstTokenMs: 350, firstSampleMs: 640 });
    bus.emit('media.firstSample', { turnId: 'v1' });
    bus.emit('turn.finished', { turnId: 'v1', kind: 'voice', outcome: 'completed' });
    bus.emit('turn.started', { turnId: 't1', kind: 'transcribe', playout: new TurnPlayout() });
    bus.emit('media.firstSample', { turnId: 't1' });
    const families = parsePrometheusText((await metrics.render()).body);
    expect(sampleValue(families, 'avatar_end_of_speech_first_audio_seconds_count', { kind: 'voice' })).toBe(1);
    expect(sampleValue(families, 'avatar_end_of_speech_first_audio_seconds_sum', { kind: 'voice' })).toBeCloseTo(0.64);
    expect(sampleValue(families, 'avatar_end_of_speech_first_audio_seconds_count', { kind: 'transcribe' })).toBe(1);
    expect(sampleValue(families, 'avatar_tts_first_audio_seconds_sum', { provider: 'cloud_c' })).toBeCloseTo(0.12);
    expect(sampleValue(families, 'avatar_turns_total', { kind: 'voice', outcome: 'completed' })).toBe(1);
    expect(sampleValue(families, 'avatar_turn_first_audio_seconds_count', { kind: 'voice' })).toBe(1);
    expect(sampleValue(families, 'avatar_speak_first_audio_seconds_count')).toBe(0);
  });
});

describe('GET /metrics content negotiation', () => {
  it.each([
    [undefined, false],
    ['*/*', false],
    ['text/plain;version=0.0.4;q=1,*/*;q=0.1', false],
    ['application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1', false],
    ['application/json', true],
    ['application/json, text/plain;q=0.5', true],
    ['text/plain, application/json;q=0.9', false],
    ['application/json;q=0', false],
  ])('Accept %s → JSON %s', (accept, json) => {
    expect(prefersJson(accept)).toBe(json);
  });
});

describe('GET /metrics (Prometheus text from prom-client)', () => {
  let t: TestApp;
  let s: LiveSession;
  const scrape = async (): Promise<Map<string, MetricFamily>> => {
    const res = await fetch(`${t.baseUrl}/metrics`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('text/plain; version=0.0.4; charset=utf-8');
    return parsePrometheusText(await res.text());
  };

  beforeAll(async () => {
    t = await startTestApp();
    s = await openSession(t);
  }, 60_000);
  afterAll(async () => {
    s?.close();
    await t?.close();
  });

  it('parses strictly; every family is avatar_-prefixed with HELP and TYPE, including the process and event-loop metrics', async () => {
    const families = await scrape();
    for (const f of families.values()) {
      expect(f.name.startsWith('avatar_'), f.name).toBe(true);
      expect(f.help, f.name).toBeTruthy();
      expect(f.type, f.name).not.toBe('untyped');
    }
    const expected: Record<string, string> = {
      avatar_sessions: 'gauge',
      avatar_session_capacity: 'gauge',
      avatar_sessions_terminated_total: 'counter',
      avatar_turns_started_total: 'counter',
      avatar_turns_total: 'counter',
      avatar_turn_first_audio_seconds: 'histogram',
      avatar_speak_first_audio_seconds: 'histogram',
      avatar_chat_first_token_seconds: 'histogram',
      avatar_tts_first_audio_seconds: 'histogram',
      avatar_end_of_speech_first_audio_seconds: 'histogram',
      avatar_interrupt_to_silence_seconds: 'histogram',
      avatar_frames_sent_total: 'counter',
      avatar_frames_late_total: 'counter',
      avatar_frame_buffers_outstanding: 'gauge',
      avatar_frame_buffers_free: 'gauge',
      avatar_frame_buffers_over_released_total: 'counter',
      avatar_pool_threads: 'gauge',
      avatar_pool_busy_threads: 'gauge',
      avatar_pool_utilization: 'gauge',
      avatar_pool_queue_depth: 'gauge',
      avatar_pool_busy_seconds_total: 'counter',
      avatar_pool_tasks_total: 'counter',
      avatar_webrtc_peers_connected: 'gauge',
      avatar_sse_events_total: 'counter',
      avatar_build_info: 'gauge',
      avatar_nodejs_eventloop_lag_seconds: 'gauge',
      avatar_nodejs_eventloop_lag_p99_seconds: 'gauge',
      avatar_process_cpu_seconds_total: 'counter',
      avatar_process_resident_memory_bytes: 'gauge',
      avatar_nodejs_heap_size_used_bytes: 'gauge',
    };
    for (const [name, type] of Object.entries(expected)) expect(families.get(name)?.type, name).toBe(type);
    expect(sampleValue(families, 'avatar_sessions', { state: 'running' })).toBe(1);
    expect(sampleValue(families, 'avatar_session_capacity', { kind: 'active' })).toBe(t.config.maxSessions);
    expect(sampleValue(families, 'avatar_pool_threads', { pool: 'render' })).toBeGreaterThanOrEqual(1);
    expect(sampleValue(families, 'avatar_webrtc_peers_connected')).toBe(1);
  });

  it('values move with a speak turn: turn counters, speak → first audio, TTS first audio, frames, render pool time', async () => {
    const before = await scrape();
    const from = s.sse.events.length;
    const res = await post(t.baseUrl, `/sessions/${s.sessionId}/speak`, { text: 'Count this turn, please.' });
    expect(res.status).toBe(200);
    await s.sse.waitFor((e) => e.type === 'status' && e.data.stage === 'idle', 20_000, 'idle', from);
    await expect
      .poll(
        async () => sampleValue(await scrape(), 'avatar_turns_total', { kind: 'speak', outcome: 'completed' }) ?? 0,
        { timeout: 5_000 },
      )
      .toBe((sampleValue(before, 'avatar_turns_total', { kind: 'speak', outcome: 'completed' }) ?? 0) + 1);
    const after = await scrape();
    const moved = (name: string, labels: Record<string, string> = {}) =>
      (sampleValue(after, name, labels) ?? 0) - (sampleValue(before, name, labels) ?? 0);
    expect(moved('avatar_turns_started_total', { kind: 'speak' })).toBe(1);
    expect(moved('avatar_speak_first_audio_seconds_count')).toBe(1);
    expect(moved('avatar_speak_first_audio_seconds_sum')).toBeGreaterThan(0);
    expect(moved('avatar_turn_first_audio_seconds_count', { kind: 'speak' })).toBe(1);
    const provider = t.config.ttsDefaultProvider;
    expect(moved('avatar_tts_first_audio_seconds_count', { provider })).toBe(1);
    expect(moved('avatar_sse_events_total', { event: 'frame' })).toBeGreaterThan(0);
    expect(moved('avatar_frames_sent_total')).toBeGreaterThan(5);
    expect(moved('avatar_pool_busy_seconds_total', { pool: 'render' })).toBeGreaterThan(0);
    expect(moved('avatar_pool_tasks_total', { pool: 'render' })).toBeGreaterThan(0);
    expect(moved('avatar_chat_first_token_seconds_count')).toBe(0);
  }, 40_000);

  it('an interrupt is timed to silence; the turn counts as interrupted', async () => {
    const before = await scrape();
    const from = s.sse.events.length;
    await post(t.baseUrl, `/sessions/${s.sessionId}/speak`, {
      text: 'A long sentence that is going to be cut off before it can finish, on purpose.',
    });
    await s.sse.waitFor((e) => e.type === 'status' && e.data.stage === 'speaking', 20_000, 'speaking', from);
    await post(t.baseUrl, `/sessions/${s.sessionId}/interrupt`);
    await s.sse.waitFor((e) => e.type === 'status' && e.data.stage === 'idle', 5_000, 'idle', from);
    const after = await scrape();
    expect(
      (sampleValue(after, 'avatar_interrupt_to_silence_seconds_count') ?? 0) -
        (sampleValue(before, 'avatar_interrupt_to_silence_seconds_count') ?? 0),
    ).toBe(1);
    expect(
      (sampleValue(after, 'avatar_turns_total', { kind: 'speak', outcome: 'interrupted' }) ?? 0) -
        (sampleValue(before, 'avatar_turns_total', { kind: 'speak', outcome: 'interrupted' }) ?? 0),
    ).toBe(1);
  }, 40_000);

  it('a deleted session is counted by reason and its frames stay in the totals', async () => {
    const before = await scrape();
    const { session_id } = await json(await post(t.baseUrl, '/sessions', { avatar_id: 'demo-rt', model: 'rt' }));
    expect(sampleValue(await scrape(), 'avatar_sessions', { state: 'created' })).toBe(1);
    await fetch(`${t.baseUrl}/sessions/${session_id}`, { method: 'DELETE' });
    s.close();
    await fetch(`${t.baseUrl}/sessions/${s.sessionId}`, { method: 'DELETE' });
    const after = await scrape();
    expect(sampleValue(after, 'avatar_sessions_terminated_total', { reason: 'deleted_by_client' })).toBe(
      (sampleValue(before, 'avatar_sessions_terminated_total', { reason: 'deleted_by_client' }) ?? 0) + 2,
    );
    expect(sampleValue(after, 'avatar_sessions', { state: 'running' })).toBe(0);
    expect(sampleValue(after, 'avatar_frames_sent_total')).toBeGreaterThanOrEqual(
      sampleValue(before, 'avatar_frames_sent_total')!,
    );
  });

  it('the Grafana dashboard (docs/grafana-dashboard.json) and docs/metrics.md query only metrics the service exports', async () => {
    const families = await scrape();
    // A labelled histogram has no samples before its first observation; its series names follow from its type.
    const exported = new Set(
      [...families.values()].flatMap((f) => [
        f.name,
        ...(f.type === 'histogram' ? ['_bucket', '_sum', '_count'].map((x) => f.name + x) : []),
      ]),
    );
    const docs = path.join(import.meta.dirname, '..', 'docs');
    const dashboard = JSON.parse(fs.readFileSync(path.join(docs, 'grafana-dashboard.json'), 'utf8')) as {
      panels: Array<{ targets?: Array<{ expr: string }> }>;
    };
    const exprs = dashboard.panels.flatMap((panel) => panel.targets ?? []).map((target) => target.expr);
    expect(exprs.length).toBeGreaterThan(15);
    const named = (text: string) => [...text.matchAll(/\bavatar_[a-z0-9_]+/g)].map((m) => m[0]);
    const missing = [...exprs.flatMap(named), ...named(fs.readFileSync(path.join(docs, 'metrics.md'), 'utf8'))].filter(
      (name) => !exported.has(name) && !name.endsWith('_'),
    );
    expect([...new Set(missing)]).toEqual([]);
  });

  it('Accept: application/json keeps the JSON session counters', async () => {
    const res = await fetch(`${t.baseUrl}/metrics`, { headers: { accept: 'application/json' } });
    expect(res.headers.get('content-type')).toMatch(/^application\/json/);
    const body = await json(res);
    expect(body.sessions).toMatchObject({ capacity: t.config.maxSessions });
    expect(body.sessions_terminated_total).toHaveProperty('orphaned');
  });
});
