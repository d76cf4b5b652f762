import { monitorEventLoopDelay } from 'node:perf_hooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { post, startTestApp, type TestApp } from './helpers/app.ts';
import { eventually, labels, openSession, type LiveSession } from './helpers/conversation.ts';
import { startOpenAiUpstream, type OpenAiUpstream } from './fakes/openai-upstream.ts';

const MiB = 1024 * 1024;
/** The upstream: one SSE line of 50 MB that never ends. */
const ENDLESS_LINE_BYTES = 50 * MiB;
/** The issue saw 150–300 MB; the bound is 1 MiB per line, so anything near 60 MB would be a regression. */
const MAX_RSS_GROWTH_BYTES = 60 * MiB;
/**
 * The issue saw the loop blocked for seconds; a parser that only scans new bytes stays far below this. The delay is
 * the whole test process's (the service, the in-process upstream writing its 50 MB line, the wrtc receiver, their
 * garbage collection): 11 ms alone on one core, and 229 ms once on one core shared with another test file (a VM at
 * half speed), so the bound sits between that and the seconds of a parser that rescans its buffer.
 */
const MAX_LOOP_BLOCK_MS = 500;
/** A whole chat turn on 2 shared cores. */
const TURN_MS = 20_000;

describe('chat against an upstream that streams one endless SSE line', () => {
  let upstream: OpenAiUpstream;
  let t: TestApp;
  let s: LiveSession;

  beforeAll(async () => {
    upstream = await startOpenAiUpstream({ chat: { replyTokens: ['Hello', '.'] } });
    t = await startTestApp({ env: { SERVICE_LLM_BASE_URL: upstream.baseUrl, SERVICE_LLM_MODEL: 'fake-model' } });
    s = await openSession(t);
    // One ordinary turn first, so synthesis and rendering have loaded what they keep and the RSS baseline is steady.
    const from = s.sse.events.length;
    expect((await post(t.baseUrl, `/sessions/${s.sessionId}/chat`, { prompt: 'warm up' })).status).toBe(200);
    await s.sse.waitFor((e) => e.type === 'status' && e.data.stage === 'idle', TURN_MS, 'warm-up idle', from);
  });

  afterAll(async () => {
    s?.close();
    await t?.close();
    await upstream?.close();
  });

  it('the turn ends with SSE error + idle, the upstream request is aborted, memory and the event loop stay bounded', async () => {
    upstream.setScenario({ chat: { replyTokens: ['Hello', '.'], endlessLineBytes: ENDLESS_LINE_BYTES } });
    const writtenBefore = upstream.oversizedBytesWritten();
    const from = s.sse.events.length;
    const rssBefore = process.memoryUsage.rss();
    let rssPeak = rssBefore;
    const sampler = setInterval(() => (rssPeak = Math.max(rssPeak, process.memoryUsage.rss())), 10);
    const loop = monitorEventLoopDelay({ resolution: 10 });
    loop.enable();
    try {
      expect((await post(t.baseUrl, `/sessions/${s.sessionId}/chat`, { prompt: 'Say hello.' })).status).toBe(200);
      const error = await s.sse.waitFor((e) => e.type === 'error', TURN_MS, 'SSE error', from);
      expect(error.data.code).toBe('llm_upstream_error');
      expect(error.data.message).toMatch(/SSE line over 1048576 bytes/);
      await s.sse.waitFor((e) => e.type === 'status' && e.data.stage === 'idle', TURN_MS, 'status idle', from);
      expect(await eventually(() => upstream.openStreams() === 0, 1_000)).toBe(true);
    } finally {
      clearInterval(sampler);
      loop.disable();
    }
    const rssGrowth = rssPeak - rssBefore;
    const maxLoopDelayMs = loop.max / 1e6;
    const writtenMiB = (upstream.oversizedBytesWritten() - writtenBefore) / MiB;
    if (process.env.DEBUG_BOUNDS) console.log({ rssGrowthMiB: rssGrowth / MiB, maxLoopDelayMs, writtenMiB });
    expect(rssGrowth).toBeLessThan(MAX_RSS_GROWTH_BYTES);
    expect(maxLoopDelayMs).toBeLessThan(MAX_LOOP_BLOCK_MS);
    // The client stopped reading at the bound: nowhere near the 50 MB the upstream would have sent.
    expect(writtenMiB).toBeLessThan(16);
    // Spec 6.1 rule 5: the error precedes the idle that ends the turn; the session takes new turns.
    const kinds = labels(s.sse.events.slice(from));
    expect(kinds.indexOf('error')).toBeLessThan(kinds.lastIndexOf('status:idle'));
    upstream.setScenario({ chat: { endlessLineBytes: undefined } });
    const next = s.sse.events.length;
    expect((await post(t.baseUrl, `/sessions/${s.sessionId}/chat`, { prompt: 'again' })).status).toBe(200);
    await s.sse.waitFor((e) => e.type === 'status' && e.data.stage === 'idle', TURN_MS, 'next turn idle', next);
    expect(labels(s.sse.events.slice(next))).not.toContain('error');
  });
});
