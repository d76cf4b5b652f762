import { monitorEventLoopDelay } from 'node:perf_hooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { MAX_SSE_EVENT_BYTES, MAX_SSE_LINE_BYTES, SseDataDecoder, SseTooLargeError } from '../actors/upstream/sse.ts';
import { createOpenAiLlm } from '../actors/llm/providers/openai.ts';
import { MAX_JSON_REPLY_BYTES, MAX_UPSTREAM_BODY_BYTES } from '../actors/upstream/http.ts';
import { createOpenAiAsr } from '../actors/asr/providers/openai.ts';
import { createCloudAProvider } from '../actors/tts/providers/cloud_a.ts';
import { createCloudBProvider } from '../actors/tts/providers/cloud_b.ts';
import { createCompatHttpProvider } from '../actors/tts/providers/compat_http.ts';
import { UpstreamError } from '../actors/upstream/errors.ts';
import { startOpenAiUpstream, type OpenAiUpstream } from './fakes/openai-upstream.ts';
import { startEndlessSocketUpstream, startOversizedUpstream } from './fakes/oversized-upstream.ts';
import { caught } from './helpers/caught.ts';

const MiB = 1024 * 1024;
/** The endless line of the issue: 50 MB with no line end. */
const ENDLESS_LINE_BYTES = 50 * MiB;
/**
 * What a client may have made the server write beyond its own bound before it gave up: the loopback
 * kernel buffers (autotuned to a few MiB) and undici's stream buffer.
 */
const IN_FLIGHT_BYTES = 12 * MiB;
/** The event loop must never stall this long while a parser works through an oversized body. */
const MAX_LOOP_BLOCK_MS = 200;
const ABORT_SEEN_MS = 1_000;

async function collect<T>(iterable: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const item of iterable) out.push(item);
  return out;
}

async function eventually(condition: () => boolean, timeoutMs: number): Promise<boolean> {
  const started = performance.now();
  while (!condition()) {
    if (performance.now() - started > timeoutMs) return false;
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  return true;
}

/** Runs `body` while measuring the longest event-loop stall, in ms. */
async function withLoopDelay<T>(body: () => Promise<T>): Promise<{ result: T; maxDelayMs: number }> {
  const histogram = monitorEventLoopDelay({ resolution: 10 });
  histogram.enable();
  try {
    const result = await body();
    return { result, maxDelayMs: histogram.max / 1e6 };
  } finally {
    histogram.disable();
  }
}

describe('SSE decoding is bounded and linear', () => {
  const sseBytes = fc.constantFrom('\n', '\r\n', '\r');

  it('yields the same payloads however the bytes are split, for every line-end style and multi-byte text', () => {
    fc.assert(
      fc.property(
        fc.array(
          fc.string({ unit: 'grapheme', maxLength: 12 }).filter((s) => !/[\r\n]/.test(s)),
          { minLength: 1, maxLength: 5 },
        ),
        sseBytes,
        fc.array(fc.nat(), { maxLength: 10 }),
        (payloads, eol, cuts) => {
          const wire = Buffer.from(
            `: ping${eol}${eol}${payloads.map((p) => `data: ${p}${eol}${eol}`).join('')}`,
            'utf8',
          );
          const points = [...new Set(cuts.map((c) => c % (wire.length + 1)))].sort((a, b) => a - b);
          const decoder = new SseDataDecoder();
          const out: string[] = [];
          let previous = 0;
          for (const point of [...points, wire.length]) {
            out.push(...decoder.push(wire.subarray(previous, point)));
            previous = point;
          }
          out.push(...decoder.flush());
          expect(out).toEqual(payloads);
        },
      ),
    );
  });

  it('an endless line throws SseTooLargeError as soon as it passes 1 MiB', () => {
    const decoder = new SseDataDecoder({ label: 'LLM' });
    const chunk = Buffer.alloc(64 * 1024, 'x');
    let fed = 0;
    const error = (() => {
      try {
        decoder.push('data: ');
        for (; fed < ENDLESS_LINE_BYTES; fed += chunk.length) decoder.push(chunk);
      } catch (thrown) {
        return thrown;
      }
      return undefined;
    })();
    expect(error).toBeInstanceOf(SseTooLargeError);
    expect(error).toBeInstanceOf(UpstreamError);
    expect((error as Error).message).toMatch(/LLM upstream sent an SSE line over 1048576 bytes/);
    expect(fed).toBeLessThanOrEqual(MAX_SSE_LINE_BYTES);
  });

  it('an event made of many small data lines is bounded too', () => {
    const decoder = new SseDataDecoder();
    const line = Buffer.from(`data: ${'y'.repeat(1000)}\n`);
    let fed = 0;
    expect(() => {
      for (; fed < 10 * MAX_SSE_EVENT_BYTES; fed += line.length) decoder.push(line);
    }).toThrow(/SSE event over 1048576 bytes/);
    // Thrown at the first line past the bound (the wire adds 7 bytes of `data: ` and line end per line).
    expect(fed).toBeLessThanOrEqual(MAX_SSE_EVENT_BYTES * (line.length / 1000));
  });
});

describe('upstream streams are bounded: an oversized body aborts the request', () => {
  let upstream: OpenAiUpstream;

  beforeAll(async () => {
    upstream = await startOpenAiUpstream();
  });
  afterAll(async () => {
    await upstream?.close();
  });

  it('LLM: one 50 MB SSE line → UpstreamError, the upstream request aborted, the event loop never blocked', async () => {
    upstream.setScenario({
      chat: { replyTokens: ['Hello'], endlessLineBytes: ENDLESS_LINE_BYTES, failStatus: undefined },
    });
    const writtenBefore = upstream.oversizedBytesWritten();
    const llm = createOpenAiLlm({ baseUrl: upstream.baseUrl });
    const deltas: string[] = [];
    const { result: error, maxDelayMs } = await withLoopDelay(() =>
      caught(
        (async () => {
          for await (const delta of llm.stream({
            messages: [{ role: 'user', content: 'hi' }],
            signal: AbortSignal.timeout(30_000),
          }))
            deltas.push(delta);
        })(),
      ),
    );
    expect(deltas).toEqual(['Hello']);
    expect(error).toBeInstanceOf(UpstreamError);
    expect((error as Error).message).toMatch(/SSE line over 1048576 bytes/);
    expect(await eventually(() => upstream.openStreams() === 0, ABORT_SEEN_MS)).toBe(true);
    expect(upstream.oversizedBytesWritten() - writtenBefore).toBeLessThan(MAX_SSE_LINE_BYTES + IN_FLIGHT_BYTES);
    expect(maxDelayMs).toBeLessThan(MAX_LOOP_BLOCK_MS);
  });

  it('LLM: a 50 MB error page → 502-bound UpstreamError with its start, the rest never read', async () => {
    upstream.setScenario({ chat: { failStatus: 500, failBodyBytes: ENDLESS_LINE_BYTES, endlessLineBytes: undefined } });
    const writtenBefore = upstream.oversizedBytesWritten();
    const llm = createOpenAiLlm({ baseUrl: upstream.baseUrl });
    const error = await caught(
      collect(llm.stream({ messages: [{ role: 'user', content: 'hi' }], signal: AbortSignal.timeout(30_000) })),
    );
    expect(error).toBeInstanceOf(UpstreamError);
    expect((error as Error).message).toMatch(/LLM upstream returned 500: <html><body>upstream exploded x+…$/);
    expect(upstream.oversizedBytesWritten() - writtenBefore).toBeLessThan(IN_FLIGHT_BYTES);
    upstream.setScenario({ chat: { failStatus: undefined, failBodyBytes: undefined } });
  });

  it('ASR: a 50 MB transcription reply → UpstreamError, the rest never read', async () => {
    upstream.setScenario({ transcription: { oversizedBodyBytes: ENDLESS_LINE_BYTES } });
    const writtenBefore = upstream.oversizedBytesWritten();
    const asr = createOpenAiAsr({ baseUrl: upstream.baseUrl });
    const error = await caught(
      asr.transcribe({ pcm: new Int16Array(1600), sampleRate: 16_000, signal: AbortSignal.timeout(30_000) }),
    );
    expect(error).toBeInstanceOf(UpstreamError);
    expect((error as Error).message).toMatch(/ASR upstream sent a reply over 1048576 bytes/);
    expect(upstream.oversizedBytesWritten() - writtenBefore).toBeLessThan(MAX_JSON_REPLY_BYTES + IN_FLIGHT_BYTES);
    upstream.setScenario({ transcription: { oversizedBodyBytes: undefined } });
  });

  it('TTS cloud_a: one 50 MB SSE line → UpstreamError, the upstream connection closed', async () => {
    const fake = await startOversizedUpstream({
      contentType: 'text/event-stream',
      prefix: 'id:1\nevent:result\n:HTTP_STATUS/200\ndata:{"output":{"audio":{"data":"',
      bodyBytes: ENDLESS_LINE_BYTES,
    });
    try {
      const provider = createCloudAProvider({ baseUrl: fake.url, apiKey: 'k' });
      const { result: error, maxDelayMs } = await withLoopDelay(() =>
        caught(
          collect(
            provider.synthesize({
              text: 'Hello.',
              voice: null,
              model: null,
              sampleRate: 16_000,
              signal: AbortSignal.timeout(30_000),
            }),
          ),
        ),
      );
      expect(error).toBeInstanceOf(UpstreamError);
      expect((error as Error).message).toMatch(/cloud_a upstream sent an SSE line over 1048576 bytes/);
      expect(fake.bytesWritten()).toBeLessThan(MAX_SSE_LINE_BYTES + IN_FLIGHT_BYTES);
      expect(await eventually(() => fake.openResponses() === 0, ABORT_SEEN_MS)).toBe(true);
      expect(maxDelayMs).toBeLessThan(MAX_LOOP_BLOCK_MS);
    } finally {
      await fake.close();
    }
  });

  it('TTS compat_http: a 100 MB audio body → UpstreamError at the 32 MiB bound, the upstream connection closed', async () => {
    const fake = await startOversizedUpstream({ contentType: 'audio/wav', bodyBytes: 100 * MiB });
    try {
      const provider = createCompatHttpProvider({ baseUrl: fake.url });
      const error = await caught(
        collect(
          provider.synthesize({
            text: 'Hello.',
            voice: null,
            model: null,
            sampleRate: 16_000,
            signal: AbortSignal.timeout(30_000),
          }),
        ),
      );
      expect(error).toBeInstanceOf(UpstreamError);
      expect((error as Error).message).toMatch(/compat_http: upstream response is over 33554432 bytes/);
      expect(fake.bytesWritten()).toBeLessThan(MAX_UPSTREAM_BODY_BYTES + IN_FLIGHT_BYTES);
      expect(await eventually(() => fake.openResponses() === 0, ABORT_SEEN_MS)).toBe(true);
    } finally {
      await fake.close();
    }
  });

  it('TTS cloud_b: a socket message over 1 MiB fails the sentence instead of being buffered', async () => {
    const fake = await startEndlessSocketUpstream({ frameBytes: 2 * MiB, totalBytes: 2 * MiB });
    try {
      const provider = createCloudBProvider({ baseUrl: fake.url, apiKey: 'k' });
      const error = await caught(
        collect(
          provider.synthesize({
            text: 'Hello.',
            voice: null,
            model: null,
            sampleRate: 16_000,
            signal: AbortSignal.timeout(30_000),
          }),
        ),
      );
      expect(error).toBeInstanceOf(UpstreamError);
      expect((error as Error).message).toMatch(/cloud_b: socket error: Max payload size exceeded/);
    } finally {
      await fake.close();
    }
  });

  it('TTS cloud_b: while the consumer waits (playout full), the socket stops reading: the upstream cannot push 64 MiB into memory', async () => {
    const fake = await startEndlessSocketUpstream({ frameBytes: 4096, totalBytes: 64 * MiB });
    try {
      const provider = createCloudBProvider({ baseUrl: fake.url, apiKey: 'k' });
      const iterator = provider
        .synthesize({
          text: 'Hello.',
          voice: null,
          model: null,
          sampleRate: 16_000,
          signal: AbortSignal.timeout(30_000),
        })
        [Symbol.asyncIterator]();
      expect((await iterator.next()).done).toBe(false);
      // The consumer holds the first chunk (as the playout does when full) while the upstream keeps sending.
      await new Promise((resolve) => setTimeout(resolve, 1_500));
      const sentWhileWaiting = fake.bytesSent();
      await iterator.return?.(undefined);
      expect(sentWhileWaiting).toBeLessThan(IN_FLIGHT_BYTES);
    } finally {
      await fake.close();
    }
  });
});
