import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { post, startTestApp, type TestApp } from './helpers/app.ts';
import {
  AUDIBLE_RMS,
  labels,
  openSession,
  pcmBytes,
  recordSentAudio,
  sleep,
  tone,
  waitForSilence,
  type LiveSession,
} from './helpers/conversation.ts';
import { AudioStreamClient, framesOf, streamPcm, kernelQueuedBytes, streamQueuedMs } from './helpers/ws-audio.ts';
import { PLAYOUT_HIGH_WATER_MS } from '../actors/media/playout.ts';
import { INBOUND_AUDIO_LIMIT_MS } from '../src/ws/audio-stream.ts';
import { sessionParts } from '../src/sessions/session.ts';

/** 20 ms at 16 kHz, the spec's recommended frame. */
const FRAME_BYTES = 640;
/** Socket-level answers (ack, error, close) come back within a round trip; slack for 2 shared cores. */
const REPLY_MS = 3_000;
/** Playout of the streamed audio plus receiver jitter buffer. */
const TURN_MS = 15_000;
/**
 * How long a stream played, read as the service sends it, in 10 ms chunks: an edge chunk may be partly silent and
 * resampling rings for a few ms. At a receiver on a host at half speed NetEq moved a clip's length by hundreds of ms.
 */
const SENT_DURATION_TOLERANCE_MS = 30;
/** The playout's high-water mark plus one in-flight frame and scheduling slack. */
const QUEUED_BOUND_MS = 2_500;

describe('WebSocket /sessions/{id}/speak_audio_stream', () => {
  let t: TestApp;
  let s: LiveSession;
  const clients: AudioStreamClient[] = [];
  const connect = (sessionId = s.sessionId) => {
    const client = AudioStreamClient.connect(t.baseUrl, sessionId);
    clients.push(client);
    return client;
  };
  const idleAfter = (from: number, timeout = TURN_MS) =>
    s.sse.waitFor((e) => e.type === 'status' && e.data.stage === 'idle', timeout, 'status idle', from);

  beforeAll(async () => {
    t = await startTestApp();
    s = await openSession(t);
  });

  afterAll(async () => {
    for (const client of clients) client.close();
    s?.close();
    await t?.close();
  });

  it('a session that is not started (or does not exist) gets an error message, then the close', async () => {
    const fresh = await openSession(t, { start: false });
    try {
      const client = connect(fresh.sessionId);
      const error = await client.waitMessage('error', REPLY_MS);
      expect(error.code).toBe('session_not_started');
      expect(typeof error.message).toBe('string');
      const closed = await client.waitClosed(REPLY_MS);
      expect(closed.at).toBeGreaterThanOrEqual(error.at);
    } finally {
      fresh.close();
      await fetch(`${t.baseUrl}/sessions/${fresh.sessionId}`, { method: 'DELETE' });
    }
    const missing = connect('00000000-0000-4000-8000-000000000000');
    expect((await missing.waitMessage('error', REPLY_MS)).code).toBe('session_not_found');
    await missing.waitClosed(REPLY_MS);
  });

  it('config → ack; 20 ms PCM frames become audible speech; eos flushes everything, then the server closes', async () => {
    const client = connect();
    await client.waitOpen();
    client.sendJson({ type: 'config', sample_rate: 16_000 });
    await client.waitMessage('ack', REPLY_MS);

    const from = s.sse.events.length;
    const sentAt = performance.now();
    const audioMs = 1_000;
    const played = recordSentAudio(t, s.sessionId);
    await streamPcm(client, framesOf(pcmBytes(tone(16_000, audioMs)), FRAME_BYTES));
    client.sendJson({ type: 'eos' });
    await s.peer.until(() => s.peer.firstAudible(sentAt, AUDIBLE_RMS) !== undefined, TURN_MS, 'audible stream');

    const closed = await client.waitClosed(TURN_MS);
    expect(closed.code).toBe(1000);
    const idle = await idleAfter(from);
    // Flushed first: the pipeline went idle (all audio played) before the server closed.
    expect(idle.at).toBeLessThanOrEqual(closed.at + 50);
    expect(client.messages.filter((m) => m.type === 'error')).toEqual([]);
    const kinds = labels(s.sse.events.slice(from));
    expect(kinds.indexOf('status:speaking')).toBeLessThan(kinds.indexOf('frame'));
    expect(kinds.at(-1)).toBe('status:idle');
    // All of it played, as one turn: read as the service sends it (`recordSentAudio`; heard at the receiver above).
    played.stop();
    expect(Math.abs(played.audibleMs() - audioMs)).toBeLessThanOrEqual(SENT_DURATION_TOLERANCE_MS);
    expect(kinds.filter((k) => k === 'status:speaking')).toHaveLength(1);
  });

  it('config sample_rate 48000: 48 kHz frames are resampled and play for their real duration', async () => {
    const client = connect();
    await client.waitOpen();
    client.sendJson({ type: 'config', sample_rate: 48_000 });
    await client.waitMessage('ack', REPLY_MS);
    const from = s.sse.events.length;
    const sentAt = performance.now();
    const audioMs = 800;
    const played = recordSentAudio(t, s.sessionId);
    await streamPcm(client, framesOf(pcmBytes(tone(48_000, audioMs)), 1_920));
    client.sendJson({ type: 'eos' });
    await s.peer.until(() => s.peer.firstAudible(sentAt, AUDIBLE_RMS) !== undefined, TURN_MS, 'audible stream');
    expect((await client.waitClosed(TURN_MS)).code).toBe(1000);
    await idleAfter(from);
    played.stop();
    expect(Math.abs(played.audibleMs() - audioMs)).toBeLessThanOrEqual(SENT_DURATION_TOLERANCE_MS);
  });

  it('an interrupt message gives SSE interrupted then idle and silence at the receiver; the socket stays usable', async () => {
    const client = connect();
    await client.waitOpen();
    const from = s.sse.events.length;
    const sentAt = performance.now();
    // 4 s of audio sent at real time; interrupt one second in.
    const frames = framesOf(pcmBytes(tone(16_000, 4_000)), FRAME_BYTES);
    const stop = new AbortController();
    const sending = streamPcm(client, frames, { signal: stop.signal });
    await s.peer.until(() => s.peer.firstAudible(sentAt, AUDIBLE_RMS) !== undefined, TURN_MS, 'audible stream');
    await sleep(500);
    stop.abort();
    await sending;
    const interruptAt = performance.now();
    client.sendJson({ type: 'interrupt' });
    await s.sse.waitFor((e) => e.type === 'status' && e.data.stage === 'interrupted', 1_500, 'interrupted', from);
    const idle = await idleAfter(from, 1_500);
    expect(idle.at - interruptAt).toBeLessThan(1_000);
    await waitForSilence(s.peer, interruptAt, 3_000);
    expect(client.closed).toBeNull();

    // A new burst on the same socket is a new turn.
    const again = s.sse.events.length;
    const secondAt = performance.now();
    await streamPcm(client, framesOf(pcmBytes(tone(16_000, 400)), FRAME_BYTES));
    client.sendJson({ type: 'eos' });
    expect((await client.waitClosed(TURN_MS)).code).toBe(1000);
    await idleAfter(again);
    // Heard at the receiver, which may still be decoding it when idle arrives on a loaded host.
    await s.peer.until(
      () => s.peer.firstAudible(secondAt, AUDIBLE_RMS) !== undefined,
      TURN_MS,
      'the second burst at the receiver',
    );
  });

  it('an odd byte count gets an invalid_audio error; the socket stays open and still streams', async () => {
    const client = connect();
    await client.waitOpen();
    client.sendPcm(Buffer.alloc(641, 1));
    const error = await client.waitMessage('error', REPLY_MS);
    expect(error.code).toBe('invalid_audio');
    const from = s.sse.events.length;
    const sentAt = performance.now();
    await streamPcm(client, framesOf(pcmBytes(tone(16_000, 300)), FRAME_BYTES));
    client.sendJson({ type: 'eos' });
    expect((await client.waitClosed(TURN_MS)).code).toBe(1000);
    await idleAfter(from);
    expect(s.peer.firstAudible(sentAt, AUDIBLE_RMS)).toBeDefined();
    expect(client.errors()).toHaveLength(1);
  });

  it('malformed control messages get an error each; the socket stays open (spec 6.2 closes only on unrecoverable errors)', async () => {
    const client = connect();
    await client.waitOpen();
    const cases = [
      ['not json', 'invalid_message'],
      [JSON.stringify({ type: 'config', sample_rate: 5 }), 'invalid_config'],
      [JSON.stringify({ type: 'dance' }), 'invalid_message'],
    ] as const;
    for (const [index, [payload, code]] of cases.entries()) {
      client.sendText(payload);
      expect((await client.waitErrorCount(index + 1, REPLY_MS)).code, payload).toBe(code);
    }
    expect(client.closed).toBeNull();
    // Still a working control channel: eos with nothing pending closes normally.
    client.sendJson({ type: 'eos' });
    expect((await client.waitClosed(REPLY_MS)).code).toBe(1000);
  });

  it('audio while a speak is in flight gets one busy error and is dropped; once idle, the same socket streams', async () => {
    const from = s.sse.events.length;
    expect(
      (await post(t.baseUrl, `/sessions/${s.sessionId}/speak`, { text: 'I am busy speaking a sentence.' })).status,
    ).toBe(200);
    const client = connect();
    await client.waitOpen();
    await streamPcm(client, framesOf(pcmBytes(tone(16_000, 100)), FRAME_BYTES));
    expect((await client.waitMessage('error', REPLY_MS)).code).toBe('busy');
    await idleAfter(from);
    expect(client.errors()).toHaveLength(1);
    expect(client.closed).toBeNull();

    const again = s.sse.events.length;
    const sentAt = performance.now();
    await streamPcm(client, framesOf(pcmBytes(tone(16_000, 300)), FRAME_BYTES));
    client.sendJson({ type: 'eos' });
    expect((await client.waitClosed(TURN_MS)).code).toBe(1000);
    await idleAfter(again);
    expect(s.peer.firstAudible(sentAt, AUDIBLE_RMS)).toBeDefined();
  });

  it('a client sending 10× faster than real time: reading pauses first (TCP back-pressure), then the excess is dropped with one audio_overflow; queues stay bounded; delete still closes it', async () => {
    // Its own session, so the flood cannot leak into other scenarios.
    const flood = await openSession(t);
    const live = t.services.supervisor.liveSession(flood.sessionId)!;
    const client = connect(flood.sessionId);
    await client.waitOpen();
    // 48 kHz input (1.9 MB for 20 s) also keeps the resampler busy under the flood.
    const inputRate = 48_000;
    client.sendJson({ type: 'config', sample_rate: inputRate });
    await client.waitMessage('ack', REPLY_MS);
    const audioMs = 20_000;
    const frames = framesOf(pcmBytes(tone(inputRate, audioMs)), (inputRate / 1000) * 20 * 2);
    const serverPort = Number(new URL(t.baseUrl).port);
    const startedAt = performance.now();
    const playedAt0 = sessionParts(live).media.playout.mediaMs;
    let maxQueuedMs = 0;
    let maxStreamQueuedMs = 0;
    let maxKernelQueued = 0;
    const sampler = setInterval(() => {
      maxQueuedMs = Math.max(maxQueuedMs, sessionParts(live).media.playout.queuedMs);
      maxStreamQueuedMs = Math.max(maxStreamQueuedMs, streamQueuedMs(live));
    }, 10);
    let sampling = true;
    const kernelSampler = (async () => {
      while (sampling) {
        const { unreadAtServer, unsentAtClient } = await kernelQueuedBytes(serverPort);
        maxKernelQueued = Math.max(maxKernelQueued, unreadAtServer + unsentAtClient);
        await sleep(10);
      }
    })();
    try {
      await streamPcm(client, frames, { speed: 10 });
      const sendCallsDoneMs = performance.now() - startedAt;
      // Keep watching for a while after the client handed everything to its socket.
      await sleep(2_500);
      sampling = false;
      await kernelSampler;
      const elapsedMs = performance.now() - startedAt;
      // Everything the server kept: played, queued for playout, queued in the stream.
      const consumedMs =
        sessionParts(live).media.playout.mediaMs -
        playedAt0 +
        sessionParts(live).media.playout.queuedMs +
        streamQueuedMs(live);
      const { unreadAtServer, unsentAtClient } = await kernelQueuedBytes(serverPort);
      if (process.env.DEBUG_BACKPRESSURE) {
        console.log({
          sendCallsDoneMs,
          elapsedMs,
          consumedMs,
          maxQueuedMs,
          maxStreamQueuedMs,
          maxKernelQueued,
          unreadAtServer,
          unsentAtClient,
        });
      }
      expect(sendCallsDoneMs).toBeLessThan(4_000);
      // Back-pressure came first: while the server stopped reading, what the client wrote waited in TCP.
      expect(maxKernelQueued).toBeGreaterThan(64 * 1024);
      // Bounded server memory: playout never holds much more than its high-water mark, the stream at most its bound.
      expect(maxQueuedMs).toBeLessThanOrEqual(QUEUED_BOUND_MS);
      expect(maxQueuedMs).toBeGreaterThanOrEqual(PLAYOUT_HIGH_WATER_MS - 200);
      expect(maxStreamQueuedMs).toBeLessThanOrEqual(INBOUND_AUDIO_LIMIT_MS + 10);
      // The client did not slow down, so the rest was read and dropped, once reported…
      expect(client.errors().map((e) => e.code)).toEqual(['audio_overflow']);
      expect(consumedMs).toBeLessThan(elapsedMs + QUEUED_BOUND_MS + INBOUND_AUDIO_LIMIT_MS);
      expect(consumedMs).toBeLessThan(audioMs / 2);
      // …rather than left in the kernel to be played at real time long after the client stopped.
      expect(unreadAtServer + unsentAtClient).toBeLessThan(64 * 1024);
    } finally {
      sampling = false;
      clearInterval(sampler);
    }
    // Deleting the session closes the socket promptly.
    const deleteAt = performance.now();
    expect((await fetch(`${t.baseUrl}/sessions/${flood.sessionId}`, { method: 'DELETE' })).status).toBe(200);
    const closed = await client.waitClosed(REPLY_MS);
    expect(closed.code).toBe(1001);
    expect(closed.at - deleteAt).toBeLessThan(REPLY_MS);
    flood.close();
  });

  it('deleting the session closes the socket', async () => {
    const client = connect();
    await client.waitOpen();
    client.sendJson({ type: 'config' });
    await client.waitMessage('ack', REPLY_MS);
    await fetch(`${t.baseUrl}/sessions/${s.sessionId}`, { method: 'DELETE' });
    const closed = await client.waitClosed(REPLY_MS);
    expect(closed.code).toBe(1001);
  });
});
